"""``contrasuite compare code_search``: zero-shot vs InfoNCE vs Soft-InfoNCE with each prior, on the mined set.

The arms (``contrasuite.pipelines.compare`` trains each (arm, seed) without a current record, in children:
``contrasuite train`` then ``contrasuite eval``, ``best.pt`` selected on the mined validation MRR; CoSQA is
only reported):

- ``zero_shot``: the pretrained encoder of ``reduced_infonce.yaml`` with ``run.epochs=0``: evaluated, not
  trained (the same numbers at every seed);
- ``infonce``, ``soft_bm25``, ``soft_simcse``: ``configs/code_search/reduced_<...>.yaml``;
- ``soft_model``: ``reduced_soft_model.yaml``, whose prior is the ``infonce`` run of the same seed
  (``config.prior.checkpoint={after}``).

Two protocols, each its own page and records: ``--protocol reduced`` (``docs/results/code_search.md``:
1,280 mined pairs in batches of 32, fp32) and ``--protocol scale`` (``docs/results/code_search_scale.md``:
the whole mined training split in batches of 256, GradCache chunks of 32, bf16).

The data is the named mined set ``reduced`` (``config.data.mined``), derived from this interpreter's
standard library and site-packages: it is mined first when its folder has no ``manifest.json``
(``contrasuite code-search mine --name reduced``, 4-9 minutes on 2 cores), and a record is current only
while the set's ``dataset_version`` is the one it was trained on (the set changes with the installed
packages).

    contrasuite compare code_search [--protocol reduced|scale] [--seeds 0 1 2] [--arms infonce soft_bm25 ...]
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
from pathlib import Path
from typing import Any, Sequence

from contrasuite.domains.code_search.mined_sets import ensure_mined, file_progress, mined_folder
from contrasuite.pipelines.api import (
    NO_OFFICIAL, ROOT, Arm, Comparison, Effect, compare_main, default_data_root, difference, load_config,
    logged_per_epoch, mean_std,
)

ARMS = {  # name -> (label, config, overrides)
    "zero_shot": ("zero-shot all-MiniLM-L6-v2", "reduced_infonce", ("run.epochs=0",)),
    "infonce": ("InfoNCE", "reduced_infonce", ()),
    "soft_bm25": ("Soft-InfoNCE, BM25 prior", "reduced_soft_bm25", ()),
    "soft_simcse": ("Soft-InfoNCE, SimCSE prior", "reduced_soft_simcse", ()),
    "soft_model": ("Soft-InfoNCE, InfoNCE-model prior", "reduced_soft_model", ("config.prior.checkpoint={after}",)),
}
PRIOR_OF = {"soft_model": "infonce"}
"""An arm whose prior is another arm's run of the same seed (``Arm.after``)."""
SOFT = ("soft_bm25", "soft_simcse", "soft_model")
METRICS = ("mrr", "r@1", "r@5", "r@10")
QUICK = ("config.data.mined=smoke", "config.data.train_limit=64", "config.data.val_limit=32",
         "config.data.test_limit=32", "config.batch_size=8", "config.grad_cache_chunk=0", "config.eval.cosqa=false",
         "run.log_every_steps=2")
"""``--quick``: the ``smoke`` mined set (20 standard-library modules, mined in about a second), a few steps (the
prior's statistics logged every two)."""
QUICK_SIMCSE = ("config.prior.max_steps=2", "config.prior.batch_size=4")
"""``--quick`` for the SimCSE prior only (another prior refuses these keys)."""
PROTOCOLS = {
    "reduced": ((), "REDUCED", "about an hour on 2 CPU cores", "for one epoch on 1,280 mined pairs (40 steps of 32), fp32"),
    "scale": (("config.data.train_limit=0", "config.batch_size=256", "config.grad_cache_chunk=32", "run.precision=bf16"),
              "SCALE", "Soft-InfoNCE's premise (in-batch false negatives need large batches)",
              "for one epoch on the whole mined training split in batches of 256 pairs (GradCache, chunks of 32), "
              "bf16 autocast (as the full configs)"),
}
"""``--protocol``: (overrides on the reduced configs, title, what it is sized for, the training it does)."""
PAGES = {"reduced": "code_search", "scale": "code_search_scale"}

