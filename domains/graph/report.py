"""``contrasuite compare graph``: MEOW, AdaMEOW, plain InfoNCE and WEINCE on ACM, DBLP and IMDB.

Each (method, dataset) run trains ``configs/graph/reduced/<method>_<dataset>.yaml`` (or the full
config with ``--full``) through the engine, evaluates the validation-selected checkpoint on test and
caches the result as JSON in ``--cache``, so an interrupted table is completed by running the same
command again. ``--memory`` also records AdaMEOW's pairwise-weight memory and time per epoch on
DBLP (``contrasuite bench graph``, in a child process like the trainings). The table goes to
``docs/results/graph.md`` next to the published HeCo figures and the official MEOW code's ACM run.

    contrasuite compare graph [--datasets acm dblp imdb] [--methods meow adameow infonce weince]
                              [--seeds 0 1] [--full] [--memory] [--table-only] [--cache DIR] [--out FILE]

With several seeds a cell is the mean ± std over the seeds of the probe means; with one seed, the
probe mean ± the std over the probe runs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any, Sequence

from contrasuite.pipelines.api import data_root_args, load_config, page_command, run_cli, thread_env, train_and_test, write_json

ROOT = Path(__file__).resolve().parents[2]
METHODS = ("meow", "adameow", "infonce", "weince")
DATASETS = ("acm", "dblp", "imdb")
LABELS = {"meow": "MEOW (ours)", "adameow": "AdaMEOW (ours)", "infonce": "InfoNCE, same encoder (ours)",
          "weince": "WEINCE, same encoder (ours)"}
RATIOS = (20, 40, 60)

# Published reference rows: (source, {metric_ratio: value}). Sources are those of
# shared/research/domain-pipelines.md section 1(d) and shared/research/measured-anchors.md.
REFERENCE: dict[str, list[tuple[str, dict[str, float]]]] = {
    "acm": [
        ("HeCo, paper (as quoted by the GammaGL HeCo README)", {
            "macro_f1_20": 88.56, "macro_f1_40": 87.61, "macro_f1_60": 89.04,
            "micro_f1_20": 88.13, "micro_f1_40": 87.45, "micro_f1_60": 88.71,
            "auc_20": 96.49, "auc_40": 96.40, "auc_60": 96.55}),
        ("MEOW, official code (jianxiangyu/MEOW, default parameters, seed) run on a 2-core CPU", {
            "macro_f1_20": 91.12, "macro_f1_40": 89.76, "macro_f1_60": 92.12,
            "micro_f1_20": 91.15, "micro_f1_40": 90.11, "micro_f1_60": 92.04,
            "auc_20": 97.46, "auc_40": 97.51, "auc_60": 98.22, "nmi": 45.48, "ari": 31.14}),
    ],
    "dblp": [
        ("HeCo (as quoted by the DiffGraph README; AUCs may be re-runs)", {
            "macro_f1_20": 91.28, "macro_f1_40": 90.34, "macro_f1_60": 90.64,
            "micro_f1_20": 91.97, "micro_f1_40": 90.76, "micro_f1_60": 91.59,
            "auc_20": 98.32, "auc_40": 98.06, "auc_60": 98.59}),
    ],
    "imdb": [],
}


def config_path(method: str, dataset: str, full: bool) -> Path:
    folder = ROOT / "configs" / "graph" / ("" if full else "reduced")
    return folder / f"{method}_{dataset}.yaml"


def cache_file(cache: Path, method: str, dataset: str, full: bool, seed: int) -> Path:
    """``<method>_<dataset>[_full][_seed<s>].json``; seed 0 carries no suffix."""
    return cache / f"{method}_{dataset}{'_full' if full else ''}{f'_seed{seed}' if seed else ''}.json"


def run_one(method: str, dataset: str, full: bool, cache: Path, data_root: str | None, seed: int = 0,
            extra: Sequence[str] = ()) -> dict[str, Any]:
    """Train and test one cell in child processes (``extra``: more overrides) and cache it; a cached cell
    is returned as is."""
    out = cache_file(cache, method, dataset, full, seed)
    if out.is_file():
        return json.loads(out.read_text())
    path = config_path(method, dataset, full)
    overrides = [f"run.output_root={cache.resolve() / 'runs'}", "run.progress=false", f"run.seed={seed}", *extra]
    run = train_and_test(path, overrides, cache / "logs" / f"{out.stem}.log", thread_env(1), checkpoint="best",
                         data_root=data_root)
    epochs = load_config(path, overrides, data_root=data_root).run.epochs
    record = {
        "method": method, "dataset": dataset, "seed": seed, "config": str(path.relative_to(ROOT)), "run_dir": str(run.run_dir),
        "epochs": epochs, "train_seconds": round(run.train_seconds, 1),
        "seconds_per_epoch": round(run.train_seconds / max(epochs, 1), 2),
        "best_epoch": run.test.get("epoch"), "metrics": run.test["metrics"],
        "command": f"contrasuite train {path.relative_to(ROOT)} {' '.join([f'run.seed={seed}', *extra])} && contrasuite eval RUN_DIR",
    }
    write_json(record, out)
    return record


OFFICIAL_TIME = {"acm": "the official MEOW code stops early near epoch 109, 272 s in all on a 2-core CPU "
                        "(shared/research/measured-anchors.md)"}


def versus(records: dict[tuple[str, str], list[dict]], ds: str, method: str = "meow", baseline: str = "infonce") -> str:
    """``method`` against ``baseline`` on ``ds`` in test Macro-F1 per label rate: difference and standard error."""
    a, b = records.get((method, ds), []), records.get((baseline, ds), [])
    if len(a) < 2 or len(b) < 2:
        return ""
    parts = []
    for r in RATIOS:
        x, y = [m["metrics"][f"macro_f1_{r}"] for m in a], [m["metrics"][f"macro_f1_{r}"] for m in b]
        diff = statistics.mean(x) - statistics.mean(y)
        se = (statistics.variance(x) / len(x) + statistics.variance(y) / len(y)) ** 0.5
        parts.append(f"{diff:+.2f} ± {se:.2f} at {r} labels per class"
                     + (" (beyond 2 standard errors)" if abs(diff) >= 2 * se else ""))
    names = LABELS[method].split(" (")[0], LABELS[baseline].split(",")[0]
    verdict = ("" if any("beyond" in part for part in parts) else
               f" No difference reaches 2 standard errors: {names[0]} does not measurably beat {names[1]} here.")
    return (f"{names[0]} minus {names[1]}, test Macro-F1, mean difference ± its standard error over {len(a)} and "
            f"{len(b)} seeds: " + "; ".join(parts) + "." + verdict)


def _timing(method: str, runs: list[dict]) -> str:
    """Seconds per epoch, epochs, the selected epochs and the mean time to reach the selected checkpoint."""
    to_best = statistics.mean(r["best_epoch"] * r["seconds_per_epoch"] for r in runs)
    still_rising = all(r["best_epoch"] == r["epochs"] for r in runs)
    return (f"{method}: {', '.join(str(r['seconds_per_epoch']) for r in runs)} s/epoch (wall), {runs[0]['epochs']} epochs, "
            f"best epoch {', '.join(str(r['best_epoch']) for r in runs)}"
            + (" (the last: still improving when the schedule ends)" if still_rising else "")
            + f", mean {to_best:.0f} s to the checkpoint selected on validation")


def _cell(runs: list[dict[str, float]], key: str) -> str:
    """One seed: the value ± its probe-run std; several: the mean ± std over the seeds."""
    values = [m[key] for m in runs if key in m]
    if not values:
        return "-"
    if len(values) > 1:
        return f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}"
    std = runs[0].get(f"{key.rsplit('_', 1)[0]}_std_{key.rsplit('_', 1)[1]}") if key[-2:].isdigit() else None
    return f"{values[0]:.2f}" + (f" ± {std:.2f}" if std is not None else "")


def render(records: dict[tuple[str, str], list[dict]], memory: dict | None, full: bool, command: str) -> str:
    """The Markdown results page."""
    keys = [f"{m}_{r}" for m in ("macro_f1", "micro_f1", "auc") for r in RATIOS] + ["nmi", "ari"]
    head = ["Ma-F1 20", "Ma-F1 40", "Ma-F1 60", "Mi-F1 20", "Mi-F1 40", "Mi-F1 60", "AUC 20", "AUC 40", "AUC 60", "NMI", "ARI"]
    scope = "full configs" if full else "REDUCED protocol: configs/graph/reduced/, 60 epochs, 20 probe runs"
    lines = [
        "# Graph domain results: MEOW, AdaMEOW, InfoNCE and WEINCE on ACM, DBLP, IMDB" + (" (full length)" if full else ""),
        "",
        f"Generated by `{command}` ({scope}), CPU. The page shows every cached",
        "run; a command trains only the missing runs of the methods, datasets and seeds it names (default: all",
        "four methods and datasets, seed 0), so the rows with other seeds come from the other commands given in",
        "docs/domains/graph.md (Results).",
        "Each run: test score at the linear-probe iteration chosen on validation, of the checkpoint chosen on",
        "validation Macro-F1 (nothing selected on test). NMI/ARI: k-means, 10 runs. A cell with one training seed is",
        "its mean ± std over the probe runs; with several seeds (column `seeds`), the mean ± std over the seeds.",
        "Reference rows are quoted, not re-run here, except the official MEOW code run (measured on a machine",
        "like this one, shared/research/measured-anchors.md). The MEOW/AdaMEOW paper tables were not retrieved",
        "(shared/research/domain-pipelines.md section 1(d)); HeCo figures come from the READMEs named in the rows.",
    ]
    if not full:
        lines += [
            "Full-length runs are on docs/results/graph_full_acm.md.",
            "Reduced AdaMEOW rows run 60 of its 1,000-1,500 epochs (lr 5e-5 to 5e-4), so they show an encoder that",
            "has barely trained; its full-schedule ACM run, and why the rate cannot simply be raised, are in",
            "docs/domains/graph.md (AdaMEOW on ACM).",
        ]
    lines.append("")
    for ds in DATASETS:
        rows = [(f"{src}", "-", [ref]) for src, ref in REFERENCE[ds]]
        rows += [(LABELS[m], ", ".join(str(r.get("seed", 0)) for r in records[(m, ds)]), [r["metrics"] for r in records[(m, ds)]])
                 for m in METHODS if (m, ds) in records]
        if not rows or (full and not any((m, ds) in records for m in METHODS)):
            continue
        lines += [f"## {ds.upper()}", "", "| method | seeds | " + " | ".join(head) + " |", "|---" * (len(head) + 2) + "|"]
        lines += [f"| {name} | {seeds} | " + " | ".join(_cell(runs, k) for k in keys) + " |" for name, seeds, runs in rows]
        timing = [_timing(m, records[(m, ds)]) for m in METHODS if (m, ds) in records]
        timing += [OFFICIAL_TIME[ds]] if timing and ds in OFFICIAL_TIME else []
        lines += ["", "Time: " + "; ".join(timing) if timing else "Time: no runs cached yet.", ""]
        if comparison := versus(records, ds):
            lines += [comparison, ""]
    missing = [f"{m}_{d}" for d in DATASETS for m in METHODS if (m, d) not in records]
    if missing and not full:
        lines += [f"Not yet run: {', '.join(missing)}. `contrasuite compare graph --memory` runs what is missing",
                  "(finished cells are cached as JSON and not re-run) and rewrites this page.", ""]
    if memory:
        lines += [
            "## AdaMEOW pair weights: memory and time on DBLP",
            "",
            f"N = {memory['nodes']} target nodes, d = {memory['dim']}, hidden {memory['hidden']}. The weight MLP runs on",
            "row chunks, forward and in a hand-written backward (core/negatives/learned_weights.py), so autograd keeps",
            f"{memory['weights_saved_for_backward_MiB']} MiB for the weights (the N x N weights and the projected inputs),",
            "where the naive form's input alone is",
            f"{memory['naive_pair_input_MiB']} MiB (N x N x d float32) and its hidden layer {memory['naive_hidden_MiB']} MiB.",
            f"Peak process memory (max RSS) {memory['peak_rss_MiB']} MiB; {memory['seconds_per_epoch']} s per full-batch",
            f"training epoch (median of 3) on {memory['threads']} CPU thread(s), measured with a 1-minute load average of",
            f"{memory.get('load_average_1min', '?')} on {memory.get('cpu_count', '?')} cores (a busy machine makes this slower).",
            "",
        ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="contrasuite compare graph", description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=DATASETS)
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0], help="training seeds (the table shows every cached one)")
    parser.add_argument("--full", action="store_true", help="the full configs instead of configs/graph/reduced/")
    parser.add_argument("--memory", action="store_true", help="also record AdaMEOW's weight memory and time on DBLP")
    parser.add_argument("--table-only", action="store_true", help="only render the page from the cache")
    parser.add_argument("--cache", type=Path, default=Path("runs/compare_graph"))
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "results" / "graph.md")
    parser.add_argument("--data-root", default=None)
    args = parser.parse_args(list(argv) if argv is not None else None)
    for ds in args.datasets:
        for method in args.methods:
            for seed in [] if args.table_only else args.seeds:
                print(f"== {method} on {ds}, seed {seed}", flush=True)
                run_one(method, ds, args.full, args.cache, args.data_root, seed)
    records: dict[tuple[str, str], list[dict]] = {}
    for ds in DATASETS:
        for method in METHODS:
            base = cache_file(args.cache, method, ds, args.full, 0)
            found = sorted(args.cache.glob(f"{base.stem}_seed*.json"), key=lambda f: int(f.stem.rsplit("seed", 1)[1]))
            runs = [json.loads(f.read_text()) for f in ([base] if base.is_file() else []) + found]
            if runs:
                records[(method, ds)] = runs
    memory_file = args.cache / "adameow_memory_dblp.json"
    if args.memory and not args.table_only and not memory_file.is_file():
        run_cli(["bench", "graph", "--dataset", "dblp", "--json", str(memory_file.resolve()), *data_root_args(args.data_root)],
                args.cache / "logs" / "bench_graph.log", thread_env(1))
    memory = json.loads(memory_file.read_text()) if memory_file.is_file() and not args.full else None  # the reduced page's
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(render(records, memory, args.full, page_command("graph", argv if argv is not None else sys.argv[1:])))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
