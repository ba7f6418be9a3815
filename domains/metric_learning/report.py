"""``contrasuite compare metric_learning``: every metric-learning loss x seeds -> docs/results/metric_learning.md.

Each (loss, seed) trains ``configs/metric_learning/emoji_<loss>.yaml`` (the reduced CPU protocol
unless ``--config-dir``/``--prefix`` name others), evaluates the best-on-validation checkpoint on
the unseen test classes, and stores the result in ``<results-dir>/<loss>_seed<seed>.json`` as soon
as the run ends. Two reference rows go through the same pipeline with zero training epochs (the
``multi_similarity`` config, ``run.epochs=0``): the ImageNet backbone's pooled 1280-d features, and
the same with the untrained random 128-d head the losses start from. Finished runs are never repeated, so an interrupted table is completed by running
the same command again; ``--table-only`` just rewrites the page from the stored runs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from contrasuite.pipelines.api import mean_std, page_command, thread_env, train_and_test, write_json

LOSSES = ("circle", "multi_similarity", "hyperbolic", "supcon", "pml_circle", "pml_multi_similarity")
# Untrained references: (config loss, overrides); evaluated like the trained runs, nothing trained.
BASELINES = {
    "untrained": ("multi_similarity", ["run.epochs=0", "config.model.embedding_dim=0"]),
    "untrained_head": ("multi_similarity", ["run.epochs=0"]),
}
METRICS = ("recall@1", "recall@2", "recall@4", "recall@8", "map@r")
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


def run_one(config: Path, seed: int, output_root: str, data_root: str | None, extra: Sequence[str],
            threads: int = 1) -> dict[str, Any]:
    """Train and test the best checkpoint in child processes (log: ``<output_root>/logs``), collect
    metrics and per-epoch seconds."""
    overrides = [f"run.seed={seed}", f"run.output_root={Path(output_root).resolve()}", "run.resume=never", *extra]
    log = Path(output_root) / "logs" / f"{Path(config).stem}_seed{seed}.log"
    started = time.time()
    run = train_and_test(Path(config).resolve(), overrides, log, thread_env(threads), checkpoint="best", data_root=data_root)
    run_dir, test = run.run_dir, run.test
    seconds_file = run_dir / "epoch_seconds.jsonl"  # absent when nothing was trained
    lines = seconds_file.read_text().splitlines() if seconds_file.is_file() else []
    epoch_seconds = [json.loads(line)["seconds"] for line in lines if line.strip()]
    val = run.val()
    return {
        "config": str(config),
        "seed": seed,
        "overrides": list(extra),
        "run_dir": str(run_dir),
        "test": test["metrics"],
        "best_val": val.get("best"),
        "best_checkpoint_epoch": test.get("epoch"),
        "epoch_seconds": epoch_seconds,
        "wall_seconds": round(time.time() - started, 1),
        "percent": True,
    }


def in_percent(run: dict[str, Any]) -> dict[str, Any]:
    """A stored run with its test metrics and best validation value in percent: runs stored before
    issue 42 hold fractions (and no ``percent`` key)."""
    if run.get("percent"):
        return run
    best = run.get("best_val")
    return {**run, "test": {m: 100 * v for m, v in run["test"].items()},
            "best_val": None if best is None else 100 * best, "percent": True}


def table(results: dict[str, list[dict]], losses: Sequence[str]) -> list[str]:
    rows = [
        "| loss | impl | seeds | " + " | ".join(m.replace("recall@", "R@").replace("map@r", "MAP@R") for m in METRICS)
        + " | val R@1 (best) | s / epoch | published CUB-200 R@1 (context) |",
        "|---|---|---|" + "---|" * len(METRICS) + "---|---|---|",
    ]
    for loss in losses:
        runs = results.get(loss, [])
        impl, label = DESCRIPTION[loss]
        cells = [mean_std([r["test"][m] for r in runs], 1) for m in METRICS]
        cells.append(mean_std([r["best_val"] for r in runs if r.get("best_val") is not None], 1))
        secs = epoch_seconds(runs)
        per_epoch = f"{statistics.mean(secs):.1f}" if secs else "-"
        seeds = ",".join(str(r["seed"]) for r in runs) or "not run"
        rows.append(f"| {label} | {impl} | {seeds} | " + " | ".join(cells) + f" | {per_epoch} | {PUBLISHED[loss]} |")
    return rows


def epoch_seconds(runs: Sequence[dict]) -> list[float]:
    """Per-epoch seconds of all runs, each run's first (warm-up) epoch dropped when it has more."""
    return [s for r in runs for s in (r["epoch_seconds"][1:] or r["epoch_seconds"])]


