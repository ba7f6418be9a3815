"""The time-to-checkpoint record of one dataset and seed, from the logs of time_to_checkpoint.sh (issue 41).

usage: python time_to_checkpoint_record.py DATASET SEED OURS_LOG OFFICIAL_LOG MEOW_COMMIT [EPOCHS]
Reads our run folder named in OURS_LOG (eval_test.json: the tested best.pt's position and train_cpu_seconds;
metrics.csv: the validations up to it) and the official code's [timing] lines in OFFICIAL_LOG; writes
time_to_checkpoint_<dataset>_seed<seed>.json beside this file (``_epochs<EPOCHS>`` before ``.json`` when ours was
given EPOCHS epochs instead of its config's). A log without a finished run: one line, exit 2.
"""
import csv
import json
import os
import re
import sys
from pathlib import Path

from contrasuite.pipelines.run_dir import cpu_name

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[3]


def fail(message: str) -> None:
    print(f"time_to_checkpoint_record.py: {message}", file=sys.stderr)
    sys.exit(2)


def one(pattern: str, text: str, log: str) -> tuple[str, ...]:
    """The groups of the single match of ``pattern`` in ``text`` (the log ``log`` must hold exactly one)."""
    found = re.findall(pattern, text, flags=re.M)
    if len(found) != 1:
        fail(f"{log}: expected one line matching {pattern!r}, found {len(found)} (run not finished?)")
    return found[0] if isinstance(found[0], tuple) else (found[0],)


def perf(text: str, log: str) -> dict:
    """The ``[perf]`` lines time_to_checkpoint.sh wrote around a run: command, start/end date and load."""
    out = {"command": one(r"^\[perf\] command=(.*)$", text, log)[0]}
    for edge in ("start", "end"):
        date, load = one(rf"^\[perf\] {edge}=(\S+) load_average_1min=(\S+)$", text, log)
        out[edge] = {"date_utc": date, "load_average_1min": float(load)}
    return out


def ours(log: str) -> dict:
    """Our side: the CPU seconds the tested best.pt holds and the validations up to it."""
    text = Path(log).read_text()
    run_dir = Path(one(r"^\[perf\] run_dir=(.*)$", text, log)[0])
    tested = json.loads((run_dir / "eval_test.json").read_text())
    if tested["checkpoint"] != "best" or "train_cpu_seconds" not in tested:
        fail(f"{run_dir}/eval_test.json: not a best.pt with train_cpu_seconds (code before commit cfa3273?)")
    with open(run_dir / "metrics.csv", newline="") as f:
        val = [(int(r["step"]), float(r["value"])) for r in csv.DictReader(f) if r["name"] == "val/macro_f1"]
    step = tested["global_step"]
    env = json.loads((run_dir / "environment.json").read_text())
    return {**perf(text, log), "run_dir": str(run_dir),
            "code": {"commit": env["git_commit"],
                     "uncommitted_changes_at_start": one(r"^\[perf\] git_status=(.*)$", text, log)[0].strip()},
            "epochs": json.loads((run_dir / "status.json").read_text())["epoch"],
            "selected_epoch": tested["epoch"],
            "selected_on": "validation Macro-F1 (best.pt)",
            "validations_to_selected": sum(s <= step for s, _ in val),
            "validation_macro_f1_selected": round(dict(val)[step], 2),
            "test_macro_f1_20_selected": round(tested["metrics"]["macro_f1_20"], 2),
            "cpu_seconds_to_selected": tested["train_cpu_seconds"],
            "wall_seconds_to_selected": tested["train_seconds"],
            "note": "the trainer's process CPU time of training (validations included, setup excluded) saved in best.pt"}


def official(log: str, dataset: str, seed: str, commit: str) -> dict:
    """The official side: CPU seconds at the end of training less those of setup; its score from the full run's record."""
    text = Path(log).read_text()
    setup = float(one(r"^\[timing\] setup_cpu_s=([\d.]+)$", text, log)[0])
    end = float(one(r"^\[timing\] cpu_s=([\d.]+)$", text, log)[0])
    epochs, _, wall = one(r"^\[timing\] stop epochs_run=(\d+) last_epoch=(\d+) train_s=([\d.]+)$", text, log)
    out = {**perf(text, log),
           "code": {"repository": "github.com/jianxiangyu/MEOW", "commit": commit, "folder": "code_meow",
                    "patches": ["docs/results/records/official/meow/code_meow_cpu.patch",
                                "docs/results/records/graph_perf/official_train_only.patch"]},
           "epochs": int(epochs), "selected_epoch": int(epochs),
           "selected_on": "early stop on the training loss: the last epoch's embedding is evaluated",
           "setup_cpu_seconds": setup, "cpu_seconds_at_end_of_training": end,
           "cpu_seconds_to_selected": round(end - setup, 2), "wall_seconds_to_selected": float(wall)}
    full = REPO / f"docs/results/records/graph_paper/official_meow_{dataset}_seed{seed}.json"
    if full.exists():  # MEOW_TRAIN_ONLY skips the evaluation: the score is the full run's, same code and seed
        rec = json.loads(full.read_text())
        out["full_run"] = {"record": str(full.relative_to(REPO)), "epochs": rec["timings"]["epochs_run"],
                           "test_macro_f1_20": rec["metrics"]["macro_f1_20"]}
    return out


def main() -> None:
    if len(sys.argv) not in (6, 7):
        fail("usage: time_to_checkpoint_record.py DATASET SEED OURS_LOG OFFICIAL_LOG MEOW_COMMIT [EPOCHS]")
    dataset, seed, ours_log, official_log, commit = sys.argv[1:6]
    budget = sys.argv[6] if len(sys.argv) == 7 else ""
    for log in (ours_log, official_log):
        if not os.path.isfile(log):
            fail(f"no log {log}")
    a, b = ours(ours_log), official(official_log, dataset, seed, commit)
    if budget and a["epochs"] != int(budget):
        fail(f"{ours_log}: ours ran {a['epochs']} epochs, not the {budget} asked for")
    rec = {"what": f"MEOW on {dataset.upper()}, seed {seed}: CPU seconds of training up to the checkpoint each side "
                   "selects, ours then the official code_meow, one process and one thread each, one after the "
                   "other (time_to_checkpoint.sh); issue 41"
                   + (f"; ours given {budget} epochs (run.epochs) instead of its config's" if budget else ""),
           "date_utc": f"{a['start']['date_utc']} to {b['end']['date_utc']}",
           "machine": {"cpu": cpu_name(), "cores": os.cpu_count(), "threads": 1,
                       "load_average_1min": "read at the start and end of each side (ours.start, ...): other jobs share the machine"},
           "ours": a, "official": b,
           "ratio_official_over_ours_cpu_to_selected": round(b["cpu_seconds_to_selected"] / a["cpu_seconds_to_selected"], 2)}
    out = HERE / f"time_to_checkpoint_{dataset}_seed{seed}{f'_epochs{budget}' if budget else ''}.json"
    out.write_text(json.dumps(rec, indent=2) + "\n")
    print("wrote", out)


if __name__ == "__main__":
    main()
