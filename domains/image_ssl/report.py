"""``contrasuite compare image_ssl``: the reduced CPU comparison of the image_ssl objectives.

Runs ``configs/image_ssl/reduced_<name>.yaml`` for every objective and seed through the public CLI
(``contrasuite train`` then ``contrasuite eval --checkpoint last``), one thread per run and ``--jobs``
runs at a time, caches each finished run's result as JSON (so a partial comparison resumes where it
stopped, across sessions), adds a random-initialisation reference, and writes
``docs/results/image_ssl.md``: kNN and linear accuracy (mean and std over seeds), wall time, the
exact command, and the WEINCE-vs-InfoNCE sentence computed from the numbers.

    contrasuite compare image_ssl                        # everything: 10 configs x 3 seeds
    contrasuite compare image_ssl --configs infonce,weince --seeds 0
    contrasuite compare image_ssl --quick                # tiny smoke version (not written to docs/)
    contrasuite compare image_ssl --configs infonce,weince,weince_repro --epochs 20   # a longer protocol
    contrasuite compare image_ssl --help
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Sequence

import torch

from contrasuite.pipelines.api import (
    ROOT, config_digest, current_result, load_config, logged_per_epoch, mean_std, page_command, seed_all, setup_task,
    thread_env, train_and_test, write_json,
)

CONFIG_DIR = ROOT / "configs" / "image_ssl"
CONFIGS = (
    "infonce", "dcl", "dhel", "kcl", "weince", "weince_repro", "siglip", "moco", "infonce_ft", "infonce_mochi",
    "infonce_queue",
)
SEEDS = (0, 1, 2)
QUICK_OVERRIDES = (
    "run.epochs=1", "config.batch_size=128", "config.data.train_subset=1000", "config.data.test_subset=1000",
    "config.model.width=8", "config.eval.linear_epochs=5",
)
PER_CONFIG_QUICK = {"infonce_mochi": ("config.negatives.warmup_epochs=0",)}
OUTPUT = ROOT / "docs" / "results" / "image_ssl.md"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="contrasuite compare image_ssl", description=__doc__.splitlines()[0])
    p.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated objective names (default: all)")
    p.add_argument("--seeds", default=",".join(map(str, SEEDS)), help="comma-separated training seeds (default: 0,1,2)")
    p.add_argument("--jobs", type=int, default=2, help="runs at a time, one thread each (default 2)")
    p.add_argument("--quick", action="store_true", help="tiny smoke protocol; results go to <results-dir>/quick")
    p.add_argument("--epochs", type=int, default=None,
                   help="train this many epochs instead of the reduced protocol's (cached and written separately: "
                        "<results-dir>/reduced_epochsN, docs/results/image_ssl_epochsN.md)")
    p.add_argument("--results-dir", type=Path, default=ROOT / "runs" / "compare" / "image_ssl",
                   help="run folders, logs and per-run result JSON (resumable cache)")
    p.add_argument("--output", type=Path, default=None, help=f"markdown page (default {OUTPUT.relative_to(ROOT)}; quick: in results dir)")
    p.add_argument("--data-root", default=None, help="data root (default: $CONTRASUITE_DATA or the config)")
    p.add_argument("--rerun", action="store_true", help="ignore cached results and run again")
    p.add_argument("--report-only", action="store_true", help="only rebuild the page from cached results")
    return p


def _names(text: str, allowed: Sequence[str], what: str) -> list[str]:
    items = [t.strip() for t in text.split(",") if t.strip()]
    bad = [t for t in items if t not in allowed]
    if bad:
        raise SystemExit(f"unknown {what} {bad}; known: {list(allowed)}")
    return items


def run_one(name: str, seed: int, args: argparse.Namespace, cache: Path) -> dict[str, Any]:
    """Train and evaluate one (config, seed) through the CLI; returns (and caches) its result."""
    result_path = cache / f"{name}_seed{seed}.json"
    config = CONFIG_DIR / f"reduced_{name}.yaml"
    overrides = [f"run.seed={seed}", f"run.output_root={cache / 'runs'}"]
    if args.quick:
        overrides += [*QUICK_OVERRIDES, *PER_CONFIG_QUICK.get(name, ())]
    overrides += epoch_overrides(args)
    digest = config_digest(config, overrides)
    if not args.rerun and (cached := current_result(result_path, digest)) is not None:
        return cached
    if result_path.is_file() and not args.rerun:
        print(f"{name} seed {seed}: the config changed since the cached run; running it again", flush=True)
    log = cache / "logs" / f"{name}_seed{seed}.log"
    log.unlink(missing_ok=True)
    run = train_and_test(config, overrides, log, thread_env(1), checkpoint="last", data_root=args.data_root)
    metrics, run_dir = run.test["metrics"], run.run_dir
    result = {
        "config": name, "seed": seed, "quick": args.quick,
        "knn_acc": metrics["knn_acc"], "linear_acc": metrics.get("linear_acc"),
        "wall_s": round(run.train_seconds + run.eval_seconds, 1), "cpu_s": round(run.cpu_seconds, 1),
        "run_dir": str(run_dir), "command": run.command,
        "objective_state": objective_state_per_epoch(run_dir), "config_sha256": digest,
    }
    write_json(result, result_path)
    print(f"{name} seed {seed}: kNN {result['knn_acc']:.2f}  linear {result['linear_acc'] or float('nan'):.2f}  "
          f"({result['wall_s']:.0f} s wall, {result['cpu_s']:.0f} s CPU)", flush=True)
    return result


def epoch_overrides(args: argparse.Namespace) -> list[str]:
    return [] if args.epochs is None else [f"run.epochs={args.epochs}"]


def objective_state_per_epoch(run_dir: Path) -> dict[str, list[float]]:
    """The objectives' logged state (``state/...``, e.g. WEINCE's gate ``lambda_mean``) averaged per epoch,
    by the state's last name (``lambda_mean``)."""
    return {name.rsplit(".", 1)[-1]: values for name, values in logged_per_epoch(run_dir, "state/").items()}


