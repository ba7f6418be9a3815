"""``contrasuite compare image_text --tune``: the hard-negative settings of stage 2, chosen on validation only.

Every combination of :data:`GRID` (around 4 / 3 / 2, the setting tuned on the old image tower): each point is the
text-and-image-negatives arm (``reduced_text_image_negatives.yaml``) with ``config.hard_negatives.weight``,
``texts_per_pair`` and ``images_per_pair`` all set by overrides (so a later change of the shipped config leaves
these records current), trained 10 epochs from the same seed-0 ``align`` run as the ``pairs`` arm. Each point
is scored on the validation split only (:func:`score`, from the records' ``val_metrics``; a test metric is
never read) and the winner is the point with the highest score (:func:`winner`).
"""

from __future__ import annotations

import itertools
from typing import Any, Mapping, Sequence

from contrasuite.pipelines.api import ROOT, Arm, load_config

CONFIG = "configs/image_text/reduced_text_image_negatives.yaml"
GRID = {"weight": (1.0, 2.0, 4.0, 8.0), "texts_per_pair": (3, 6), "images_per_pair": (2, 4)}
"""The keys of ``config.hard_negatives`` tuned and their values: the weight of a hard negative in the softmax
denominators (one weight for negative captions and negative images: the config has no separate one), and how
many negative captions and negative images each pair brings. Tuned on the old image tower: 4, 3, 2
(docs/domains/image_text.md, session 5); weight 1 (no up-weighting) was added once weight 2 led the points
run first."""
KNOBS = tuple(GRID)
R1_ALLOWANCE = 1.0
"""Recall@1 points the goal lets the negatives cost (docs/results/clip_hard_negatives.md, "Goal")."""
COMP = ("comp_text/mean", "comp_image/mean")
R1 = ("i2t_r1", "t2i_r1")


def points() -> list[tuple[float, ...]]:
    """Every combination of :data:`GRID`'s values, the last knob varying fastest."""
    return list(itertools.product(*GRID.values()))


def point_name(point: Sequence[float]) -> str:
    """``w4_t3_i2``: the arm of a point (weight, texts and images per pair)."""
    weight, texts, images = point
    return f"w{weight:g}_t{texts}_i{images}"


def arms(split: tuple[str, ...] = ()) -> tuple[Arm, ...]:
    """Seed 0 only: ``align``, ``pairs`` from it, and one text-and-image-negatives arm per point from it."""
    common = dict(checkpoint="last", seeds=(0,))
    tuned = tuple(Arm(point_name(p), CONFIG, (*split, "config.init_from={after}",
                                              *(f"config.hard_negatives.{k}={v:g}" for k, v in zip(KNOBS, p))),
                      after="align", **common) for p in points())
    return (Arm("align", "configs/image_text/reduced_align.yaml", split, **common),
            Arm("pairs", "configs/image_text/reduced_pairs.yaml", (*split, "config.init_from={after}"),
                after="align", **common), *tuned)


def _mean(metrics: Mapping[str, float], keys: Sequence[str]) -> float:
    present = [metrics[k] for k in keys if k in metrics]
    if not present:
        raise KeyError(f"none of {list(keys)} among the validation metrics")
    return sum(present) / len(present)


def gains(point: Mapping[str, Any], pairs: Mapping[str, Any]) -> tuple[float, float]:
    """Validation ``(compositional, Recall@1)`` of a point minus the pairs-only arm's: compositional = mean of the
    text- and image-side means (those present: a tiny split may have no image-side comparison), Recall@1 = mean
    of both directions. Reads ``val_metrics`` only."""
    p, b = point["val_metrics"], pairs["val_metrics"]
    return _mean(p, COMP) - _mean(b, COMP), _mean(p, R1) - _mean(b, R1)


def score(point: Mapping[str, Any], pairs: Mapping[str, Any]) -> float:
    """The goal as one number, on validation: ``d_comp - max(0, -R1_ALLOWANCE - d_R1)``: the compositional gain,
    less one point per point of Recall@1 lost beyond the allowance."""
    d_comp, d_r1 = gains(point, pairs)
    return d_comp - max(0.0, -R1_ALLOWANCE - d_r1)


def winner(records: Sequence[Mapping[str, Any]]) -> str | None:
    """The arm of the point with the highest :func:`score` (the first declared on a tie); None until ``pairs``
    and a point are recorded."""
    by_arm = {r["arm"]: r for r in records}
    scored = [(score(by_arm[n], by_arm["pairs"]), -i, n) for i, n in enumerate(map(point_name, points()))
              if n in by_arm and "pairs" in by_arm]
    return max(scored)[2] if scored else None


def shipped() -> str:
    """The point the shipped :data:`CONFIG` sets (the arm ``text_image_negatives`` of the comparison trains it)."""
    hard = load_config(ROOT / CONFIG, []).resolved["config"]["hard_negatives"]
    return point_name(tuple(hard[k] for k in KNOBS))


