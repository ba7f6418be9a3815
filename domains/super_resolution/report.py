"""``contrasuite compare super_resolution``: EDSR-baseline with and without PCL-SR's contrastive term.

Two pages, each its own records (``contrasuite.pipelines.compare`` runs them):

- default (``docs/results/super_resolution.md``): REDUCED protocol (CPU), x2, EDSR-baseline trained from
  scratch on T91 for 10 x 100 steps (``configs/super_resolution/reduced_x2_{l1,pcl}.yaml``), arms ``l1``
  and ``pcl``.
- ``--finetune`` (``docs/results/super_resolution_finetune.md``): PCL-SR's own protocol, fine-tuning a
  converged L1 model. Arm ``pretrain`` trains ``reduced_x2_l1.yaml`` for 30 epochs with the learning rate
  decayed to 0 on a cosine; the arms ``finetune_x2_{l1,pcl_official,pcl_gradient}`` fine-tune, at every
  seed, the one seed-0 ``pretrain`` run (``config.init_from``, its ``best.pt``; ``Arm.after`` with
  ``after_seed=0``, and ``pretrain`` runs at seed 0 only) with ``reduced_finetune_x2_<arm>.yaml``.

Every run is tested on Set5, Set14 and B100 (PSNR/SSIM on Y, border = scale) with the checkpoint selected
on validation PSNR-Y over held-out T91 crops (``best.pt``). Beside the runs, bicubic upscaling at x2 and x4
is computed from the test sets (deterministic, about 20 s) and kept as the record ``bicubic.json`` next to
the runs' records; ``--report-only`` reads it and computes nothing. Training throughput is
``contrasuite bench super_resolution``, not part of these pages.

    contrasuite compare super_resolution [--seeds 0 1] [--jobs 2]            # docs/results/super_resolution.md
    contrasuite compare super_resolution --finetune [--seeds 0 1] [--jobs 2] # docs/results/super_resolution_finetune.md
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from contrasuite.pipelines.api import (
    ROOT, Arm, Comparison, Effect, NOT_EITHER, compare_main, default_data_root, load_config, mean_std, write_json,
)

SETS = ("Set5", "Set14", "B100")
BICUBIC_SCALES = (2, 4)
BICUBIC_PUBLISHED = {  # (PSNR dB, SSIM) of bicubic upscaling, Y channel, border = scale (EDSR and RCAN papers' tables)
    ("Set5", 2): (33.66, 0.9299), ("Set5", 4): (28.42, 0.8104),
    ("Set14", 2): (30.24, 0.8688), ("Set14", 4): (26.00, 0.7027),
    ("B100", 2): (29.56, 0.8431), ("B100", 4): (25.96, 0.6675),
}
PAPER_GAINS = (
    "The paper (Wu, Jiang, Liu, TNNLS 2023, Table I, x4, fine-tuning DIV2K-trained models) reports "
    "PSNR gains of +0.01 to +0.30 dB from PCL: EDSR-S 32.09 -> 32.17 (Set5), 28.58 -> 28.61 (Set14), "
    "27.57 -> 27.58 (B100); the largest gains are on Urban100 and Manga109 (not used here)."
)
QUICK = (
    "run.epochs=1", "config.data.steps_per_epoch=2", "config.batch_size=2", "config.data.patch_size=8",
    "config.data.max_train_images=20", "config.data.val_crop=16", "config.model.n_resblocks=1", "config.model.n_feats=8",
    "config.discriminator.channel_divisor=16", "config.test_sets=[Set5]",
)
PAGES = {False: "super_resolution", True: "super_resolution_finetune"}
CONFIGS = "configs/super_resolution/"
SCRATCH = {"l1": "EDSR-baseline, L1", "pcl": "EDSR-baseline, L1 + contrastive (PCL-SR)"}
PRETRAIN = "pretrain"
PRETRAIN_OVERRIDES = ("run.epochs=30", "config.optim.schedule={name: cosine, end: {steps: 3000}}")
"""30 x 100 steps with the learning rate decayed to 0 on a cosine over them: converged at its floor."""
FINETUNE = {
    "finetune_x2_l1": "fine-tuned, L1 only (the control)",
    "finetune_x2_pcl_official": "fine-tuned, L1 + PCL, official (no contrastive gradient into the SR network)",
    "finetune_x2_pcl_gradient": "fine-tuned, L1 + PCL, with the gradient the paper writes",
}
BICUBIC = "bicubic"
"""The arm name of the bicubic record (computed, not trained)."""

EFFECTS = tuple(
    Effect(f"PCL-SR contrastive term ({s})",
           "fine-tuning with L1 + PCL gains +0.01 to +0.30 dB PSNR over the model without it (x4, DIV2K-trained "
           "EDSR-S Set5 32.09 -> 32.17; Wu et al., TNNLS 2023, Table I; arXiv 2111.13924)",
           "super_resolution_finetune", "finetune_x2_pcl_gradient", "finetune_x2_l1", f"{s}/psnr_y",
           f"test PSNR-Y, {s}, x2",
           "reduced CPU fine-tuning: 400 steps at lr 5e-5 from a converged T91 L1 model, against L1 fine-tuning "
           "alone, same seed, both from one converged model",
           official="the released code (Aitical/PCL-SISR) sends no contrastive gradient to the SR network: its arm "
                    "`finetune_x2_pcl_official` ends equal to the L1 control bit for bit "
                    "(docs/domains/super_resolution.md)",
           settled=NOT_EITHER)
    for s in ("Set5", "B100")
)
"""The claims this comparison measures (``contrasuite compare effects``)."""


def arms(finetune: bool) -> tuple[Arm, ...]:
    """The runs of a page: ``l1``, ``pcl`` from scratch; or ``pretrain`` (seed 0 only) and the fine-tuning arms,
    every seed of which starts from that one converged model (PCL-SR's protocol)."""
    if not finetune:
        return tuple(Arm(m, f"{CONFIGS}reduced_x2_{m}.yaml", checkpoint="best") for m in SCRATCH)
    return (Arm(PRETRAIN, f"{CONFIGS}reduced_x2_l1.yaml", PRETRAIN_OVERRIDES, checkpoint="best", seeds=(0,)),
            *(Arm(m, f"{CONFIGS}reduced_{m}.yaml", ("config.init_from={after}",), checkpoint="best", after=PRETRAIN,
                  after_seed=0) for m in FINETUNE))


# -- the bicubic baseline, computed from the test sets ---------------------------------------------------------

def sets_version(sets: Sequence[str]) -> str:
    """12 hex digits over the declared files (path and SHA-256) of the test sets ``sets`` (the runner's
    data version, restricted to what bicubic upscaling reads)."""
    from contrasuite.domains.super_resolution.datasets import DATASETS

    names = {f"sr-{s}" for s in sets}
    files = sorted((f.path, f.sha256 or "") for d in DATASETS if d.name in names for f in d.files)
    return hashlib.sha256(json.dumps(files).encode()).hexdigest()[:12]


def bicubic_metrics(data_root: str, sets: Sequence[str], scales: Sequence[int] = BICUBIC_SCALES) -> dict[str, float]:
    """PSNR/SSIM on Y of MATLAB-bicubic upscaling, ``x<scale>/<set>/psnr_y`` and ``.../ssim_y``."""
    import torch

    from contrasuite.domains.super_resolution.data import eval_pairs, upscale_bicubic
    from contrasuite.domains.super_resolution.metrics import psnr_y, ssim_y

    torch.set_num_threads(1)
    metrics: dict[str, float] = {}
    for scale in scales:
        for name in sets:
            ps, ss = [], []
            for pair in eval_pairs(data_root, name, scale):
                sr = upscale_bicubic(pair.lr, scale)
                ps.append(float(psnr_y(sr, pair.hr, scale)))
                ss.append(float(ssim_y(sr, pair.hr, scale)))
            metrics[f"x{scale}/{name}/psnr_y"], metrics[f"x{scale}/{name}/ssim_y"] = statistics.fmean(ps), statistics.fmean(ss)
    return metrics


def bicubic_record(page: str, sets: Sequence[str], data_root: str) -> dict[str, Any]:
    """The bicubic baseline on ``sets`` at x2 and x4, as a record beside the runs'."""
    started = time.time()
    metrics = bicubic_metrics(data_root, sets)
    return {"page": page, "arm": BICUBIC, "group": "", "sets": list(sets), "scales": list(BICUBIC_SCALES),
            "command": "computed by domains/super_resolution/report.py (bicubic_metrics): MATLAB-bicubic "
                       "upscaling of the bicubic LR test images, no training",
            "data_version": sets_version(sets), "metrics": metrics,
            "timings": {"seconds": round(time.time() - started, 1)},
            "recorded": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def ensure_bicubic(records: Path, page: str, sets: Sequence[str], data_root: str) -> None:
    """Compute ``records/bicubic.json`` unless one for these sets and data is there."""
    path = records / f"{BICUBIC}.json"
    old = json.loads(path.read_text()) if path.is_file() else {}
    if old.get("sets") == list(sets) and old.get("data_version") == sets_version(sets):
        return
    print(f"{page}: bicubic baseline on {', '.join(sets)} at x{' and x'.join(map(str, BICUBIC_SCALES))}", flush=True)
    write_json(bicubic_record(page, sets, data_root), path)


# -- the page ---------------------------------------------------------------------------------------------------

def metric_cells(metrics: Mapping[str, float], sets: Sequence[str], prefix: str = "") -> str:
    """``PSNR | SSIM`` table cells of one model on each test set (3 and 4 decimals)."""
    return " | ".join(f"{metrics[f'{prefix}{s}/psnr_y']:.3f} | {metrics[f'{prefix}{s}/ssim_y']:.4f}" for s in sets)


def bicubic_section(bic: Mapping[str, float], sets: Sequence[str]) -> list[str]:
    """Bicubic upscaling at each scale, the published numbers in brackets."""
    lines = ["## Bicubic upscaling", "",
             "The LR images upscaled with MATLAB bicubic; PSNR / SSIM on Y, border = scale; in brackets the published "
             "numbers (EDSR and RCAN papers' tables).", "",
             "| scale | " + " | ".join(f"{s} PSNR / SSIM" for s in sets) + " |", "|---|" + "---|" * len(sets)]
    for scale in BICUBIC_SCALES:
        cells = []
        for s in sets:
            published = BICUBIC_PUBLISHED.get((s, scale))
            cells.append(f"{bic[f'x{scale}/{s}/psnr_y']:.3f} / {bic[f'x{scale}/{s}/ssim_y']:.4f}"
                         + (f" ({published[0]:.2f} / {published[1]:.4f})" if published else ""))
        lines.append(f"| x{scale} | " + " | ".join(cells) + " |")
    return lines


def describe(arm: Arm, quick: bool) -> str:
    """The training protocol of ``arm`` (its config and overrides as declared today, with :data:`QUICK` when ``quick``),
    in words. A current record was made under it; the record's own overrides may use keys that moved since."""
    loaded = load_config(ROOT / arm.config, [o for o in (*arm.overrides, *(QUICK if quick else ())) if "{after}" not in o])
    run, cfg = loaded.run, loaded.config
    return (f"EDSR-baseline-shaped network ({cfg.model.n_resblocks} residual blocks, {cfg.model.n_feats} channels) trained "
            f"**from scratch** on {cfg.data.train_set} (every {cfg.data.val_every}th image held out for validation) for "
            f"{run.epochs} x {cfg.data.steps_per_epoch} steps of {cfg.batch_size} LR patches of {cfg.data.patch_size} px, "
            f"lr {cfg.optim.lr:g}, {run.precision}")


def _arm(finetune: bool, name: str) -> Arm:
    """The arm ``name`` of the fine-tuning (``finetune``) or the from-scratch comparison."""
    return next(a for a in arms(finetune) if a.name == name)


def _cells(runs: list[dict[str, Any]], sets: Sequence[str]) -> str:
    """Mean ± std over seeds of PSNR and SSIM on each set (one seed: its value)."""
    return " | ".join(c for s in sets for c in (mean_std([r["metrics"][f"{s}/psnr_y"] for r in runs], 3),
                                                mean_std([r["metrics"][f"{s}/ssim_y"] for r in runs], 4)))


def _seeds(runs: list[dict[str, Any]]) -> str:
    return ", ".join(str(r["seed"]) for r in runs)


def paired_gains(method: list[dict], control: list[dict], sets: Sequence[str]) -> list[str]:
    """``method`` minus ``control`` in PSNR per seed they share, with the mean and its standard error."""
    by_seed = {r["seed"]: r for r in control}
    paired = [(by_seed[r["seed"]], r) for r in method if r["seed"] in by_seed]
    if not paired:
        return []
    lines = []
    for s in sets:
        gains = [b["metrics"][f"{s}/psnr_y"] - a["metrics"][f"{s}/psnr_y"] for a, b in paired]
        se = statistics.stdev(gains) / len(gains) ** 0.5 if len(gains) > 1 else None
        lines.append(f"- {s}: " + ", ".join(f"{g:+.3f}" for g in gains) + f" (mean {statistics.fmean(gains):+.3f}"
                     + (f", standard error {se:.3f})" if se is not None else ")"))
    return lines


def _runs_table(runs: list[dict[str, Any]]) -> list[str]:
    lines = ["## Runs", "",
             "Validation PSNR-Y of the selected checkpoint; wall seconds of training and testing on the machine and "
             "threads each record names.", "",
             "| arm | seed | selected step | best val PSNR-Y | train s | eval s | threads | command |",
             "|---|---|---|---|---|---|---|---|"]
    for r in runs:
        lines.append(f"| {r['arm']} | {r['seed']} | {r['selected']['global_step']} | {r['selected']['validation']:.3f} | "
                     f"{r['timings']['train_seconds']} | {r['timings']['eval_seconds']} | {r['machine']['threads']} | "
                     f"`{r['command']}` |")
    return lines


def _head(title: str, page: str, command: str, quick: bool) -> list[str]:
    return [f"# {title}", "",
            f"Rendered from the run records in `docs/results/records/{page}/` by `{command}`, which trains the runs",
            "that have no current record (a record is current while its config digest and data version match).",
            "Checkpoints are chosen by validation PSNR-Y on held-out T91 crops, never the test sets; PSNR / SSIM on Y",
            "(BT.601, MATLAB `rgb2ycbcr`), `scale` border pixels cropped, LR by MATLAB-bicubic downscaling. Cells: mean",
            "± standard deviation over the seeds in column `seeds`. Training throughput: `contrasuite bench "
            "super_resolution`.", "",
            "**QUICK smoke protocol: numbers are meaningless**" if quick else "**REDUCED protocol on CPU**", ""]


def render_finetune(records: list[dict[str, Any]], command: str, quick: bool) -> str:
    """The fine-tuning page: bicubic, the un-fine-tuned models and each arm; each PCL arm minus the L1 arm."""
    by_arm: dict[str, list[dict[str, Any]]] = {}
    for r in sorted(records, key=lambda r: (r["arm"], r.get("seed", -1))):
        by_arm.setdefault(r["arm"], []).append(r)
    bic = by_arm.get(BICUBIC, [None])[0]
    runs = [r for arm in (PRETRAIN, *FINETUNE) for r in by_arm.get(arm, [])]
    sets = list(bic["sets"]) if bic else [s for s in SETS if runs and f"{s}/psnr_y" in runs[0]["metrics"]]
    lines = _head("Super-resolution: what PCL-SR adds over plain fine-tuning", PAGES[True], command, quick)
    pretrain = by_arm.get(PRETRAIN, [])
    if pretrain:
        lines += [f"- The un-fine-tuned model (arm `{PRETRAIN}`, seed 0 only): `{pretrain[0]['config']} "
                  f"{' '.join(pretrain[0]['overrides'])}`, the learning rate decayed to 0 on a cosine over its steps; "
                  f"{describe(_arm(True, PRETRAIN), quick)}."]
    lines += ["- Every seed of each fine-tuning arm starts from that one model's `best.pt` (`config.init_from`) with "
              "`configs/super_resolution/reduced_finetune_x2_<arm>.yaml` (lr 5e-5, cosine decay, gradient values clipped "
              "at 1, as the official scripts).",
              "", "| model | seeds | " + " | ".join(f"{s} PSNR | {s} SSIM" for s in sets) + " |",
              "|---|---|" + "---|---|" * len(sets)]
    if bic:  # the arms and the un-fine-tuned model are x2
        lines.append(f"| bicubic | - | {metric_cells(bic['metrics'], sets, 'x2/')} |")
    if pretrain:
        lines.append(f"| un-fine-tuned | {_seeds(pretrain)} | {_cells(pretrain, sets)} |")
    for arm, label in FINETUNE.items():
        if by_arm.get(arm):
            lines.append(f"| {label} | {_seeds(by_arm[arm])} | {_cells(by_arm[arm], sets)} |")
    for arm in ("finetune_x2_pcl_official", "finetune_x2_pcl_gradient"):
        if gains := paired_gains(by_arm.get(arm, []), by_arm.get("finetune_x2_l1", []), sets):
            lines += ["", f"PSNR of {FINETUNE[arm]} minus the L1-only arm, per seed (dB):", "", *gains]
    return _page_end(lines, [a for a in (PRETRAIN, *FINETUNE) if a not in by_arm], bic, runs, sets)


def render_scratch(records: list[dict[str, Any]], command: str, quick: bool) -> str:
    """The from-scratch page: bicubic, L1 and L1 + contrastive; the contrastive arm minus L1 per seed."""
    by_arm: dict[str, list[dict[str, Any]]] = {}
    for r in sorted(records, key=lambda r: (r["arm"], r.get("seed", -1))):
        by_arm.setdefault(r["arm"], []).append(r)
    bic = by_arm.get(BICUBIC, [None])[0]
    runs = [r for arm in SCRATCH for r in by_arm.get(arm, [])]
    sets = list(bic["sets"]) if bic else [s for s in SETS if runs and f"{s}/psnr_y" in runs[0]["metrics"]]
    lines = _head("Super-resolution: EDSR-baseline with and without PCL-SR's contrastive term", PAGES[False], command,
                  quick)
    if runs:
        lines += [f"- x2, configs `{CONFIGS}reduced_x2_{{l1,pcl}}.yaml`: {describe(_arm(False, runs[0]['arm']), quick)}. The paper instead "
                  "fine-tunes DIV2K-trained models for 600 epochs with HR patch 192 (the `--finetune` page)."]
    lines += ["", "| method | seeds | " + " | ".join(f"{s} PSNR | {s} SSIM" for s in sets) + " |",
              "|---|---|" + "---|---|" * len(sets)]
    if bic:
        lines.append(f"| bicubic | - | {metric_cells(bic['metrics'], sets, 'x2/')} |")
    for arm, label in SCRATCH.items():
        if by_arm.get(arm):
            lines.append(f"| {label} | {_seeds(by_arm[arm])} | {_cells(by_arm[arm], sets)} |")
    if gains := paired_gains(by_arm.get("pcl", []), by_arm.get("l1", []), sets):
        lines += ["", "PSNR of L1 + contrastive minus L1, per seed (dB):", "", *gains]
    return _page_end(lines, [a for a in SCRATCH if a not in by_arm], bic, runs, sets)


def _page_end(lines: list[str], missing: list[str], bic: dict[str, Any] | None, runs: list[dict[str, Any]],
              sets: Sequence[str]) -> str:
    """A page's last sections: what is not yet run, the paper's numbers, bicubic and the table of runs."""
    if missing:
        lines += ["", f"Not yet run: {', '.join(missing)}."]
    lines += ["", "Paper context: " + PAPER_GAINS]
    if bic:
        lines += ["", *bicubic_section(bic["metrics"], sets)]
    if runs:
        lines += ["", *_runs_table(runs)]
    return "\n".join(lines) + "\n"


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--finetune", action="store_true",
                   help="PCL-SR's protocol: every seed fine-tunes one converged seed-0 L1 model (super_resolution_finetune.md)")


def _build(args: argparse.Namespace) -> Comparison:
    finetune, quick = args.finetune, args.quick
    page = PAGES[finetune]
    comparison = Comparison("super_resolution", page, arms(finetune),
                            (lambda r, c: render_finetune(r, c, quick)) if finetune else (lambda r, c: render_scratch(r, c, quick)),
                            quick=QUICK)
    if not args.report_only:
        # where the runner keeps this page's records (pipelines/compare.py main)
        cache = args.cache or Path("runs") / "compare" / page
        records = args.records or (cache / "records" if quick else ROOT / "docs" / "results" / "records" / page)
        sets = ["Set5"] if quick else list(SETS)
        ensure_bicubic(records, page, sets, args.data_root or default_data_root())
    return comparison


def main(argv: Sequence[str] | None = None) -> int:
    return compare_main("super_resolution", _build, argv, __doc__.splitlines()[0], _arguments)


if __name__ == "__main__":
    raise SystemExit(main())