def random_init_reference(seed: int, args: argparse.Namespace, cache: Path) -> dict[str, Any]:
    """kNN / linear accuracy of the untrained reduced encoder (same evaluation), cached like a run."""
    result_path = cache / f"random_init_seed{seed}.json"
    if result_path.is_file() and not args.rerun:
        return json.loads(result_path.read_text())
    overrides = [f"run.seed={seed}", *(QUICK_OVERRIDES if args.quick else ())]
    loaded = load_config(CONFIG_DIR / "reduced_infonce.yaml", overrides, data_root=args.data_root)
    torch.set_num_threads(1)
    seed_all(seed)
    task = setup_task(loaded.task_class(), loaded.config, device=torch.device("cpu"), precision=loaded.run.precision,
                      run_dir=cache, data_root=loaded.run.data_root, seed=seed)
    metrics = task.evaluate("test")
    result = {"config": "random_init", "seed": seed, "quick": args.quick, "knn_acc": metrics["knn_acc"],
              "linear_acc": metrics.get("linear_acc"), "data_source": task.data_source}
    write_json(result, result_path)
    return result


def _stats(values: list[float]) -> tuple[float, float | None]:
    mean = statistics.fmean(values)
    return mean, (statistics.stdev(values) if len(values) > 1 else None)


def versus(rows: dict[str, list[dict[str, Any]]], name: str, baseline: str) -> str:
    """``name`` against ``baseline`` in linear accuracy: the difference, its standard error and a verdict."""
    vals = [r["linear_acc"] for r in rows.get(name, [])]
    base = [r["linear_acc"] for r in rows.get(baseline, [])]
    if not vals or not base:
        return f"`{name}` or `{baseline}` has no finished runs yet."
    (mean, std), (b_mean, b_std) = _stats(vals), _stats(base)
    diff = mean - b_mean
    spread = ((std or 0.0) ** 2 / len(vals) + (b_std or 0.0) ** 2 / len(base)) ** 0.5
    verdict = ("within the seed spread (|difference| < 2 standard errors)" if abs(diff) < 2 * spread
               else ("above" if diff > 0 else "below") + f" `{baseline}` by more than 2 standard errors")
    return (f"`{name}`: linear {mean:.2f} ± {(std or 0):.2f} vs `{baseline}` {b_mean:.2f} ± {(b_std or 0):.2f} "
            f"({len(vals)} and {len(base)} seeds), a difference of {diff:+.2f} points (standard error {spread:.2f}), "
            f"{verdict}.")


PAPER_CLAIMS = (
    (("weince", "weince_repro"), "infonce", "WEINCE against InfoNCE",
     "The WEINCE paper reports +3.3 points of linear accuracy over InfoNCE on CIFAR-100 with ResNet-18 and "
     "100 epochs (50.01 -> 53.28)."),
    (("infonce_ft",), "moco", "Feature Transformation against its MoCo baseline",
     "The FT paper reports +2.1 points of ImageNet-1K linear accuracy over MoCo-v2 with ResNet-50 and 200 "
     "epochs (67.5 -> 69.6; official README)."),
)
"""(methods, baseline, section title, the paper's claim): a section wherever either side has runs."""