def timing_lines(results: dict[str, list[dict]]) -> list[str]:
    def per_epoch(loss: str) -> float | None:
        secs = epoch_seconds(results.get(loss, []))
        return statistics.mean(secs) if secs else None

    out = []
    for ours, pml in (("circle", "pml_circle"), ("multi_similarity", "pml_multi_similarity")):
        a, b = per_epoch(ours), per_epoch(pml)
        if a is not None and b is not None:
            out.append(f"- `{ours}` {a:.1f} s/epoch vs PML {b:.1f} s/epoch (ratio {a / b:.2f}).")
    return out or ["- not measured yet: run both an ours/PML pair to fill this in."]


def write_page(results: dict[str, list[dict]], losses: Sequence[str], command: str, out: Path, note: str = "") -> None:
    n_runs = sum(len(v) for v in results.values())
    lines = [
        "# Metric learning: cross-style emoji retrieval (reduced CPU protocol)",
        "",
        "Unseen-class retrieval on the emoji benchmark of `docs/domains/metric_learning.md`: the two drawings",
        "(Twemoji, Noto) of an emoji are one class; skin-tone variants are their own classes; half of the base",
        "emoji train (20% of those held out to pick the checkpoint by validation Recall@1), the other half",
        "test, each test image querying all other test images. Numbers are test-split percentages,",
        "mean ± sample std over seeds (seed = model init and batch order; the class split is fixed).",
        "",
        "**Reduced protocol** (so the table takes about an hour on 2 CPU cores): 64x64 images (native size),",
        "EfficientNet-Lite0 with its ImageNet weights, stem and first 5 of 16 MBConv blocks frozen and their",
        "outputs computed once (eval mode) and cached on disk (no augmentation), blocks 5-15 and a 128-d",
        "linear head trained with frozen BatchNorm statistics for 4 epochs of 48 batches (64 images = 32",
        "classes x 2; a base emoji's skin-tone classes share a batch), AdamW 3e-4 (head 1e-3) with cosine",
        "decay, fp32 on CPU, validation every epoch. The two `no training` rows are the same pipeline with",
        "zero epochs. The full-scale configs (`emoji_full.yaml`: 224 px, whole network, crops, 60 epochs;",
        "`cub200_multi_similarity.yaml`) run with the same command. Published numbers are CUB-200 with",
        "other backbones and 224 px training; they are context, not a comparison.",
        "",
        f"Runs stored: {n_runs}. The whole table (every loss, seeds 0 and 1; finished runs are reused):",
        "",
        "```",
        "contrasuite compare metric_learning --data-root /path/to/data",
        "```",
        "",
        f"This page was written by `{command}`.",
        "",
        *table(results, losses),
        "",
        "Time per epoch (data + training steps, from each run's `epoch_seconds.jsonl`, first epoch of each run",
        "dropped as warm-up), ours vs PML:",
        "",
        *timing_lines(results),
        "",
        *([f"Note: {note}", ""] if note else []),
    ]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="contrasuite compare metric_learning", description=__doc__.splitlines()[0])
    parser.add_argument("--losses", nargs="+", default=[*BASELINES, *LOSSES], choices=[*BASELINES, *LOSSES])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    parser.add_argument("--config-dir", type=Path, default=Path("configs/metric_learning"))
    parser.add_argument("--prefix", default="emoji_", help="config file = <config-dir>/<prefix><loss>.yaml")
    parser.add_argument("--results-dir", type=Path, default=Path("runs/metric_learning/compare"))
    parser.add_argument("--output-root", default="runs", help="run.output_root of the training runs")
    parser.add_argument("--data-root", default=None)
    parser.add_argument("--threads", type=int, default=1, help="torch threads of each training run")
    parser.add_argument("--out", type=Path, default=Path("docs/results/metric_learning.md"))
    parser.add_argument("--set", dest="overrides", nargs="*", default=[], help="extra key=value overrides for every run")
    parser.add_argument("--table-only", action="store_true", help="only rewrite the page from stored runs")
    parser.add_argument("--note", default="", help="a line added under the table (machine, load, partial runs)")
    args = parser.parse_args(argv)
    results: dict[str, list[dict]] = {}
    for loss in args.losses:
        for seed in args.seeds:
            stored = args.results_dir / f"{loss}_seed{seed}.json"
            if not stored.is_file() and not args.table_only:
                config_loss, extra = BASELINES.get(loss, (loss, []))
                config = args.config_dir / f"{args.prefix}{config_loss}.yaml"
                print(f"== {loss} seed {seed}: {config} {' '.join(extra)}", file=sys.stderr)
                result = run_one(config, seed, args.output_root, args.data_root, [*args.overrides, *extra], args.threads)
                write_json(result, stored)
            if stored.is_file():
                results.setdefault(loss, []).append(in_percent(json.loads(stored.read_text())))
    given = list(argv if argv is not None else sys.argv[1:])
    if "--note" in given:  # the note is printed on its own below the table
        i = given.index("--note")
        del given[i : i + 2]
    write_page(results, args.losses, page_command("metric_learning", given), args.out, args.note)
    print(f"wrote {args.out} ({sum(len(v) for v in results.values())} runs)")
    return 0
