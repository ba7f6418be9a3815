"""``contrasuite compare metric_learning``: every metric-learning loss on the emoji retrieval benchmark.

Arms: ``configs/metric_learning/emoji_<loss>.yaml`` of each loss (the reduced CPU protocol), each tested at
the checkpoint selected on validation Recall@1 (``best.pt``) on the unseen test classes, and two untrained
references through the same pipeline with ``run.epochs=0`` (the ``multi_similarity`` config): ``untrained``,
the ImageNet backbone's pooled 1280-d features (``config.model.embedding_dim=0``), and ``untrained_head``,
the same with the random 128-d head the losses start from. ``contrasuite.pipelines.compare`` trains each
(arm, seed) without a current record, in child processes, and renders ``docs/results/metric_learning.md``
from the records; the page's protocol text is read from the config, its timings from the records.

    contrasuite compare metric_learning [--seeds 0 1 2] [--jobs 2] [--arms circle supcon ...]
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any, Sequence

from contrasuite.pipelines.api import ROOT, Arm, Comparison, Effect, NO_OFFICIAL, compare_main, difference, load_config, mean_std

PAGE = "metric_learning"
CONFIG_DIR = "configs/metric_learning"
LOSSES = ("circle", "multi_similarity", "hyperbolic", "supcon", "pml_circle", "pml_multi_similarity")
BASELINES = {
    "untrained": ("multi_similarity", ("run.epochs=0", "config.model.embedding_dim=0")),
    "untrained_head": ("multi_similarity", ("run.epochs=0",)),
}
"""Untrained references: (config loss, overrides); evaluated like the trained runs, nothing trained."""
METRICS = ("recall@1", "recall@2", "recall@4", "recall@8", "map@r")
QUICK = ("run.max_steps=2", "config.data.image_size=32", "config.data.max_classes=8", "config.batch_size=8",
         "config.eval.batch_size=32")
"""``--quick``: two steps on the first 8 classes at 32 px (the untrained arms stay untrained)."""
DESCRIPTION = {
    "circle": ("ours", "`circle` (CircleLoss, m=0.4, gamma=80)"),
    "multi_similarity": ("ours", "`multi_similarity` (alpha=2, beta=50, base=0.5, MS mining eps=0.1)"),
    "hyperbolic": ("ours", "`hyperbolic_pairwise_ce` (c=0.1, t=0.2, clip_r=2.3; Poincare distance at test)"),
    "supcon": ("ours", "`infonce` with labels, SupCon L_out (t=0.1)"),
    "pml_circle": ("PML", "`pml_circle` (pytorch-metric-learning CircleLoss, m=0.4, gamma=80)"),
    "pml_multi_similarity": ("PML", "`pml_multi_similarity` (PML MultiSimilarityLoss + MultiSimilarityMiner)"),
    "untrained": ("-", "no training: ImageNet EfficientNet-Lite0, pooled 1280-d features"),
    "untrained_head": ("-", "no training: the same with the random 128-d head the losses start from"),
}
# Published CUB-200-2011 Recall@1 of each method's paper, for context only (other backbones, 224 px).
PUBLISHED = {
    "circle": "66.7 (BN-Inception, 512-d; Sun et al., CVPR 2020, Table 4; quoted from memory in our research notes, to verify)",
    "multi_similarity": "65.7 (BN-Inception, 512-d; Wang et al., CVPR 2019, and the official repository README)",
    "hyperbolic": "85.6 (Hyp-ViT, ViT-S/16; Ermolov et al., CVPR 2022, as listed on PapersWithCode)",
    "supcon": "none (Khosla et al., NeurIPS 2020 report classification, not CUB retrieval)",
    "pml_circle": "same paper as `circle`",
    "pml_multi_similarity": "same paper as `multi_similarity`",
    "untrained": "-",
    "untrained_head": "-",
}

_R1 = "test Recall@1 (%), unseen emoji classes, cross-style retrieval"
_PROTOCOL = ("reduced emoji: 64 px, EfficientNet-Lite0 blocks 5-15 + 128-d head, 6 epochs, checkpoint selected on "
             "validation Recall@1")
_BASELINE = "supcon"
"""The page's softmax baseline (SupCon-style InfoNCE with labels), against which the losses' claims are measured."""


def _recall_effect(method: str, claim: str, arm: str, baseline: str, official: str) -> Effect:
    """The claim ``claim`` of ``method``, measured as ``arm`` minus ``baseline`` in test Recall@1 on this page (no
    official training code of these losses runs here: ``official`` says why)."""
    return Effect(method, claim, PAGE, arm, baseline, "recall@1", _R1, _PROTOCOL, official=official,
                  settled=NO_OFFICIAL)


EFFECTS = (
    _recall_effect("Circle loss",
                   "CUB-200 R@1 66.7 with BN-Inception 512-d, above MS loss's 65.7 (CVPR 2020, arXiv:2002.10857, "
                   "Table 4; [memory, verify] in the research notes 3.1)",
                   "circle", _BASELINE,
                   official="no official code (docs/objectives/circle.md); ours gives PML CircleLoss's loss and "
                            "gradients (tests), and pml_circle is an arm of the page"),
    _recall_effect("Circle loss (against MS loss)",
                   "CUB-200 R@1 66.7 vs MS 65.7, BN-Inception 512-d (CVPR 2020, arXiv:2002.10857, Table 4; "
                   "[memory, verify] in the research notes 3.1)",
                   "circle", "multi_similarity", official="no official code (docs/objectives/circle.md)"),
    _recall_effect("Multi-Similarity loss",
                   "CUB-200 R@1 60.6 -> 65.7 over the previous state of the art, BN-Inception 512-d (abstract and "
                   "official README, CVPR 2019, arXiv:1904.06627)",
                   "multi_similarity", _BASELINE,
                   official="the official MalongTech/research-ms-loss training is not run here; ours gives PML "
                            "MultiSimilarityLoss + miner's loss and gradients (tests), and pml_multi_similarity is "
                            "an arm"),
    _recall_effect("Hyperbolic pairwise CE",
                   "CUB-200 R@1 85.6 with Hyp-ViT, ViT-S/16 (CVPR 2022, arXiv:2203.10833, as listed on "
                   "PapersWithCode; the paper's ablation rows not retrieved)",
                   "hyperbolic", _BASELINE,
                   official="the official htdt/hyp_metric training (ViT, GPU) is not run here"),
)
"""The claims this comparison measures (``contrasuite compare effects``): each loss against the page's baseline."""