def claim_sections(rows: dict[str, list[dict[str, Any]]]) -> list[str]:
    """One section per paper claim with runs on either side: what this protocol shows (or what is missing)."""
    lines: list[str] = []
    for names, baseline, title, claim in PAPER_CLAIMS:
        if baseline in rows or any(n in rows for n in names):
            compared = " ".join(versus(rows, n, baseline) for n in names)
            lines += [f"## {title}", "", f"{claim} On this reduced CIFAR-10 protocol: {compared}", ""]
    return lines


def protocol(args: argparse.Namespace) -> str:
    """The reduced protocol in words, read from the resolved ``reduced_infonce.yaml`` (plus quick overrides)."""

    overrides = [*(QUICK_OVERRIDES if args.quick else ()), *epoch_overrides(args)]
    loaded = load_config(CONFIG_DIR / "reduced_infonce.yaml", overrides)
    c, run = loaded.config, loaded.run
    subset = f"a class-balanced {c.data.train_subset:,}-image training subset" if c.data.train_subset else "all 50,000 training images"
    test = f"{c.data.test_subset:,}-image class-balanced test subset" if c.data.test_subset else "full 10,000-image test set"
    return (
        f"`{c.model.encoder}` encoder of width {c.model.width}, {subset}, batch {c.batch_size}, {run.epochs} epochs, "
        f"{c.optim.name} lr {c.optim.lr}, crops of ({c.augment.crop_scale[0]}, {c.augment.crop_scale[1]}) area, "
        f"{run.precision}, one CPU thread per run. Evaluation on frozen encoder features with BatchNorm in eval mode: "
        f"weighted kNN (k = {c.eval.knn_k}, T = {c.eval.knn_temperature}) with the training subset as the bank, and a "
        f"linear probe (logistic regression, {c.eval.linear_epochs} epochs; L2 weight and epoch selected on a stratified "
        f"{c.data.val_fraction:.0%} validation split of the training subset), both reported on the {test}, at the last "
        "checkpoint"
    )


