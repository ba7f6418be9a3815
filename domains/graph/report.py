"""``contrasuite compare graph``: MEOW, AdaMEOW, plain InfoNCE and WEINCE on ACM, DBLP and IMDB.

Two protocols, each its own page and records (``contrasuite.pipelines.compare`` runs them):

- ``--protocol paper`` (``docs/results/graph_paper.md``): the full configs ``configs/graph/<method>_<dataset>.yaml``
  of MEOW, AdaMEOW and InfoNCE on the same encoder, the MEOW paper's schedule; beside them the official
  MEOW code's runs, whose records its own script writes (docs/results/records/official/meow/).
- ``--protocol reduced`` (``docs/results/graph.md``): ``configs/graph/reduced/``, 60 epochs and 20 probe
  runs, the four methods.

Each run: the test scores of the checkpoint selected on validation Macro-F1 (``best.pt``), at the probe
iteration selected on validation. A cell is the mean ± std over the seeds; the page also gives MEOW minus
InfoNCE and official minus ours with their standard errors.

    contrasuite compare graph [--protocol paper|reduced] [--seeds 0 1 2 3 4] [--arms meow_acm ...] [--jobs N]
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any, Sequence

from contrasuite.pipelines.api import Arm, Comparison, Effect, NOT_EITHER, NOT_RUN, compare_main, difference, load_config

METHODS = {"paper": ("meow", "adameow", "infonce"), "reduced": ("meow", "adameow", "infonce", "weince")}
DATASETS = ("acm", "dblp", "imdb")
CONTROLS = {"infonce_ada": ("imdb",), "meow_random_ties": ("acm",), "infonce_random_ties": ("acm",)}
"""Paper-protocol arms on some datasets only: InfoNCE with AdaMEOW's official settings (``infonce_ada_imdb.yaml``),
so that AdaMEOW minus it measures the learned weights apart from AdaMEOW's epochs, learning rate, dropout and anchor;
MEOW and InfoNCE with PSP ties kept at random (``<method>_random_ties_acm.yaml``), so that MEOW minus its random-ties
arm measures what ACM's class-ordered file adds through the official tie rule, and MEOW minus InfoNCE can be read
on a graph that does not follow the file order."""
LABELS = {"meow": "MEOW (ours)", "adameow": "AdaMEOW (ours)", "infonce": "InfoNCE, same encoder (ours)",
          "infonce_ada": "InfoNCE with AdaMEOW's settings (ours)", "weince": "WEINCE, same encoder (ours)",
          "meow_random_ties": "MEOW, PSP ties kept at random (ours)",
          "infonce_random_ties": "InfoNCE, PSP ties kept at random (ours)",
          "official_meow": "MEOW, official code (jianxiangyu/MEOW code_meow, CPU patches)",
          "official_adameow": "AdaMEOW, official code (code_adameow), H200, epoch 500 of 1,200, 20 labels only",
          "official_adameow_cpu": "AdaMEOW, official code (code_adameow, CPU patches), its last evaluation"}
SHORT = {"meow": "MEOW", "adameow": "AdaMEOW", "infonce": "InfoNCE", "infonce_ada": "InfoNCE (AdaMEOW's settings)",
         "weince": "WEINCE", "meow_random_ties": "MEOW (random ties)",
         "infonce_random_ties": "InfoNCE (random ties)", "official_meow": "official MEOW",
         "official_adameow": "official AdaMEOW", "official_adameow_cpu": "official AdaMEOW, CPU"}
OFFICIAL = ("official_meow", "official_adameow", "official_adameow_cpu")
RATIOS = (20, 40, 60)
KEYS = [f"{m}_{r}" for m in ("macro_f1", "micro_f1", "auc") for r in RATIOS] + ["nmi", "ari"]
HEAD = ["Ma-F1 20", "Ma-F1 40", "Ma-F1 60", "Mi-F1 20", "Mi-F1 40", "Mi-F1 60", "AUC 20", "AUC 40", "AUC 60", "NMI", "ARI"]
PAGES = {"paper": "graph_paper", "reduced": "graph"}

# Published reference rows, quoted: (source, {metric: value}); shared/research/domain-pipelines.md section 1(d).
REFERENCE: dict[str, list[tuple[str, dict[str, float]]]] = {
    "acm": [("HeCo, paper (as quoted by the GammaGL HeCo README)", {
        "macro_f1_20": 88.56, "macro_f1_40": 87.61, "macro_f1_60": 89.04,
        "micro_f1_20": 88.13, "micro_f1_40": 87.45, "micro_f1_60": 88.71,
        "auc_20": 96.49, "auc_40": 96.40, "auc_60": 96.55})],
    "dblp": [("HeCo (as quoted by the DiffGraph README; AUCs may be re-runs)", {
        "macro_f1_20": 91.28, "macro_f1_40": 90.34, "macro_f1_60": 90.64,
        "micro_f1_20": 91.97, "micro_f1_40": 90.76, "micro_f1_60": 91.59,
        "auc_20": 98.32, "auc_40": 98.06, "auc_60": 98.59})],
    "imdb": [],
}


def _schedule(arm: str) -> str:
    """``1000 epochs at lr 0.0005``: the shipped paper config's schedule of ``arm``."""
    config = load_config(f"graph/{arm}").resolved
    return f"{config['run']['epochs']} epochs at lr {config['config']['optim']['lr']:g}"


