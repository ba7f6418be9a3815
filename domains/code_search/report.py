"""``contrasuite compare code_search``: zero-shot vs InfoNCE vs Soft-InfoNCE with each prior (reduced).

1. Mines the named set ``reduced`` once (``contrasuite code-search mine --name reduced``: standard
   library and site-packages, at most 500 pairs per package and 20,000 in all) into its folder
   ``<cache root>/code_search/mined/reduced``, or into ``--mined DIR``, unless its ``manifest.json`` exists.
2. Zero-shot: the pretrained encoder of ``reduced_infonce.yaml``, evaluated without training (one
   row; it does not depend on the seed).
3. For every seed: ``reduced_infonce``, then ``reduced_soft_bm25``, ``reduced_soft_simcse`` and
   ``reduced_soft_model`` (whose prior is the ``reduced_infonce`` run of the same seed), each through
   the public CLI (``contrasuite train`` then ``contrasuite eval``, ``best.pt`` selected on the mined
   validation MRR; CoSQA is only reported).

Each finished run is cached as JSON in ``--cache`` (a partial comparison resumes where it stopped).
Writes ``docs/results/code_search.md`` (mean and std over seeds, the commands, the protocol) unless
``--quick``.

    contrasuite compare code_search                      # the whole reduced table (~1 h on 2 idle cores)
    contrasuite compare code_search --methods infonce --seeds 0
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from contrasuite.domains.code_search.mined_sets import ensure_mined as ensure_mined_set, file_progress, mined_folder
from contrasuite.domains.errors import DataError
from contrasuite.pipelines.api import (
    ROOT, load_config, logged_per_epoch, mean_std, setup_task, thread_env, train_and_test, write_json,
)

CONFIG_DIR = ROOT / "configs" / "code_search"
MINED_SET = "reduced"
"""The named mined set of the reduced configs (``config.data.mined``)."""
METHODS = {
    "zero_shot": ("zero-shot all-MiniLM-L6-v2", None),
    "infonce": ("InfoNCE", "reduced_infonce"),
    "soft_bm25": ("Soft-InfoNCE, BM25 prior", "reduced_soft_bm25"),
    "soft_simcse": ("Soft-InfoNCE, SimCSE prior", "reduced_soft_simcse"),
    "soft_model": ("Soft-InfoNCE, InfoNCE-model prior", "reduced_soft_model"),
}
METRICS = ("mrr", "r@1", "r@5", "r@10")
QUICK = ("config.data.train_limit=64", "config.data.val_limit=32", "config.data.test_limit=32", "config.batch_size=8",
         "config.eval.cosqa=false")
QUICK_SIMCSE = ("config.prior.max_steps=2", "config.prior.batch_size=4")
PROTOCOLS = {
    "reduced": ((), "REDUCED", "about an hour on 2 CPU cores", "for one epoch on 1,280 mined pairs (40 steps of 32), fp32"),
    "scale": (("config.data.train_limit=0", "config.batch_size=256", "config.grad_cache_chunk=32", "run.precision=bf16"),
              "SCALE", "Soft-InfoNCE's premise (in-batch false negatives need large batches)",
              "for one epoch on the whole mined training split in batches of 256 pairs (GradCache, chunks of 32), "
              "bf16 autocast (as the full configs; about 1.9x the fp32 speed on this CPU's AMX)"),
}
"""``--protocol``: (overrides on the reduced configs, title, what it is sized for, the training it does)."""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="contrasuite compare code_search", description=__doc__.split("\n\n")[0])
    p.add_argument("--methods", default=",".join(METHODS), help=f"comma list of {list(METHODS)}")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--mined", type=Path, default=None,
                   help=f"the reduced set's folder (default: the named set's, {mined_folder(MINED_SET)})")
    p.add_argument("--cache", type=Path, default=Path("runs/code_search/compare"))
    p.add_argument("--threads", type=int, default=2, help="OMP/torch threads per run")
    p.add_argument("--data-root", default=None)
    p.add_argument("--out", type=Path, default=None, help="default: docs/results/code_search.md (scale: _scale.md)")
    p.add_argument("--protocol", choices=PROTOCOLS, default="reduced",
                   help="reduced: 1,280 pairs in batches of 32; scale: the whole training split in batches of 256 "
                        "(its own cache folder; default page docs/results/code_search_scale.md)")
    p.add_argument("--quick", action="store_true", help="tiny smoke settings; nothing written to docs/")
    p.add_argument("overrides", nargs="*", help="extra key=value overrides for every run")
    return p


def _from_root(path: Path) -> str:
    """``path`` as the runs see it (they run in the repository root): relative there when inside it."""
    path = path.resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def _mined(args: argparse.Namespace) -> Path:
    """The reduced set's folder: ``--mined``, else the named set's."""
    return args.mined or mined_folder(MINED_SET)


def _common(args: argparse.Namespace) -> list[str]:
    folder = [f"config.data.folder={_from_root(args.mined)}"] if args.mined else []  # else the configs' own set
    out = [*folder, f"run.output_root={_from_root(args.cache / 'runs')}", *PROTOCOLS[args.protocol][0]]
    return out + (list(QUICK) if args.quick else []) + list(args.overrides)


def ensure_mined(args: argparse.Namespace) -> None:
    """Mine the reduced set into its folder (a bar of files per source) unless it is there."""
    ensure_mined_set(MINED_SET, _mined(args), progress=file_progress)


def zero_shot(args: argparse.Namespace) -> dict[str, Any]:
    """Evaluate the untrained encoder of reduced_infonce.yaml on val and test (in this process; a bar per stage)."""
    import torch

    from contrasuite.domains.code_search.encoder import console_progress
    torch.set_num_threads(args.threads)
    loaded = load_config(CONFIG_DIR / "reduced_infonce.yaml", _common(args), data_root=args.data_root)
    data_root = Path(loaded.run.data_root)
    task = setup_task(loaded.task_class(), loaded.config, device=torch.device("cpu"), run_dir=args.cache / "zero_shot",
                      data_root=data_root, progress=console_progress)
    started = time.time()
    val = dict(task.evaluate("val"))
    test = dict(task.evaluate("test"))
    return {"val": val, "test": test, "seconds": time.time() - started, "command": f"contrasuite compare code_search --protocol {args.protocol} --methods zero_shot",
            "dataset_version": _dataset_version(args)}


def train_run(method: str, seed: int, args: argparse.Namespace, folder: Path, extra: Sequence[str] = ()) -> dict[str, Any]:
    """Train and evaluate one run; its log goes to ``folder/logs`` (``folder``: the protocol's cache, so a
    quick and a reduced run of the same method and seed keep separate logs)."""
    config = CONFIG_DIR / f"{METHODS[method][1]}.yaml"
    overrides = [f"run.seed={seed}", *_common(args), *extra]
    log = folder / "logs" / f"{method}_seed{seed}.log"
    log.unlink(missing_ok=True)
    run = train_and_test(config.relative_to(ROOT), overrides, log, thread_env(args.threads), data_root=args.data_root)
    prior = {name.rsplit(".", 1)[-1]: statistics.fmean(v) for name, v in logged_per_epoch(run.run_dir, "train/prior/").items()}
    return {"val": run.val(), "test": run.test["metrics"], "seconds": run.train_seconds + run.eval_seconds,
            "run_dir": str(run.run_dir), "command": run.command, "prior": prior, "dataset_version": _dataset_version(args)}


def _dataset_version(args: argparse.Namespace) -> str:
    return json.loads((_mined(args) / "manifest.json").read_text())["dataset_version"]


def _same_dataset(result: dict[str, Any], path: Path, args: argparse.Namespace) -> dict[str, Any]:
    """``result`` (cached at ``path``), refused when it was trained on another mined dataset: the mined
    set depends on the packages installed, so a cache carried to another machine may not match."""
    version, current = result.get("dataset_version"), _dataset_version(args)
    if version is not None and version != current:
        raise DataError(f"{path} was trained on mined dataset {version}, but {_mined(args)} is {current}; "
                        "move that cache aside or mine the same packages")
    return result


def _cached(path: Path, compute, args: argparse.Namespace) -> dict[str, Any]:
    if path.is_file():
        return _same_dataset(json.loads(path.read_text()), path, args)
    result = compute()
    write_json(result, path)
    return result


def _val_mrr(result: dict[str, Any]) -> float | None:
    val = result["val"]
    for key in ("mrr", "best", "value"):
        if isinstance(val.get(key), (int, float)):
            return float(val[key])
    metrics = val.get("metrics", val.get("latest", {}))
    return float(metrics["mrr"]) if isinstance(metrics, dict) and "mrr" in metrics else None


def bench_section(files: Sequence[Path]) -> str:
    """The rows of every ``contrasuite bench code_search --out FILE`` result, with the settings that made them:
    training steps (plain, GradCache) and the side-by-side embedding rows (ours, sentence-transformers)."""
    from contrasuite.domains.code_search.bench import EMBED_HEADER, EMBED_MODES, STEP_HEADER, table_line

    steps, embeds = [], []
    for path in files:
        result = json.loads(path.read_text())
        st = result["settings"]
        where = f"{st['device']}, {st['threads']} thread(s), {st['precision']}"
        rows = result["rows"]
        steps += [f"{table_line(r)} {where}, code {st['max_code_length']} / query {st['max_query_length']} tokens |"
                  for r in rows if r["mode"] not in EMBED_MODES]
        embeds += [f"{table_line(r)} {where}, code {st['max_code_length']} tokens |" for r in rows if r["mode"] in EMBED_MODES]
    text = ""
    if steps:
        text += ("\n## Throughput and memory (`contrasuite bench code_search`)\n\n"
                 f"{STEP_HEADER} setting |\n|---|---|---|---|---|---|\n" + "\n".join(steps) + "\n")
    if embeds:
        text += ("\n## Embedding against plain sentence-transformers (`contrasuite bench code_search`)\n\n"
                 f"{EMBED_HEADER} setting |\n|---|---|---|---|---|---|---|\n" + "\n".join(embeds) + "\n")
    return text


def write_report(results: dict[str, list[dict[str, Any]]], args: argparse.Namespace) -> str:
    manifest = json.loads((_mined(args) / "manifest.json").read_text())
    head = ["method", "seeds", "val MRR", *(f"mined {m}" for m in METRICS), *(f"CoSQA {m}" for m in METRICS),
            "flagged negatives %", "min/run"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for method, runs in results.items():
        if not runs:
            continue
        cells = [METHODS[method][0], str(len(runs)), mean_std([v for r in runs if (v := _val_mrr(r)) is not None])]
        cells += [mean_std([r["test"][f"mined_{m}"] for r in runs if f"mined_{m}" in r["test"]]) for m in METRICS]
        cells += [mean_std([r["test"][f"cosqa_{m}"] for r in runs if f"cosqa_{m}" in r["test"]]) for m in METRICS]
        flagged = [100 * r["prior"]["flagged_share"] for r in runs if "flagged_share" in r.get("prior", {})]
        cells.append(mean_std(flagged, digits=3))
        cells.append(f"{statistics.mean(r['seconds'] for r in runs) / 60:.1f}")
        lines.append("| " + " | ".join(cells) + " |")
    commands = sorted({r["command"] for runs in results.values() for r in runs})
    counts = manifest["counts"]
    bench_text = bench_section(sorted(Path("runs/bench").glob("code_search*.json")))
    _, title, sized_for, training = PROTOCOLS[args.protocol]
    return f"""# Code search results ({title} CPU protocol)

