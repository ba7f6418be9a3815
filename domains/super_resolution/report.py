"""``contrasuite compare super_resolution``: bicubic vs EDSR-baseline (L1) vs EDSR-baseline (L1 + PCL-SR).

REDUCED protocol (CPU): x2, EDSR-baseline trained from scratch on T91 for 10 x 100 steps of 16 LR
patches of 24 px (``configs/super_resolution/reduced_x2_{l1,pcl}.yaml``) instead of fine-tuning a
DIV2K model for hundreds of epochs as the paper does. Each (method, seed) is trained with
``contrasuite train``, its checkpoint chosen by validation PSNR on held-out T91 crops (``best.pt``),
and evaluated on Set5, Set14 and B100 with ``contrasuite eval`` (PSNR/SSIM on Y, border = scale).
One thread per run, ``--jobs`` runs at a time; each finished run is cached as JSON in
``--results-dir`` so an interrupted comparison resumes. Also measured: the bicubic baseline,
training throughput (``contrasuite bench super_resolution``), and side-by-side crops
(LR, bicubic, L1, L1 + contrastive, HR) saved as PNG next to the page.

    contrasuite compare super_resolution                 # 2 methods x 2 seeds + bicubic + bench + crops
    contrasuite compare super_resolution --seeds 0 --methods pcl
    contrasuite compare super_resolution --quick         # tiny smoke version (not written to docs/)
    contrasuite compare super_resolution --config-dir configs/super_resolution --prefix edsr_baseline_x2_  # full scale
    contrasuite compare super_resolution --finetune      # PCL-SR's protocol: fine-tune a converged L1 model

``--finetune`` measures what PCL adds over plain fine-tuning (issue 23): one L1 model
(``<prefix>x2_l1.yaml``, ``--pretrain-epochs`` long, seed 0, cached) is fine-tuned with
``<prefix>finetune_x2_{l1,pcl_official,pcl_gradient}.yaml`` (``config.init_from`` its ``best.pt``),
each for every seed, beside the un-fine-tuned model; the page is ``docs/results/super_resolution_finetune.md``.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Sequence

import torch

from contrasuite.pipelines.api import (
    ROOT, data_root_args, default_data_root, load_config, mean_std, run_cli, thread_env, train_and_test, write_json,
)

METHODS = {"l1": "EDSR-baseline, L1", "pcl": "EDSR-baseline, L1 + contrastive (PCL-SR)"}
FINETUNE = {
    "finetune_x2_l1": "fine-tuned, L1 only (the control)",
    "finetune_x2_pcl_official": "fine-tuned, L1 + PCL, official (no contrastive gradient into the SR network)",
    "finetune_x2_pcl_gradient": "fine-tuned, L1 + PCL, with the gradient the paper writes",
}
PRETRAIN = "x2_l1"
"""The converged model every fine-tuning arm starts from: ``<prefix>x2_l1.yaml`` for ``--pretrain-epochs``."""
SEEDS = (0, 1)
SETS = ("Set5", "Set14", "B100")
PAPER_GAINS = (
    "The paper (Wu, Jiang, Liu, TNNLS 2023, Table I, x4, fine-tuning DIV2K-trained models) reports "
    "PSNR gains of +0.01 to +0.30 dB from PCL: EDSR-S 32.09 -> 32.17 (Set5), 28.58 -> 28.61 (Set14), "
    "27.57 -> 27.58 (B100); the largest gains are on Urban100 and Manga109 (not used here)."
)
QUICK_OVERRIDES = (
    "run.epochs=1", "config.data.steps_per_epoch=2", "config.data.batch_size=2", "config.data.patch_size=8",
    "config.data.max_train_images=20", "config.data.val_crop=16", "config.model.n_resblocks=1", "config.model.n_feats=8",
    "config.discriminator.channel_divisor=16", "config.test_sets=[Set5]",
)
BICUBIC_PUBLISHED = {  # (PSNR dB, SSIM) of bicubic upscaling, Y channel, border = scale (EDSR and RCAN papers' tables)
    ("Set5", 2): (33.66, 0.9299), ("Set5", 4): (28.42, 0.8104),
    ("Set14", 2): (30.24, 0.8688), ("Set14", 4): (26.00, 0.7027),
    ("B100", 2): (29.56, 0.8431), ("B100", 4): (25.96, 0.6675),
}
BICUBIC_SCALES = (2, 4)
OUTPUT = ROOT / "docs" / "results" / "super_resolution.md"
FINETUNE_OUTPUT = ROOT / "docs" / "results" / "super_resolution_finetune.md"
CROPS = (("Set5", "butterfly"), ("Set14", "zebra"), ("B100", "img_004"))


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="contrasuite compare super_resolution", description=__doc__.splitlines()[0])
    p.add_argument("--methods", default=None, help=f"comma-separated: l1, pcl (default both); with --finetune: "
                   f"{', '.join(FINETUNE)} (default all)")
    p.add_argument("--seeds", default=",".join(map(str, SEEDS)))
    p.add_argument("--jobs", type=int, default=2, help="runs at a time, one thread each")
    p.add_argument("--config-dir", type=Path, default=ROOT / "configs" / "super_resolution")
    p.add_argument("--prefix", default=None, help="configs are <config-dir>/<prefix><method>.yaml (default reduced_x2_; "
                   "with --finetune reduced_)")
    p.add_argument("--finetune", action="store_true", help="PCL-SR's protocol: fine-tune one converged L1 model")
    p.add_argument("--pretrain-epochs", type=int, default=30,
                   help="--finetune: epochs of the L1 model fine-tuned (cosine decay to 0 over them)")
    p.add_argument("--pretrain-threads", type=int, default=1, help="--finetune: torch threads of the L1 model's run "
                   "(it runs alone; the arms run one thread each)")
    p.add_argument("--quick", action="store_true", help="tiny smoke protocol; the page goes to the results dir")
    p.add_argument("--results-dir", type=Path, default=ROOT / "runs" / "compare" / "super_resolution")
    p.add_argument("--output", type=Path, default=None, help=f"markdown page (default {OUTPUT.relative_to(ROOT)})")
    p.add_argument("--data-root", default=None, help="data root (default: $CONTRASUITE_DATA or the config)")
    p.add_argument("--bench-steps", type=int, default=3, help="timed steps per throughput row (0: skip the bench)")
    p.add_argument("--rerun", action="store_true", help="ignore cached results")
    p.add_argument("--report-only", action="store_true", help="only rebuild the page from cached results")
    return p


def _data_root(args: argparse.Namespace) -> str:
    return args.data_root or default_data_root()


def run_one(method: str, seed: int, args: argparse.Namespace, cache: Path, extra: Sequence[str] = (),
            threads: int = 1) -> dict[str, Any]:
    """Train (with ``extra`` overrides), select by validation PSNR, test; returns (and caches) the result."""
    result_path = cache / f"{method}_seed{seed}.json"
    if result_path.is_file() and not args.rerun:
        return json.loads(result_path.read_text())
    if args.report_only:
        raise FileNotFoundError(result_path)
    config = args.config_dir / f"{args.prefix}{method}.yaml"
    overrides = [f"run.seed={seed}", *extra, f"run.output_root={cache / 'runs'}", "run.progress=false"]
    if args.quick:
        overrides += QUICK_OVERRIDES
    log = cache / f"{method}_seed{seed}.log"
    log.unlink(missing_ok=True)
    run = train_and_test(config, overrides, log, thread_env(threads), checkpoint="best", data_root=args.data_root)
    result = {
        "method": method, "seed": seed, "run_dir": str(run.run_dir), "metrics": run.test["metrics"],
        "best_val_psnr_y": run.val()["best"], "best_step": run.test.get("global_step"),
        "train_seconds": round(run.train_seconds, 1), "eval_seconds": round(run.eval_seconds, 1),
        "command": shlex.join(["contrasuite", "train", str(config.relative_to(ROOT) if config.is_relative_to(ROOT) else config),
                               *overrides[: 1 + len(extra)]]),
    }
    write_json(result, result_path)
    return result


def bicubic(args: argparse.Namespace, scale: int, sets: Sequence[str], cache: Path) -> dict[str, float]:
    """The bicubic-upscaling baseline on the test sets (cached)."""
    path = cache / f"bicubic_x{scale}.json"
    if path.is_file() and not args.rerun:
        return json.loads(path.read_text())
    from contrasuite.domains.super_resolution.data import eval_pairs, upscale_bicubic
    from contrasuite.domains.super_resolution.metrics import psnr_y, ssim_y

    metrics: dict[str, float] = {}
    for name in sets:
        ps, ss = [], []
        for pair in eval_pairs(_data_root(args), name, scale):
            sr = upscale_bicubic(pair.lr, scale)
            ps.append(float(psnr_y(sr, pair.hr, scale)))
            ss.append(float(ssim_y(sr, pair.hr, scale)))
        metrics[f"{name}/psnr_y"], metrics[f"{name}/ssim_y"] = statistics.fmean(ps), statistics.fmean(ss)
    write_json(metrics, path)
    return metrics


def metric_cells(metrics: dict[str, float], sets: Sequence[str]) -> str:
    """``PSNR | SSIM`` table cells of one model on each test set (3 and 4 decimals)."""
    return " | ".join(f"{metrics[f'{s}/psnr_y']:.3f} | {metrics[f'{s}/ssim_y']:.4f}" for s in sets)


def bicubic_section(bic: dict[int, dict[str, float]], sets: Sequence[str]) -> list[str]:
    """Bicubic upscaling at each scale measured here, the published numbers in brackets."""
    lines = ["## Bicubic upscaling", "",
             "The LR images upscaled with MATLAB bicubic; PSNR / SSIM on Y, border = scale; in brackets the published "
             "numbers (EDSR and RCAN papers' tables).", "",
             "| scale | " + " | ".join(f"{s} PSNR / SSIM" for s in sets) + " |", "|---|" + "---|" * len(sets)]
    for scale, metrics in sorted(bic.items()):
        cells = []
        for s in sets:
            published = BICUBIC_PUBLISHED.get((s, scale))
            cells.append(f"{metrics[f'{s}/psnr_y']:.3f} / {metrics[f'{s}/ssim_y']:.4f}"
                         + (f" ({published[0]:.2f} / {published[1]:.4f})" if published else ""))
        lines.append(f"| x{scale} | " + " | ".join(cells) + " |")
    return lines


def bench(args: argparse.Namespace, cache: Path, scale: int) -> dict[str, Any] | None:
    """Throughput rows from ``contrasuite bench super_resolution`` (cached)."""
    path = cache / "bench_cpu.json"
    if args.bench_steps <= 0:
        return None
    if not path.is_file() or args.rerun:
        if args.report_only:
            return None
        size = ["--patch", "16", "--batch", "2", "--steps", "1"] if args.quick else ["--steps", str(args.bench_steps)]
        run_cli(["bench", "super_resolution", "--threads", "1", "--device", "cpu", "--scale", str(scale), *size,
                 "--output", str(path), *data_root_args(args.data_root)], cache / "bench.log", thread_env(1))
    return json.loads(path.read_text())


def save_crops(results: list[dict[str, Any]], args: argparse.Namespace, scale: int, folder: Path) -> list[Path]:
    """LR | bicubic | L1 | L1 + contrastive | HR for a few test images (seed-0 runs), as PNG."""
    from PIL import Image

    from contrasuite.domains.super_resolution.data import eval_pairs, upscale_bicubic
    from contrasuite.domains.super_resolution.inference import upscale
    from contrasuite.domains.super_resolution.upscale import load_generator

    runs = {r["method"]: r for r in sorted(results, key=lambda r: r["seed"], reverse=True)}
    if not {"l1", "pcl"} <= set(runs):
        return []
    models = {m: load_generator(Path(runs[m]["run_dir"]), "best")[0] for m in ("l1", "pcl")}
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for set_name, stem in CROPS:
        pairs = {p.name: p for p in eval_pairs(_data_root(args), set_name, scale)}
        if stem not in pairs:
            continue
        pair = pairs[stem]
        hr, lr = pair.hr.expand(3, -1, -1), pair.lr.expand(3, -1, -1)
        size = min(96, hr.shape[-2], hr.shape[-1]) // scale * scale
        y, x = (hr.shape[-2] - size) // 2 // scale * scale, (hr.shape[-1] - size) // 2 // scale * scale
        with torch.no_grad():
            panels = [
                torch.nn.functional.interpolate(lr[None], scale_factor=scale, mode="nearest")[0],
                upscale_bicubic(lr, scale),
                upscale(models["l1"], lr[None], scale, tile=128)[0],
                upscale(models["pcl"], lr[None], scale, tile=128)[0],
                hr,
            ]
        gap = torch.ones(3, size, 4)
        row = []
        for panel in panels:
            row += [panel[:, y : y + size, x : x + size].clamp(0, 1), gap]
        img = (torch.cat(row[:-1], dim=2) * 255).round().to(torch.uint8).permute(1, 2, 0).numpy()
        path = folder / f"{set_name}_{stem}_x{scale}.png"
        Image.fromarray(img).resize((img.shape[1] * 2, img.shape[0] * 2), Image.NEAREST).save(path)
        written.append(path)
    return written


def describe(loaded: Any) -> str:
    """The training protocol of a loaded config, in words."""
    run, cfg = loaded.run, loaded.config
    return (f"EDSR-baseline-shaped network ({cfg.model.n_resblocks} residual blocks, {cfg.model.n_feats} channels) trained "
            f"**from scratch** on {cfg.data.train_set} (every {cfg.data.val_every}th image held out for validation) for "
            f"{run.epochs} x {cfg.data.steps_per_epoch} steps of {cfg.data.batch_size} LR patches of {cfg.data.patch_size} px, "
            f"lr {cfg.lr:g}, {run.precision}")


def write_page(results: list[dict[str, Any]], bic: dict[str, float], bench_rows: dict[str, Any] | None,
               crops: list[Path], args: argparse.Namespace, scale: int, sets: Sequence[str], page: Path,
               protocol: str) -> None:
    by_method: dict[str, list[dict[str, Any]]] = {}
    for r in results:
        by_method.setdefault(r["method"], []).append(r)
    seeds = sorted({r["seed"] for r in results})
    lines = [
        "# Super-resolution: EDSR-baseline with and without PCL-SR's contrastive term",
        "",
        "Generated by `contrasuite compare super_resolution"
        + (" --quick" if args.quick else "") + "` (domains/super_resolution/report.py). "
        "Do not edit by hand; rerun the command.",
        "",
        "**This is a REDUCED protocol on CPU**" if not args.quick else "**QUICK smoke protocol: numbers are meaningless**",
        "",
        f"- x{scale}; {protocol}; configs `{args.prefix}l1.yaml` / `{args.prefix}pcl.yaml`. "
        "The paper instead fine-tunes DIV2K-trained models for 600 epochs with HR patch 192.",
        "- Checkpoint: `best.pt`, chosen by PSNR-Y on centre crops of the held-out T91 images (never the test sets).",
        "- Metrics: PSNR and SSIM on Y (BT.601, MATLAB `rgb2ycbcr`), `scale` border pixels cropped, LR by MATLAB-bicubic "
        "downscaling (the bicubic row reproduces the published numbers, see tests/domains/super_resolution).",
        f"- Seeds: {', '.join(map(str, seeds))}; values are mean ± standard deviation over seeds. One CPU thread per run.",
        "",
        "| method | " + " | ".join(f"{s} PSNR | {s} SSIM" for s in sets) + " |",
        "|---|" + "---|---|" * len(sets),
        f"| bicubic | {metric_cells(bic, sets)} |",
    ]
    for method, rows in by_method.items():
        cells = []
        for s in sets:
            cells.append(mean_std([r["metrics"][f"{s}/psnr_y"] for r in rows], 3))
            cells.append(mean_std([r["metrics"][f"{s}/ssim_y"] for r in rows], 4))
        lines.append(f"| {METHODS[method]} | " + " | ".join(cells) + " |")
    if {"l1", "pcl"} <= set(by_method):
        paired = sorted(set(r["seed"] for r in by_method["l1"]) & set(r["seed"] for r in by_method["pcl"]))
        lines += ["", "PSNR gain of L1 + contrastive over L1, per seed (dB):", ""]
        for s in sets:
            gains = [next(r for r in by_method["pcl"] if r["seed"] == k)["metrics"][f"{s}/psnr_y"]
                     - next(r for r in by_method["l1"] if r["seed"] == k)["metrics"][f"{s}/psnr_y"] for k in paired]
            lines.append(f"- {s}: " + ", ".join(f"{g:+.3f}" for g in gains)
                         + (f" (mean {statistics.fmean(gains):+.3f})" if gains else ""))
    lines += ["", "Paper context: " + PAPER_GAINS, "",
              f"PCL-SR's own protocol, fine-tuning a converged L1 model with and without the contrastive term beside "
              f"plain fine-tuning, and bicubic at x2 and x4: [{FINETUNE_OUTPUT.name}]({FINETUNE_OUTPUT.name}).",
              "", "## Runs", "", "| method | seed | best val PSNR-Y | train s | eval s | command |", "|---|---|---|---|---|---|"]
    for r in sorted(results, key=lambda r: (r["method"], r["seed"])):
        lines.append(f"| {r['method']} | {r['seed']} | {r['best_val_psnr_y']:.3f} | {r['train_seconds']} | {r['eval_seconds']} | `{r['command']}` |")
    if bench_rows:
        lines += ["", "## Training throughput", "", f"`contrasuite bench super_resolution --threads 1 --device cpu --scale {scale}` "
                  f"({bench_rows['device']}, {bench_rows['threads']} thread; other processes may share the CPU):", "",
                  "| mode | precision | LR patch | batch | s/step | patches/s | CPU s/step |", "|---|---|---|---|---|---|---|"]
        for b in bench_rows["rows"]:
            lines.append(f"| {b['mode']} | {b['precision']} | {b['patch']} | {b['batch']} | {b['seconds_per_step']:.3f} "
                         f"| {b['patches_per_second']:.1f} | {b.get('cpu_seconds_per_step', float('nan')):.3f} |")
    if crops:
        lines += ["", "## Crops", "", "LR (nearest) | bicubic | L1 | L1 + contrastive | HR, seed-0 models, centre 96 px crops:", ""]
        lines += [f"![{p.stem}]({p.relative_to(page.parent).as_posix()})" for p in crops]
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text("\n".join(lines) + "\n")


def write_finetune_page(pretrain: dict[str, Any], results: list[dict[str, Any]], args: argparse.Namespace,
                        sets: Sequence[str], page: Path, protocol: str, bic: dict[int, dict[str, float]]) -> None:
    """The fine-tuning table: bicubic, the un-fine-tuned model and each arm (mean ± std over seeds), and each
    PCL arm's PSNR difference from the L1-only arm, per seed, with the mean and its standard error; then
    bicubic at every scale in ``bic`` beside the published numbers."""
    by_method: dict[str, list[dict[str, Any]]] = {}
    for r in results:
        by_method.setdefault(r["method"], []).append(r)
    lines = [
        "# Super-resolution: what PCL-SR adds over plain fine-tuning",
        "",
        f"Generated by `contrasuite compare super_resolution --finetune --pretrain-epochs {args.pretrain_epochs}"
        + (f" --pretrain-threads {args.pretrain_threads}" if args.pretrain_threads != 1 else "")
        + (" --quick" if args.quick else "") + "` (domains/super_resolution/report.py). Do not edit by hand.",
        "",
        "**REDUCED protocol on CPU**" if not args.quick else "**QUICK smoke protocol: numbers are meaningless**",
        "",
        f"- The un-fine-tuned model: `{args.prefix}{PRETRAIN}.yaml` for {args.pretrain_epochs} epochs with the learning "
        "rate decayed to 0 on a cosine, seed 0 "
        f"({pretrain['train_seconds']:.0f} s of training); {protocol}.",
        f"- Each arm fine-tunes its `best.pt` (`config.init_from`) with `{args.prefix}finetune_x2_<arm>.yaml` "
        "(lr 5e-5, cosine decay, gradient values clipped at 1, as the official scripts); checkpoints chosen by "
        "validation PSNR-Y on held-out T91 crops, never the test sets. PSNR / SSIM on Y, border = scale.",
        "",
        "| model | seeds | " + " | ".join(f"{s} PSNR | {s} SSIM" for s in sets) + " |",
        "|---|---|" + "---|---|" * len(sets),
        # The arms and the un-fine-tuned model are x2 (PRETRAIN and FINETUNE name x2 configs).
        f"| bicubic | - | {metric_cells(bic[2], sets)} |",
        f"| un-fine-tuned | - | {metric_cells(pretrain['metrics'], sets)} |",
    ]
    for method, rows in by_method.items():
        cells = [c for s in sets for c in (mean_std([r["metrics"][f"{s}/psnr_y"] for r in rows], 3),
                                           mean_std([r["metrics"][f"{s}/ssim_y"] for r in rows], 4))]
        lines.append(f"| {FINETUNE[method]} | {len(rows)} | " + " | ".join(cells) + " |")
    control = {r["seed"]: r for r in by_method.get("finetune_x2_l1", [])}
    for method in ("finetune_x2_pcl_official", "finetune_x2_pcl_gradient"):
        paired = [(control[r["seed"]], r) for r in by_method.get(method, []) if r["seed"] in control]
        if not paired:
            continue
        lines += ["", f"PSNR of {FINETUNE[method]} minus the L1-only arm, per seed (dB):", ""]
        for s in sets:
            gains = [b["metrics"][f"{s}/psnr_y"] - a["metrics"][f"{s}/psnr_y"] for a, b in paired]
            se = statistics.stdev(gains) / len(gains) ** 0.5 if len(gains) > 1 else None
            lines.append(f"- {s}: " + ", ".join(f"{g:+.3f}" for g in gains) + f" (mean {statistics.fmean(gains):+.3f}"
                         + (f", standard error {se:.3f})" if se is not None else ")"))
    lines += ["", *bicubic_section(bic, sets)]
    lines += ["", "## Runs", "", "| model | seed | best val PSNR-Y | train s | eval s | command |", "|---|---|---|---|---|---|"]
    for r in [pretrain, *sorted(results, key=lambda r: (r["method"], r["seed"]))]:
        lines.append(f"| {r['method']} | {r['seed']} | {r['best_val_psnr_y']:.3f} | {r['train_seconds']} | "
                     f"{r['eval_seconds']} | `{r['command']}` |")
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text("\n".join(lines) + "\n")


def finetune(args: argparse.Namespace, methods: list[str], seeds: list[int], cache: Path) -> Path:
    """``--finetune``: the converged L1 model once, then every (arm, seed) from it; returns the page."""
    quick = list(QUICK_OVERRIDES) if args.quick else []
    epochs = 1 if args.quick else args.pretrain_epochs
    pretrain_config = args.config_dir / f"{args.prefix}{PRETRAIN}.yaml"
    steps = epochs * load_config(pretrain_config, quick).config.data.steps_per_epoch
    # Cosine decay to 0 over the whole run: the model ends converged at its learning rate's floor.
    schedule = [f"run.epochs={epochs}", f"config.cosine_steps={steps}"]
    name = f"epochs{epochs}_cosine"
    pretrain = run_one(PRETRAIN, 0, args, cache / f"pretrain_{name}", schedule, args.pretrain_threads)
    start = [f"config.init_from={pretrain['run_dir']}"]
    jobs = sorted(((m, s) for s in seeds for m in methods), key=lambda job: (job[0].endswith("_l1"), job[1]))
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        results = list(pool.map(lambda job: run_one(*job, args, cache / f"from_{name}", start), jobs))
    probe = load_config(args.config_dir / f"{args.prefix}{methods[0]}.yaml", quick)
    sets = list(probe.config.test_sets)
    torch.set_num_threads(1)
    bic = {scale: bicubic(args, scale, sets, cache) for scale in BICUBIC_SCALES}
    page = args.output or (cache / "super_resolution_finetune.md" if args.quick else FINETUNE_OUTPUT)
    write_finetune_page(pretrain, results, args, sets, page, describe(load_config(pretrain_config, [*schedule, *quick])),
                        bic)
    return page


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    known = FINETUNE if args.finetune else METHODS
    args.prefix = args.prefix if args.prefix is not None else ("reduced_" if args.finetune else "reduced_x2_")
    methods = [m for m in (args.methods or ",".join(known)).split(",") if m]
    bad = [m for m in methods if m not in known]
    if bad:
        raise SystemExit(f"unknown method {bad}; known: {list(known)}")
    seeds = [int(s) for s in args.seeds.split(",") if s]
    cache = args.results_dir / ("quick" if args.quick else args.prefix.rstrip("_"))
    cache.mkdir(parents=True, exist_ok=True)
    if args.finetune:
        print(f"wrote {finetune(args, methods, seeds, cache)}")
        return 0

    probe = load_config(args.config_dir / f"{args.prefix}{methods[0]}.yaml", list(QUICK_OVERRIDES) if args.quick else [])
    scale, sets = probe.config.scale, list(probe.config.test_sets)
    # The contrastive runs cost about 3x the L1 runs: start them first so the workers finish together.
    jobs = sorted(((m, s) for s in seeds for m in methods), key=lambda job: (job[0] != "pcl", job[1]))
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        results = list(pool.map(lambda job: run_one(*job, args, cache), jobs))
    torch.set_num_threads(1)
    bic = bicubic(args, scale, sets, cache)
    bench_rows = bench(args, cache, scale)
    page = args.output or (cache / "super_resolution.md" if args.quick else OUTPUT)
    crops = save_crops(results, args, scale, page.parent / "super_resolution_crops")
    write_page(results, bic, bench_rows, crops, args, scale, sets, page, describe(probe))
    print(f"wrote {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