def render_page(records: list[dict[str, Any]], command: str, page: str) -> str:
    """The tuning page: every point's validation metrics, gains and score, and the winner."""
    by_arm = {r["arm"]: r for r in records}
    best = winner(records)
    quick = any("run.epochs=1" in r.get("overrides", []) for r in records)
    machine = ", ".join(sorted({f"{r['machine'].get('precision')}, {r['machine'].get('threads')} thread(s) a run"
                                for r in records if "machine" in r})) or "-"
    lines = ["# CLIP hard negatives: stage-2 settings tuned on validation (emoji, reduced CPU protocol)", "",
             f"Rendered from the run records in `docs/results/records/{page}/` by `{command}` "
             "(`domains/image_text/tuning.py`), which trains the runs that have no current record.", "",
             ("QUICK SMOKE SETTINGS, not a result. " if quick else "") +
             "Seed 0 only, validation split only (10 % of the emoji groups, split seed 0; the test split is not "
             "read). Each point is the text-and-image-negatives arm (`" + CONFIG + "`, GNM pairs) trained 10 "
             "epochs from the same seed-0 `align` run as `pairs`, with "
             + ", ".join(f"`config.hard_negatives.{k}`" for k in KNOBS) + " all set, every combination of "
             + ", ".join(f"{k} {{{', '.join(f'{v:g}' for v in values)}}}" for k, values in GRID.items()) +
             f" (tuned on the old image tower: w4_t3_i2). CPU, {machine}. One weight scales both kinds of hard negative (captions and "
             "images) in the softmax denominators: the config has no separate image-side weight.", "",
             "Score = compositional gain - max(0, -1 - Recall@1 gain), gains against `pairs` on validation "
             "(compositional: mean of the text- and image-side means; Recall@1: mean of both directions): the "
             "goal's compositional gain, less a point for each Recall@1 point lost beyond the one it allows. The "
             "winner is the highest score (code: `tuning.winner`). All in %; one seed, so a few points are "
             "within noise (docs/domains/image_text.md, \"How few independent comparisons\").", "",
             "| point | weight | texts / pair | images / pair | val comp. text | val comp. image | val R@1 i2t | "
             "val R@1 t2i | comp. gain | R@1 gain | score |", "|---" * 11 + "|"]
    for name in ("align", "pairs"):
        if name in by_arm:
            m = by_arm[name]["val_metrics"]
            lines.append(f"| {name} | - | - | - | " + " | ".join(_cell(m, k) for k in (*COMP, *R1)) + " | - | - | - |")
    for p in points():
        name = point_name(p)
        if name not in by_arm:
            lines.append(f"| {name} | {p[0]:g} | {p[1]} | {p[2]} | not yet run |" + " |" * 6)
            continue
        m = by_arm[name]["val_metrics"]
        cells = [_cell(m, k) for k in (*COMP, *R1)]
        if "pairs" in by_arm:
            d_comp, d_r1 = gains(by_arm[name], by_arm["pairs"])
            cells += [f"{d_comp:+.1f}", f"{d_r1:+.1f}", f"{score(by_arm[name], by_arm['pairs']):+.1f}"]
        else:
            cells += ["-"] * 3
        label = f"**{name}** (winner)" if name == best else name
        lines.append(f"| {label} | {p[0]:g} | {p[1]} | {p[2]} | " + " | ".join(cells) + " |")
    lines.append("")
    if best:
        missing = [point_name(p) for p in points() if point_name(p) not in by_arm]
        lines += [f"Winner: **{best}**, the highest score" + (f" of the points run so far (not yet run: "
                                                              f"{', '.join(missing)})" if missing else "") + ". "
                  f"The shipped `{CONFIG}` (the comparison's `text_image_negatives` arm; `reduced_text_negatives.yaml`"
                  f" shares its weight and captions per pair) sets {shipped()}"
                  + (": the winner." if shipped() == best else ", NOT the winner."), ""]
    seconds = sum(r["timings"]["train_seconds"] for r in records)
    lines += ["## Runs", "", f"Training loop time of the recorded runs, summed: {seconds / 60:.1f} min (the trainer's "
              "`train_seconds`). Each run: `contrasuite train CONFIG OVERRIDES run.seed=0`, then `contrasuite eval "
              "RUN_DIR --checkpoint last` (`{after}`: the `align` run folder):", "", "```"]
    lines += [" ".join([f"{r['arm']}:", r["config"], *r["overrides"]]) for r in records]
    lines += ["```", ""]
    return "\n".join(lines)


def _cell(metrics: Mapping[str, float], key: str) -> str:
    return f"{metrics[key]:.1f}" if key in metrics else "-"