_CLAIM = ("Soft-InfoNCE beats InfoNCE in MRR on CodeSearchNet (six languages) for CodeBERT, GraphCodeBERT and "
          "UniXCoder with each of its three priors (abstract-level claim, Li et al., EMNLP 2023, arXiv:2310.08069; "
          "the MRR table was not retrieved)")
_OFFICIAL = ("none run on our protocol (the official scripts fine-tune CodeBERT-class encoders on their own "
             "CodeSearchNet loaders); its loss and weighting reproduced to 1e-14 (records/official/soft_infonce.md)")
EFFECTS = tuple(
    Effect(f"Soft-InfoNCE, {ARMS[arm][0].split(', ')[1]}", _CLAIM, "code_search_scale", arm, "infonce", "mined_mrr",
           "test MRR on 1,000 pairs of the mined, package-disjoint test split",
           "all-MiniLM-L6-v2, one epoch on the mined training split (set d94fa3f780c2 of the archived scale page), "
           "batches of 256, best.pt on validation MRR",
           official=_OFFICIAL, settled=NO_OFFICIAL)
    for arm in SOFT
)
"""The claims this comparison measures (``contrasuite compare effects``)."""


def arms(protocol: str, quick: bool = False) -> tuple[Arm, ...]:
    """The five arms of ``protocol`` (``quick``: the SimCSE prior trains two steps)."""
    extra = PROTOCOLS[protocol][0]
    out = []
    for name, (_, config, overrides) in ARMS.items():
        own = QUICK_SIMCSE if quick and name == "soft_simcse" else ()
        out.append(Arm(name, f"configs/code_search/{config}.yaml", (*extra, *overrides, *own), after=PRIOR_OF.get(name)))
    return tuple(out)


# -- the mined set ----------------------------------------------------------------------------------------------

def data_folder(arm: Arm) -> tuple[Path, str | None]:
    """The mined dataset ``arm`` reads: ``(folder, set name)``; the name is None for a ``config.data.folder``."""
    data = load_config(ROOT / arm.config, list(arm.overrides)).resolved["config"]["data"]
    if data.get("folder"):
        folder = Path(data["folder"]).expanduser()
        if not folder.is_absolute():
            folder = (ROOT / folder) if (ROOT / folder).exists() else Path(default_data_root()) / folder
        return folder, None
    return mined_folder(data["mined"]), data["mined"]


@functools.lru_cache(maxsize=None)
def _manifest(folder: Path, name: str | None) -> dict[str, Any]:
    """The manifest of the mined set in ``folder``, mining the named set there first when it is missing."""
    if name is not None:
        ensure_mined(name, folder, progress=file_progress)
    return json.loads((folder / "manifest.json").read_text())


def manifest(arm: Arm) -> dict[str, Any]:
    """The manifest of the mined set ``arm`` reads (mined first when absent)."""
    return _manifest(*data_folder(arm))


def data_version(arm: Arm) -> str:
    """The mined set's ``dataset_version``: a record is current only on the set it was trained on."""
    return manifest(arm)["dataset_version"]


def extra(arm: Arm, run: Any) -> dict[str, Any]:
    """The mined set's size, the validation metrics of the selected checkpoint and the prior's logged statistics
    (mean over the epochs) of a tested run."""
    counts = manifest(arm)["counts"]
    prior = {name.rsplit(".", 1)[-1]: statistics.fmean(v) for name, v in logged_per_epoch(run.run_dir, "train/prior/").items()}
    return {"mined_set": {"dataset_version": data_version(arm), **{k: counts[k] for k in ("pairs", "train", "val", "test")}},
            "val_metrics": run.val().get("metrics", {}), "prior": prior}