def arms() -> tuple[Arm, ...]:
    """The untrained references, then every loss, each tested at ``best.pt``."""
    return (*(Arm(name, f"{CONFIG_DIR}/emoji_{loss}.yaml", overrides, checkpoint="best")
              for name, (loss, overrides) in BASELINES.items()),
            *(Arm(loss, f"{CONFIG_DIR}/emoji_{loss}.yaml", checkpoint="best") for loss in LOSSES))


def extra(arm: Arm, run: Any) -> dict[str, Any]:
    """Each epoch's seconds (data and training steps, ``epoch_seconds.jsonl``; none when nothing was trained)."""
    path = Path(run.run_dir) / "epoch_seconds.jsonl"
    lines = path.read_text().splitlines() if path.is_file() else []
    return {"epoch_seconds": [json.loads(line)["seconds"] for line in lines if line.strip()]}


# -- the page -----------------------------------------------------------------------------------------------

def protocol(records: list[dict[str, Any]], overrides: Sequence[str] = ()) -> str:
    """The reduced protocol in words, read from the resolved ``emoji_multi_similarity.yaml`` (every loss's config
    extends it) with ``overrides``; batches per epoch from the trained records."""
    loaded = load_config(ROOT / CONFIG_DIR / "emoji_multi_similarity.yaml", list(overrides))
    c, run = loaded.config, loaded.run
    trained = [r["timings"] for r in records if r["timings"].get("epochs_run")]
    per_epoch = sorted({t["steps_run"] // t["epochs_run"] for t in trained})
    batches = f" of {', '.join(map(str, per_epoch))} batches" if per_epoch else ""
    steps = f" (at most {run.max_steps} steps)" if run.max_steps else ""
    frozen = (f"stem and first {c.model.freeze_blocks} of 16 MBConv blocks frozen" if c.model.freeze_blocks
              else "the whole network trained")
    cached = (" and their outputs computed once (eval mode) and cached on disk" if c.model.cache_frozen else "")
    trained_part = f"blocks {c.model.freeze_blocks}-15" if c.model.freeze_blocks else "the network"
    head = f"a {c.model.embedding_dim}-d linear head" if c.model.embedding_dim else "no head"
    groups = "; a base emoji's skin-tone classes share a batch" if c.sampler.whole_groups else ""
    schedule = " with cosine decay" if c.optim.schedule.name == "cosine" else ""
    classes = c.batch_size // c.sampler.m_per_class
    return (
        f"{c.data.image_size}x{c.data.image_size} images, EfficientNet-Lite0 "
        f"{'with its ImageNet weights' if c.model.pretrained else 'randomly initialised'}, {frozen}{cached} "
        f"({'with' if c.data.augment else 'no'} augmentation), {trained_part} and {head} trained"
        f"{' with frozen BatchNorm statistics' if c.model.freeze_bn else ''} for {run.epochs} epochs{batches}{steps} "
        f"({c.batch_size} images = {classes} classes x {c.sampler.m_per_class}{groups}), AdamW {_rate(c.optim.lr)} "
        f"(head {_rate(c.optim.groups['head'].lr)}){schedule}, {run.precision}, validation "
        f"{'every epoch' if run.eval_every_epochs == 1 else f'every {run.eval_every_epochs} epochs'}; "
        f"{c.data.train_fraction:.0%} of the base emoji train ({c.data.val_fraction:.0%} of those held out to select "
        "the checkpoint by validation Recall@1), the rest test"
    )


def _rate(value: float) -> str:
    """``3e-4`` for 0.0003."""
    mantissa, exponent = f"{value:.0e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def epoch_seconds(runs: Sequence[dict]) -> list[float]:
    """Per-epoch seconds of all runs, each run's first (warm-up) epoch dropped when it has more."""
    return [s for r in runs for s in (r.get("epoch_seconds", [])[1:] or r.get("epoch_seconds", []))]


def table(runs: dict[str, list[dict]]) -> list[str]:
    rows = [
        "| loss | impl | seeds | " + " | ".join(m.replace("recall@", "R@").replace("map@r", "MAP@R") for m in METRICS)
        + " | val R@1 (best) | s / epoch | CPU s / run | published CUB-200 R@1 (context) |",
        "|---|---|---|" + "---|" * len(METRICS) + "---|---|---|---|",
    ]
    for name in (*BASELINES, *LOSSES):
        got = runs.get(name, [])
        if not got:
            continue
        impl, label = DESCRIPTION[name]
        cells = [mean_std([r["metrics"][m] for r in got], 1) for m in METRICS]
        cells.append(mean_std([r["selected"]["validation"] for r in got if r["selected"].get("validation") is not None], 1))
        secs = epoch_seconds(got)
        cells.append(f"{statistics.mean(secs):.1f}" if secs else "-")
        cells.append(f"{statistics.mean(r['timings']['cpu_seconds'] for r in got):.0f}")
        seeds = ", ".join(str(r["seed"]) for r in got)
        rows.append(f"| {label} | {impl} | {seeds} | " + " | ".join(cells) + f" | {PUBLISHED[name]} |")
    return rows


def timing_lines(runs: dict[str, list[dict]]) -> list[str]:
    out = []
    for ours, pml in (("circle", "pml_circle"), ("multi_similarity", "pml_multi_similarity")):
        a, b = epoch_seconds(runs.get(ours, [])), epoch_seconds(runs.get(pml, []))
        if a and b:
            a_mean, b_mean = statistics.mean(a), statistics.mean(b)
            out.append(f"- `{ours}` {a_mean:.1f} s/epoch vs PML {b_mean:.1f} s/epoch (ratio {a_mean / b_mean:.2f}).")
    return out or ["- not measured yet: an ours/PML pair fills this in."]


def versus_lines(runs: dict[str, list[dict]]) -> list[str]:
    """Each effect's loss against its baseline in test Recall@1, with the standard error of the difference."""
    out = []
    for e in EFFECTS:
        a = [r["metrics"][e.metric] for r in runs.get(e.arm, [])]
        b = [r["metrics"][e.metric] for r in runs.get(e.baseline, [])]
        if len(a) >= 2 and len(b) >= 2:
            d = difference(a, b)
            out.append(f"- `{e.arm}` minus `{e.baseline}`: {d.mean:+.1f} ± {d.se:.1f} over {len(a)} and {len(b)} seeds"
                       + (" (beyond 2 standard errors)." if d.beyond else " (within 2 standard errors)."))
    return out or ["- not measured yet: two seeds a side are needed."]


def render_page(quick: bool, records: list[dict[str, Any]], command: str) -> str:
    """The Markdown page from the records."""
    runs: dict[str, list[dict]] = {}
    for r in sorted(records, key=lambda r: (r["arm"], r["seed"])):
        runs.setdefault(r["arm"], []).append(r)
    loads = [r["machine"]["load_average_1min"] for r in records if r["machine"].get("load_average_1min") is not None]
    cpus = sorted({f"{r['machine']['cpu']} ({r['machine']['cores']} cores, {r['machine']['threads']} thread(s) per run)"
                   for r in records})
    cpu_total = sum(r["timings"]["cpu_seconds"] for r in records)
    lines = [
        "# Metric learning: cross-style emoji retrieval (reduced CPU protocol)" + (" (QUICK smoke version)" if quick else ""),
        "",
        f"Rendered from the run records in `docs/results/records/{PAGE}/` by `{command}`, which trains the runs",
        "that have no current record (a record is current while its config digest and data version match).",
        "",
        "Unseen-class retrieval on the emoji benchmark of `docs/domains/metric_learning.md`: the two drawings",
        "(Twemoji, Noto) of an emoji are one class; skin-tone variants are their own classes; each test image",
        "queries all other test images. Numbers are test-split percentages of the checkpoint selected on",
        "validation Recall@1, mean ± sample std over seeds (seed = model init and batch order; the class split",
        "is fixed).",
        "",
        f"**Reduced protocol** (`configs/metric_learning/emoji_<loss>.yaml`{''.join(f', `{o}`' for o in (QUICK if quick else ()))}): "
        f"{protocol(records, QUICK if quick else ())}. The two `no training` rows are the same pipeline with "
        "`run.epochs=0`. The full-scale configs (`emoji_full.yaml`, `cub200_multi_similarity.yaml`) run with "
        "`contrasuite train`. Published numbers are CUB-200 with other backbones and 224 px training; they are "
        "context, not a comparison.",
        "",
    ]
    if records:
        lines += [f"Machine: {'; '.join(cpus)}; 1-minute load average {min(loads):.2f} to {max(loads):.2f} when the "
                  f"runs started. CPU time of all {len(records)} runs (train and eval children): {cpu_total / 60:.1f} min.",
                  ""]
    lines += [
        *table(runs),
        "",
        "Test Recall@1, each loss minus its baseline in the effects table (mean difference ± its standard error):",
        "",
        *versus_lines(runs),
        "",
        "Time per epoch (data + training steps, from each run's `epoch_seconds.jsonl`, first epoch of each run",
        "dropped as warm-up), ours vs PML; the loss is a small part of an epoch, and the load above varies:",
        "",
        *timing_lines(runs),
        "",
    ]
    missing = [n for n in (*BASELINES, *LOSSES) if n not in runs]
    if missing:
        lines += [f"Not yet run: {', '.join(missing)}.", ""]
    return "\n".join(lines)


def _build(args) -> Comparison:
    quick = args.quick
    return Comparison("metric_learning", PAGE, arms(), lambda records, command: render_page(quick, records, command),
                      quick=QUICK, extra=extra)


def main(argv: Sequence[str] | None = None) -> int:
    return compare_main("metric_learning", _build, argv, __doc__.splitlines()[0])


if __name__ == "__main__":
    raise SystemExit(main())