Produced by `contrasuite compare code_search --protocol {args.protocol}` ({time.strftime('%Y-%m-%d')}). This protocol is
sized for {sized_for}, not the paper's setting: all-MiniLM-L6-v2 (a sentence encoder, not a code model) fine-tuned
{training}, queries cut to 32 and code to 64 tokens in training, code to 128
tokens at evaluation, on the CPU. Soft-InfoNCE uses the code defaults t/alpha/beta of the configs (not tuned; any
tuning must use the mined validation split, never CoSQA). Numbers are percentages, mean ± std over seeds.

* **mined**: a seeded 1,000-pair subset of the held-out, package-disjoint test split of the mined dataset, each query
  ranked against all code of that subset. Dataset version `{manifest['dataset_version']}`: {counts['pairs']} pairs
  (train {counts['train']}, val {counts['val']}, test {counts['test']}) from the standard library and site-packages.
* **CoSQA**: the 500 dev queries ranked against the 6,267-function corpus (MRR over the whole corpus).
* **val MRR**: mined validation subset (500 pairs), which selects `best.pt`.
* **flagged negatives %**: the share of in-batch negatives whose Soft-InfoNCE weight is below 0.5, i.e. that
  the prior singles out as likely false negatives (over half of their row's prior mass when alpha = beta = 1),
  mean over the training steps (`train/prior/*.flagged_share` in each run's metrics.csv).
* **min/run**: the training loop (the trainer's `train_seconds`) plus the test evaluation, in minutes; process start
  and the task's setup are not counted, so a SimCSE-prior run also spends the prior's own training (one epoch of
  SimCSE on the training queries) before its loop.

{chr(10).join(lines)}

Commands (each run then `contrasuite eval RUN_DIR`):

```
{chr(10).join(commands)}
```
{bench_text}"""


def default_page(protocol: str) -> Path:
    """``docs/results/code_search.md`` for the reduced protocol, ``code_search_<protocol>.md`` for another."""
    return ROOT / "docs" / "results" / ("code_search.md" if protocol == "reduced" else f"code_search_{protocol}.md")


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    methods = [m for m in args.methods.split(",") if m]
    unknown = sorted(set(methods) - set(METHODS))
    if unknown:
        print(f"compare code_search: unknown method(s) {unknown}; known: {list(METHODS)}", file=sys.stderr)
        return 2
    seeds = [int(s) for s in args.seeds.split(",") if s]
    ensure_mined(args)
    folder = args.cache / ("quick" if args.quick else args.protocol)
    args.out = args.out or default_page(args.protocol)
    results: dict[str, list[dict[str, Any]]] = {m: [] for m in methods}
    if "zero_shot" in methods:
        results["zero_shot"].append(_cached(folder / "zero_shot.json", lambda: zero_shot(args), args))
    for seed in seeds:
        infonce: dict[str, Any] | None = None
        for method in methods:
            if method == "zero_shot":
                continue
            extra: list[str] = list(QUICK_SIMCSE) if args.quick and method == "soft_simcse" else []
            if method == "soft_model":
                infonce = infonce or _cached(folder / f"infonce_seed{seed}.json", lambda: train_run("infonce", seed, args, folder), args)
                extra = [f"config.prior.checkpoint={infonce['run_dir']}"]
            result = _cached(folder / f"{method}_seed{seed}.json", lambda: train_run(method, seed, args, folder, extra), args)
            if method == "infonce":
                infonce = result
            results[method].append(result)
            print(f"{method} seed {seed}: {json.dumps(result['test'])}")
    report = write_report(results, args)
    if args.quick:
        print(report)
    else:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(report)
        print(f"wrote {args.out}")
    return 0