_ADAMEOW_OFFICIAL = {
    "acm": "official code_adameow on this CPU, its last evaluation (epoch 1,200; CPU patches only; "
           "records/official/adameow; its H200 runs stopped at epoch 500 are on the graph_paper page)",
    "dblp": "not run on DBLP: the official code has no resume, and at its ACM pace on this CPU (the graph_paper "
            "page's ACM Time line) its 1,500 DBLP epochs and evaluations outlast a 3 h session; on ACM it runs beside "
            "ours (the ACM row)",
    "imdb": "not run on IMDB: ours shows the effect there, so no missing effect is left to settle; on ACM the official "
            "code runs beside ours (the ACM row)",
}
"""What each AdaMEOW row's official-code cell says: run on ACM, where issue 39 asks for it."""
_MEOW_CLAIM = ("MEOW beats the state of the art (HeCo: ACM Ma-F1 88.56 at 20 labels) through weighted negatives "
               "(abstract, TKDE 2212.13847; the paper's tables were not retrieved)")
EFFECTS = tuple(
    Effect(f"MEOW weighted negatives ({ds.upper()})", _MEOW_CLAIM, "graph_paper", f"meow_{ds}", f"infonce_{ds}",
           "macro_f1_20", f"test Macro-F1, 20 labels per class, {ds.upper()}",
           "full configs, same encoder, checkpoint selected on validation",
           official="the official code_meow, 5 seeds on the same data (it has no InfoNCE arm: it can match our "
                    "MEOW, not show the effect alone)", official_arm=("official_meow", ds),
           settled=NOT_EITHER)
    for ds in DATASETS
) + tuple(
    Effect(f"AdaMEOW learned weights ({ds.upper()})", "AdaMEOW beats MEOW (abstract, TKDE 2212.13847)", "graph_paper",
           f"adameow_{ds}", f"meow_{ds}", "macro_f1_20", f"test Macro-F1, 20 labels per class, {ds.upper()}",
           f"full configs, same encoder, each method's official hyperparameters (AdaMEOW {_schedule(f'adameow_{ds}')}, "
           f"MEOW {_schedule(f'meow_{ds}')})",
           official=_ADAMEOW_OFFICIAL[ds], official_arm=("official_adameow_cpu", ds),
           settled=NOT_EITHER if ds == "acm" else NOT_RUN)
    for ds in DATASETS
) + tuple(
    Effect(f"AdaMEOW learned weights at equal settings ({ds.upper()})", "AdaMEOW beats MEOW (abstract, TKDE 2212.13847): "
           "its learned weights against none, the rest held equal", "graph_paper", f"adameow_{ds}", f"infonce_ada_{ds}",
           "macro_f1_20", f"test Macro-F1, 20 labels per class, {ds.upper()}",
           f"full configs, same encoder, both at AdaMEOW's official settings ({_schedule(f'adameow_{ds}')}, "
           "dropout 0.1, fine anchor)",
           official="the official code has no InfoNCE arm at its settings, and ours shows the effect here")
    for ds in CONTROLS["infonce_ada"]
)
"""The claims this comparison measures (``contrasuite compare effects``)."""


