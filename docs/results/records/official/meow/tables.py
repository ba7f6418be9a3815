"""The README's per-seed tables of the official MEOW runs, from their records (``--write``: into README.md).

    python docs/results/records/official/meow/tables.py --write

Each table: the test scores as the official code prints them (Macro-/Micro-F1 ± the std over its 50 probe
runs), clustering NMI/ARI, the stop epoch (= the evaluated epoch), seconds per training epoch, wall time to the
end of that epoch, wall time of the final evaluation and the load at the start; last row mean ± sample std.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RECORDS = HERE.parents[1] / "graph_paper"
README = HERE / "README.md"
BEGIN, END = "<!-- tables: tables.py -->", "<!-- /tables -->"
SCORES = [f"{m}_{r}" for m in ("macro_f1", "micro_f1", "auc") for r in (20, 40, 60)] + ["nmi", "ari"]
TIMES = ["selected_epoch", "seconds_per_epoch", "seconds_to_selected", "eval_seconds"]
HEADER = ("| seed | Ma-F1 20 | Ma-F1 40 | Ma-F1 60 | Mi-F1 20 | Mi-F1 40 | Mi-F1 60 | AUC 20 | AUC 40 | AUC 60 | NMI | "
          "ARI | epochs run = selected epoch | s / epoch | s to selected | eval s | load 1 min |")


def mean_std(values: list[float]) -> str:
    return f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}" if len(values) > 1 else f"{values[0]:.2f}"


def score(metrics: dict[str, float], key: str) -> str:
    """A score, with the code's own std over its probe runs for the F1 scores."""
    if not key.startswith(("macro", "micro")):
        return f"{metrics[key]:.2f}"
    return f"{metrics[key]:.2f} ± {metrics[key.replace('_f1_', '_f1_std_')]:.2f}"


def table(dataset: str) -> str:
    records = [json.loads(p.read_text()) for p in sorted(RECORDS.glob(f"official_meow_{dataset}_seed*.json"))]
    lines = [f"### {dataset.upper()}", ""]
    if not records:
        return "\n".join(lines + ["not run"])
    lines += [HEADER, "|---|" + "---|" * 16]
    for r in records:
        m, t = r["metrics"], r["timings"]
        lines.append(f"| {r['seed']} | " + " | ".join(score(m, k) for k in SCORES)
                     + f" | {t['selected_epoch']} | {t['seconds_per_epoch']:.2f} | {t['seconds_to_selected']:.1f} | "
                       f"{t['eval_seconds']:.1f} | {r['machine']['load_average_1min']:.2f} |")
    lines.append(f"| **mean ± std ({len(records)} seeds)** | "
                 + " | ".join(mean_std([r["metrics"][k] for r in records]) for k in SCORES) + " | "
                 + " | ".join(mean_std([r["timings"][k] for r in records]) for k in TIMES) + " | |")
    versions = sorted({r["data_version"] for r in records})
    return "\n".join(lines + ["", f"seeds: {[r['seed'] for r in records]}  data_version: {versions}"])


def tables() -> str:
    return "\n\n".join(table(d) for d in ("acm", "dblp", "imdb"))


def written(text: str) -> str:
    """``text`` (the README) with the part between its markers replaced by :func:`tables`."""
    head, rest = text.split(BEGIN)
    return f"{head}{BEGIN}\n{tables()}\n{END}{rest.split(END, 1)[1]}"


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        README.write_text(written(README.read_text()))
    else:
        print(tables())