# -- the page -----------------------------------------------------------------------------------------------------

def run_minutes(record: dict[str, Any]) -> float:
    """The training loop plus the ``contrasuite eval`` process, in minutes (a record converted from the old
    report keeps only their sum, ``train_plus_eval_seconds``)."""
    t = record["timings"]
    seconds = t["train_seconds"] + t["eval_seconds"] if "train_seconds" in t else t["train_plus_eval_seconds"]
    return seconds / 60


def row(label: str, runs: list[dict[str, Any]]) -> str:
    """One table row: seeds, validation MRR, mined and CoSQA test metrics, flagged negatives, minutes."""
    cells = [label, ", ".join(str(r["seed"]) for r in runs),
             mean_std([r["selected"]["validation"] for r in runs if r["selected"].get("validation") is not None])]
    cells += [mean_std([r["metrics"][f"mined_{m}"] for r in runs if f"mined_{m}" in r["metrics"]]) for m in METRICS]
    cells += [mean_std([r["metrics"][f"cosqa_{m}"] for r in runs if f"cosqa_{m}" in r["metrics"]]) for m in METRICS]
    cells.append(mean_std([100 * r["prior"]["flagged_share"] for r in runs if "flagged_share" in r.get("prior", {})], digits=3))
    cells.append(f"{statistics.mean(run_minutes(r) for r in runs):.1f}")
    return "| " + " | ".join(cells) + " |"


def versus(by_arm: dict[str, list[dict[str, Any]]]) -> list[str]:
    """Each Soft-InfoNCE arm minus InfoNCE in mined test MRR, with the standard error of the difference."""
    base = [r["metrics"]["mined_mrr"] for r in by_arm.get("infonce", [])]
    parts = []
    for arm in SOFT:
        soft = [r["metrics"]["mined_mrr"] for r in by_arm.get(arm, [])]
        if len(soft) >= 2 and len(base) >= 2:
            d = difference(soft, base)
            parts.append(f"{ARMS[arm][0].split(', ')[1]} {d.mean:+.2f} ± {d.se:.2f} over {len(soft)} and {len(base)} seeds"
                         + (" (beyond 2 standard errors)" if d.beyond else ""))
    if not parts:
        return []
    return ["Soft-InfoNCE minus InfoNCE, mined test MRR, mean difference ± its standard error: " + "; ".join(parts) + ".", ""]


def _data_sentence(records: list[dict[str, Any]]) -> str:
    """The mined set(s) the records were trained on, with their sizes."""
    sets = {json.dumps(r["mined_set"], sort_keys=True): r["mined_set"] for r in records if "mined_set" in r}
    return "; ".join(f"Dataset version `{s['dataset_version']}`: {s['pairs']} pairs (train {s['train']}, val {s['val']}, "
                     f"test {s['test']})." for s in sets.values())