def _methods(protocol: str, dataset: str) -> tuple[str, ...]:
    """The methods of ``protocol`` run on ``dataset``: :data:`METHODS`, and on the paper protocol
    :data:`CONTROLS` where it names ``dataset``."""
    extra = tuple(m for m, on in CONTROLS.items() if dataset in on) if protocol == "paper" else ()
    return METHODS[protocol] + extra


def arms(protocol: str) -> tuple[Arm, ...]:
    """``<method>_<dataset>`` for every method of ``protocol`` on its datasets, testing ``best.pt``."""
    folder = "configs/graph/" + ("reduced/" if protocol == "reduced" else "")
    return tuple(Arm(f"{m}_{d}", f"{folder}{m}_{d}.yaml", group=d, checkpoint="best")
                 for d in DATASETS for m in _methods(protocol, d))


def method_of(record: dict[str, Any]) -> str:
    """``meow`` of arm ``meow_acm``; an official code's arm name as it is."""
    return record["arm"] if record["arm"].startswith("official_") else record["arm"].rsplit("_", 1)[0]


def _cell(runs: list[dict[str, Any]], key: str) -> str:
    """The mean ± std over seeds; one seed: its value ± the std over its probe runs when recorded."""
    values = [r["metrics"][key] for r in runs if key in r["metrics"]]
    if not values:
        return "-"
    if len(values) > 1:
        return f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}"
    name, _, ratio = key.rpartition("_")
    std = runs[0]["metrics"].get(f"{name}_std_{ratio}") if ratio.isdigit() else None
    return f"{values[0]:.2f}" + (f" ± {std:.2f}" if std is not None else "")


def versus(runs: dict[str, list[dict]], method: str, baseline: str) -> str:
    """``method`` minus ``baseline`` in test Macro-F1 per label rate, with the standard error of the difference."""
    a, b = runs.get(method, []), runs.get(baseline, [])
    if len(a) < 2 or len(b) < 2:
        return ""
    parts = []
    for r in RATIOS:
        d = difference([x["metrics"][f"macro_f1_{r}"] for x in a], [y["metrics"][f"macro_f1_{r}"] for y in b])
        parts.append(f"{d.mean:+.2f} ± {d.se:.2f} at {r} labels per class" + (" (beyond 2 standard errors)" if d.beyond else ""))
    return (f"{SHORT[method]} minus {SHORT[baseline]}, test Macro-F1, mean difference ± its standard error over "
            f"{len(a)} and {len(b)} seeds: " + "; ".join(parts) + "."
            + ("" if "beyond" in "".join(parts) else " No difference reaches 2 standard errors."))