def gate_section(rows: dict[str, list[dict[str, Any]]]) -> list[str]:
    """How WEINCE's gate evolves: per-epoch means over seeds of the logged ``lambda`` statistics."""
    lines: list[str] = []
    for name in ("weince", "weince_repro"):
        states = [r.get("objective_state") or {} for r in rows.get(name, [])]
        states = [st for st in states if st.get("lambda_mean")]
        if not states:
            continue
        keys = [k for k in ("lambda_mean", "lambda_std", "lambda_active", "beta_ema") if all(k in st for st in states)]
        epochs = min(len(st["lambda_mean"]) for st in states)
        shown = sorted({0, epochs // 4, epochs // 2, 3 * epochs // 4, epochs - 1})
        lines += [f"`{name}` ({len(states)} seeds; `lambda_active` is the share of anchors with lambda > 0.5):", "",
                  "| epoch | " + " | ".join(keys) + " |", "|---" * (len(keys) + 1) + "|"]
        for e in shown:
            cells = [mean_std([st[k][e] for st in states], 2 if k == "beta_ema" else 3) for k in keys]
            lines.append(f"| {e + 1} | " + " | ".join(cells) + " |")
        lines.append("")
    if lines:
        lines = ["## WEINCE's gate during training", "",
                 "The gate lambda (per anchor, no gradient) logged every `run.log_every_steps` steps as "
                 "`state/objective.terms.0.*` in each run's metrics.csv, averaged per epoch, mean ± std over seeds.",
                 "", *lines]
    return lines


def write_report(results: list[dict[str, Any]], baseline: list[dict[str, Any]], args: argparse.Namespace,
                 names: list[str], seeds: list[int], output: Path, command: str) -> None:
    rows: dict[str, list[dict[str, Any]]] = {}
    for r in results:
        rows.setdefault(r["config"], []).append(r)
    n_seeds = len(seeds)
    names = [c for c in CONFIGS if c in names or c in rows]
    source = baseline[0]["data_source"] if baseline else "CIFAR-10 (JPEG copy)"
    lines = [
        "# image_ssl: reduced CPU comparison of the objectives" + (" (QUICK smoke version)" if args.quick else ""),
        "",
        f"Data: {source}. **Reduced protocol, not the paper setting** (`configs/image_ssl/base/reduced.yaml`): "
        f"{protocol(args)}. Accuracies in %, mean ± standard deviation over training seeds.",
        "",
        f"Command: `{command}`",
        "",
        f"Machine: {os.cpu_count()} CPU cores, torch {torch.__version__}, {args.jobs} run(s) at a time.",
        "",
        "| objective | config | seeds | kNN acc | linear acc | wall time per run (s) | CPU time per run (s) |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in names:
        got = sorted(rows.get(name, []), key=lambda r: r["seed"])
        if not got:
            lines.append(f"| {name} | `reduced_{name}.yaml` | 0/{n_seeds} | - | - | - | - |")
            continue
        lines.append(
            f"| {name} | `reduced_{name}.yaml` | {len(got)}/{n_seeds} | {mean_std([r['knn_acc'] for r in got])} | "
            f"{mean_std([r['linear_acc'] for r in got if r['linear_acc'] is not None])} | "
            f"{statistics.fmean(r['wall_s'] for r in got):.0f} | {statistics.fmean(r['cpu_s'] for r in got):.0f} |"
        )
    if baseline:
        lines.append(
            f"| random init (no training) | `reduced_infonce.yaml` | {len(baseline)}/{n_seeds} | "
            f"{mean_std([b['knn_acc'] for b in baseline])} | {mean_std([b['linear_acc'] for b in baseline])} | - | - |"
        )
    missing = [f"{c} ({len(rows.get(c, []))}/{n_seeds})" for c in names if len(rows.get(c, [])) < n_seeds]
    total_wall = sum(r["wall_s"] for r in results)
    lines += [
        "",
        f"Sum of per-run wall times: {total_wall / 60:.1f} min (runs overlap when `--jobs` > 1). "
        + (f"Each run is single-threaded, so its CPU time is about its wall time on an otherwise idle core: at the "
           f"mean {statistics.fmean(r['cpu_s'] for r in results):.0f} s of CPU per run, the full table "
           f"({len(names)} configs x {n_seeds} seeds) needs about "
           f"{statistics.fmean(r['cpu_s'] for r in results) * len(names) * n_seeds / 2 / 60:.0f} min "
           "with the default `--jobs 2` on an idle 2-core machine, plus about a minute for the random-init references."
           if results else ""),
        "",
        *claim_sections(rows),
        *gate_section(rows),
    ]
    if missing:
        lines += ["**Incomplete**: missing seeds for " + ", ".join(missing) + ". Rerun the command to resume; "
                  "finished runs are cached in the results folder.", ""]
    lines += [
        "Per-run results (JSON, with each run's exact train command) are cached under the results folder; "
        "the full-scale configs (`configs/image_ssl/<name>.yaml`, ResNet-18, 200 epochs, batch 512) are what a "
        "GPU user runs: `contrasuite train configs/image_ssl/infonce.yaml`.",
        "",
    ]
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_suffix(".tmp")
    tmp.write_text("\n".join(lines))
    os.replace(tmp, output)
    print(f"wrote {output}")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    names = _names(args.configs, CONFIGS, "config")
    seeds = [int(s) for s in _names(args.seeds, [str(s) for s in range(10_000)], "seed")]
    suffix = "" if args.epochs is None else f"_epochs{args.epochs}"
    cache = args.results_dir / (("quick" if args.quick else "reduced") + suffix)
    cache.mkdir(parents=True, exist_ok=True)
    default_output = OUTPUT.with_name(f"{OUTPUT.stem}{suffix}.md")
    output = args.output or (cache / "image_ssl.md" if args.quick else default_output)
    command = page_command("image_ssl", argv)
    errors: list[BaseException] = []
    if not args.report_only:
        jobs = [(n, s) for s in seeds for n in names]
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            futures = [pool.submit(run_one, n, s, args, cache) for n, s in jobs]
            errors = [f.exception() for f in futures if f.exception() is not None]
        for err in errors:
            print(f"FAILED: {err}", file=sys.stderr)
        for seed in seeds:
            random_init_reference(seed, args, cache)
    results = [json.loads(p.read_text()) for p in sorted(cache.glob("*_seed*.json"))]
    runs = [r for r in results if r["config"] in names and r["seed"] in seeds]
    baseline = [r for r in results if r["config"] == "random_init" and r["seed"] in seeds]
    write_report(runs, baseline, args, names, seeds, output, command)
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