def render_page(protocol: str, records: list[dict[str, Any]], command: str) -> str:
    """The Markdown page of ``protocol`` from its records."""
    _, title, sized_for, training = PROTOCOLS[protocol]
    by_arm: dict[str, list[dict[str, Any]]] = {}
    for record in sorted(records, key=lambda r: (r["arm"], r["seed"])):
        by_arm.setdefault(record["arm"], []).append(record)
    head = ["method", "seeds", "val MRR", *(f"mined {m}" for m in METRICS), *(f"CoSQA {m}" for m in METRICS),
            "flagged negatives %", "min/run"]
    data = _data_sentence(records)
    lines = [
        f"# Code search results ({title} CPU protocol)",
        "",
        f"Rendered from the run records in `docs/results/records/{PAGES[protocol]}/` by `{command}`, which trains",
        "the runs that have no current record (a record is current while its config digest and the mined set's",
        f"version match). This protocol is sized for {sized_for}, not the paper's setting: all-MiniLM-L6-v2 (a",
        f"sentence encoder, not a code model) fine-tuned {training}, queries cut to 32 and code to 64 tokens in",
        "training, code to 128 tokens at evaluation, on the CPU. Soft-InfoNCE uses the code defaults t/alpha/beta of",
        "the configs (not tuned; any tuning must use the mined validation split, never CoSQA). Numbers are",
        "percentages, mean ± std over the seeds in column `seeds` (one seed: its value).",
        "",
        "* **mined**: a seeded 1,000-pair subset of the held-out, package-disjoint test split of the mined dataset,",
        "  each query ranked against all code of that subset." + (f" {data}" if data else ""),
        "  The set is mined from the standard library and site-packages of the machine that mines it, so it changes",
        "  with the installed packages.",
        "* **CoSQA**: the 500 dev queries ranked against the 6,267-function corpus (MRR over the whole corpus).",
        "* **val MRR**: mined validation subset (500 pairs), which selects `best.pt`.",
        "* **flagged negatives %**: the share of in-batch negatives whose Soft-InfoNCE weight is below 0.5, i.e. that",
        "  the prior singles out as likely false negatives (over half of their row's prior mass when alpha = beta = 1),",
        "  mean over the training steps (`train/prior/*.flagged_share` in each run's metrics.csv).",
        "* **min/run**: the training loop (the trainer's `train_seconds`) plus the `contrasuite eval` process, in",
        "  minutes; the task's setup before the loop is not counted, so a SimCSE-prior run also spends the prior's",
        "  own training (one epoch of SimCSE on the training queries) before its loop.",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    lines += [row(ARMS[arm][0], by_arm[arm]) for arm in ARMS if arm in by_arm]
    lines += ["", *versus(by_arm)]
    missing = [arm for arm in ARMS if arm not in by_arm]
    if missing:
        lines += [f"Not yet run: {', '.join(missing)}.", ""]
    runs = {r["arm"]: (r["config"], r["overrides"]) for r in records}
    if runs:
        lines += ["Each run: `contrasuite train CONFIG OVERRIDES run.seed=S`, then `contrasuite eval RUN_DIR` (every",
                  "record holds its exact commands; `{after}`: the same seed's run folder of the arm named):", "", "```"]
        lines += [" ".join([f"{arm}:", config, *overrides]) + (f"  # {{after}} = {PRIOR_OF[arm]}" if arm in PRIOR_OF else "")
                  for arm in ARMS if arm in runs for config, overrides in [runs[arm]]]
        lines += ["```", ""]
    return "\n".join(lines)


def bench_section(files: Sequence[Path]) -> str:
    """The rows of every ``contrasuite bench code_search --out FILE`` result, with the settings that made them:
    training steps (plain, GradCache) and the side-by-side embedding rows (ours, sentence-transformers).

    No results page includes it any more (it read local ``runs/bench`` files, which no record keeps);
    tests/domains/code_search/test_bench.py still checks its rows."""
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


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--protocol", choices=PROTOCOLS, default="reduced",
                   help="reduced: 1,280 pairs in batches of 32 (code_search.md); scale: the whole training split in "
                        "batches of 256 (code_search_scale.md)")


def _build(args: argparse.Namespace) -> Comparison:
    protocol = args.protocol
    comparison = Comparison("code_search", PAGES[protocol], arms(protocol, args.quick),
                            lambda records, command: render_page(protocol, records, command),
                            quick=QUICK, data_version=data_version, extra=extra)
    # the named set is mined (once) before anything is trained or rendered: the records are keyed by its version
    chosen = [a for a in comparison.arms if args.arms is None or a.name in args.arms]
    for arm in chosen:
        data_version(Arm(arm.name, arm.config, (*arm.overrides, *(QUICK if args.quick else ()))))
    return comparison


def main(argv: Sequence[str] | None = None) -> int:
    return compare_main("code_search", _build, argv, __doc__.splitlines()[0], _arguments)


if __name__ == "__main__":
    raise SystemExit(main())