def _timing(method: str, runs: list[dict]) -> str:
    """Seconds per epoch, epochs run, the selected epochs, the mean time (and CPU time, where every record has
    it) to the selected checkpoint and the machine's load when the runs started."""
    t = [r["timings"] for r in runs]
    epochs = sorted({x["epochs_run"] for x in t})
    loads = [r["machine"]["load_average_1min"] for r in runs if r.get("machine", {}).get("load_average_1min") is not None]
    devices = sorted({r["machine"].get("device_name") or r["machine"]["device"] for r in runs
                      if r.get("machine", {}).get("device", "cpu") != "cpu"})
    return (f"{SHORT[method]}: {statistics.mean(x['seconds_per_epoch'] for x in t):.2f} s/epoch"
            + (f" on {', '.join(devices)}" if devices else "") + ", "
            f"{', '.join(str(x['epochs_run']) for x in t) if len(epochs) > 1 else epochs[0]} epochs run, "
            f"selected epoch {', '.join(str(x['selected_epoch']) for x in t)}, "
            f"mean {statistics.mean(x['seconds_to_selected'] for x in t):.0f} s to the selected checkpoint"
            + (f" ({statistics.mean(x['cpu_seconds_to_selected'] for x in t):.0f} CPU s)"
               if all("cpu_seconds_to_selected" in x for x in t) else "")
            + (f", {statistics.mean(x['cpu_seconds'] for x in t):.0f} CPU s per run (training and test)"
               if all(x.get("cpu_seconds") for x in t) else "")
            + (f" (1-min load {min(loads):.1f}-{max(loads):.1f} on {runs[0]['machine']['cores']} cores at the starts)"
               if loads else ""))


def _evaluations(method: str, runs: list[dict]) -> str:
    """The 20-label test Macro-F1 an official code printed at each of its evaluations, per seed (it selects none)."""
    per_seed = ["seed {}: {}".format(r["seed"], ", ".join(f"{v:.2f} at {e}" for e, v in r["evaluations"].items()))
                for r in runs if "evaluations" in r]
    name = SHORT[method]
    return f"{name[0].upper()}{name[1:]}: test Macro-F1 at 20 labels per class printed at each evaluation, " + "; ".join(per_seed) + ".\n"


def render_page(protocol: str, records: list[dict[str, Any]], command: str) -> str:
    """The Markdown page of ``protocol`` from its records."""
    paper = protocol == "paper"
    lines = [
        "# Graph: MEOW, AdaMEOW and InfoNCE on ACM, DBLP, IMDB" + (" at the paper's protocol" if paper
                                                                  else " (reduced protocol)"),
        "",
        f"Rendered from the run records in `docs/results/records/{PAGES[protocol]}/` by `{command}`, which trains",
        "the runs that have no current record (a record is current while its config digest and data version match).",
        ("Full configs (`configs/graph/<method>_<dataset>.yaml`): the official codes' hyperparameters, each config's "
         "epochs (the Time lines give them), 50 probe runs. On IMDB, InfoNCE also runs at AdaMEOW's settings "
         "(`infonce_ada_imdb.yaml`: its epochs, learning rate, weight decay, dropout and anchor, no weights). On ACM, "
         "MEOW and InfoNCE also run with the papers tied on PSP PathSim kept at random "
         "(`<method>_random_ties_acm.yaml`) instead of the official code's choice, which follows the class-ordered "
         "file (docs/domains/graph.md, 'Ties in the PSP graph')."
         if paper else "REDUCED protocol: `configs/graph/reduced/`, 60 epochs and 20 probe runs; AdaMEOW runs 60 of "
                       "its 1,200 epochs here, so its rows show an encoder that has barely trained."),
        "Each run: test score of the checkpoint selected on validation Macro-F1, at the probe iteration selected",
        "on validation; nothing is selected on test. NMI/ARI: k-means, 10 fits. A cell is the mean ± std over the",
        "seeds in column `seeds` (one seed: ± the std over its probe runs). Reference rows are quoted, not re-run.",
        "Times: wall seconds of one process with one thread on the machine the records name (a busy machine",
        "stretches them: the CPU seconds and the load are given beside them); time to the selected checkpoint is",
        "the training time (validations included) the selected checkpoint holds, with its CPU seconds where the",
        "checkpoint kept them (older records: the training time scaled by the selected step's share of the steps",
        "run). Per-epoch speed against the",
        "official code, measured in alternating rounds in one process: docs/results/bench_pipelines.md (graph).",
        "",
    ]
    if paper:
        lines += ["The official MEOW rows come from `docs/results/records/official/meow/run_official_meow.sh`",
                  "(the authors' code at a fixed commit with CPU-only patches; its README there): their scores are the",
                  "test scores the official code prints, its time the wall time to its early stop.",
                  "The official AdaMEOW rows ran on one NVIDIA H200 beside ours' AdaMEOW ACM runs of that time (3 + 3",
                  "processes sharing the GPU; ours' are now in `records/graph_paper/torch_ties/`, and ours' ACM rows here",
                  "ran on the CPU): their times are not comparable with the CPU rows;",
                  "`docs/results/records/official/adameow_gpu/run_official_adameow_gpu.sh` (its README there). The official",
                  "code selects nothing and prints test scores at epochs 500, 600, ..., 1,200, stopping at the first label",
                  "rate whose AUC is below its `auc_limit` (97); the device time ended after its epoch-500 evaluation,",
                  "so its rows are epoch 500, 20 labels per class, the embedding of that epoch's training forward."]
        if any(r["arm"] == "official_adameow_cpu" for r in records):
            lines += ["The official AdaMEOW CPU rows ran its whole schedule on this project's CPU machine, one thread, with the",
                      "CPU patches only (`docs/results/records/official/adameow/run_official_adameow_cpu.sh SEED`, then",
                      "`docs/results/records/official/adameow_gpu/record.py`): a row holds the last evaluation it printed",
                      "(epoch 1,200 unless its Time line says fewer epochs ran), and every evaluation is listed below it;",
                      "its time is the wall time to its last epoch, the evaluations before it (about 4 min each) included."]
        lines += [""]
    by_group: dict[str, dict[str, list[dict]]] = {}
    for record in sorted(records, key=lambda r: (r["group"], r["arm"], r["seed"])):
        by_group.setdefault(record["group"], {}).setdefault(method_of(record), []).append(record)
    order = [*OFFICIAL, *METHODS[protocol], *CONTROLS]
    for ds in DATASETS:
        runs = by_group.get(ds, {})
        if not runs:
            continue
        lines += [f"## {ds.upper()}", "", "| method | seeds | " + " | ".join(HEAD) + " |", "|---" * (len(HEAD) + 2) + "|"]
        lines += [f"| {src} | - | " + " | ".join(f"{ref[k]:.2f}" if k in ref else "-" for k in KEYS) + " |"
                  for src, ref in REFERENCE[ds]]
        lines += [f"| {LABELS[m]} | {', '.join(str(r['seed']) for r in runs[m])} | "
                  + " | ".join(_cell(runs[m], k) for k in KEYS) + " |" for m in order if m in runs]
        lines += ["", "Time: " + "; ".join(_timing(m, runs[m]) for m in order if m in runs) + ".", ""]
        lines += [_evaluations(m, runs[m]) for m in order if m in runs and any("evaluations" in r for r in runs[m])]
        for method, baseline in (("meow", "infonce"), ("adameow", "meow"), ("adameow", "infonce_ada"),
                                 ("meow", "meow_random_ties"), ("meow_random_ties", "infonce_random_ties"),
                                 ("official_meow", "meow")):
            if text := versus(runs, method, baseline):
                lines += [text, ""]
    missing = [f"{m}_{d}" for d in DATASETS for m in _methods(protocol, d) if m not in by_group.get(d, {})]
    if missing:
        lines += [f"Not yet run: {', '.join(missing)}.", ""]
    return "\n".join(lines)


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--protocol", choices=PAGES, default="paper",
                   help="paper: the full configs (graph_paper.md); reduced: configs/graph/reduced (graph.md)")


def _build(args: argparse.Namespace) -> Comparison:
    protocol = args.protocol
    return Comparison("graph", PAGES[protocol], arms(protocol), lambda records, command: render_page(protocol, records, command),
                      quick=("run.epochs=1", "run.eval_every_epochs=1", "config.probe.runs=2", "config.val_probe_runs=1"))


def main(argv: Sequence[str] | None = None) -> int:
    return compare_main("graph", _build, argv, __doc__.splitlines()[0], _arguments)


if __name__ == "__main__":
    raise SystemExit(main())
