"""The graph_paper record of one official code_adameow run, parsed from its time-stamped log.

    python record.py LOG SEED MACHINE_TXT DATA_DIR > docs/results/records/graph_paper/official_adameow_acm_seed<SEED>.json

The log and MACHINE_TXT are what run_official_adameow_gpu.sh (on the GPU machine) or
../adameow/run_official_adameow_cpu.sh (on the CPU; its records are arm ``official_adameow_cpu``) write (each log
line: epoch seconds, then the official output). The official code selects nothing: it prints test scores at epochs
500, 600, ..., 1,200 (stopping at the first ratio whose AUC is below its auc_limit, 97); the record holds the last
epoch it evaluated, named in the timings, and the 20-label Macro-F1 of every evaluation in ``evaluations``.
"""

import datetime
import hashlib
import json
import re
import sys
from pathlib import Path

log, seed, machine_txt, data_dir = sys.argv[1], int(sys.argv[2]), sys.argv[3], Path(sys.argv[4])
# the data version as the official MEOW records compute it: SHA-256 of the sorted SHA-256s of the data folder's files
sums = sorted(hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(data_dir.iterdir()) if f.is_file())
lines = [line.split(" ", 1) for line in open(log).read().splitlines()]
start = float(lines[0][0])
epochs = {int(m.group(1)): float(t) - start for t, text in lines if (m := re.match(r"Epoch: (\d+)$", text))}
tests = [(float(t) - start, m.groups()) for t, text in lines if (m := re.search(
    r"\[Test Classification\] Macro-F1_mean: ([\d.]+) var: ([\d.]+)\s+Micro-F1_mean: ([\d.]+) var: ([\d.]+) "
    r"auc: ([\d.]+) var: ([\d.]+)", text))]
# each evaluation starts with its k-means line: (seconds, (epoch, NMI, ARI))
kmeans = [(float(t) - start, m.groups()) for t, text in lines
          if (m := re.search(r"\[Clustering\] Epoch: (\d+) NMI: ([\d.]+)\s+ARI: ([\d.]+)", text))]
starts, clusters = [t for t, _ in kmeans], [groups for _, groups in kmeans]
evaluated = int(clusters[-1][0])                    # the last evaluated epoch (1-based, as the code prints it)
# then one test line per ratio until an AUC falls below the limit
rounds = [[v for t, v in tests if a <= t < b] for a, b in zip(starts, starts[1:] + [float("inf")])]
metrics: dict[str, float] = {}
for ratio, values in zip((20, 40, 60), rounds[-1]):
    ma, mas, mi, mis, auc, aucs = map(float, values)
    metrics |= {f"macro_f1_{ratio}": ma, f"micro_f1_{ratio}": mi, f"auc_{ratio}": auc,
                f"macro_f1_std_{ratio}": mas, f"micro_f1_std_{ratio}": mis, f"auc_std_{ratio}": aucs}
metrics |= {"nmi": float(clusters[-1][1]), "ari": float(clusters[-1][2])}
machine = open(machine_txt).read().splitlines()
if machine[0].startswith("cpu:"):                   # run_official_adameow_cpu.sh: cpu, versions, cores, date
    arm, command, patch = "official_adameow_cpu", f"python3 -u main.py acm --seed {seed}", "adameow/code_adameow_cpu.patch"
    versions, host = machine[1], {"platform": machine[0].split(":", 1)[1].strip(), "cores": int(machine[2]),
                                  "device": "cpu", "threads": 1}
else:                                               # run_official_adameow_gpu.sh: nvidia-smi csv, versions, cores
    arm, command, patch = "official_adameow", f"python3 -u main.py acm --seed {seed} --gpu 0", "adameow_gpu/code_adameow_gpu.patch"
    versions, host = machine[2], {"platform": "H200 device machine", "cores": int(machine[3]), "device": "cuda:0",
                                  "device_name": machine[1].split(",")[0].strip(), "threads": None}
record = {
    "page": "graph_paper", "arm": arm, "group": "acm", "seed": seed,
    "command": command, "config": None, "overrides": [], "config_sha256": None,
    "data_version": hashlib.sha256("".join(sums).encode()).hexdigest()[:12],
    "code": {"repository": "github.com/jianxiangyu/MEOW", "commit": "6a072d79648ab83f7ec7b7482af1696ed00938a1",
             "folder": "code_adameow", "patch": f"docs/results/records/official/{patch}"},
    "machine": host | {"load_average_1min": None, "precision": "fp32"},
    "libraries": dict(zip(*[iter(versions.split())] * 2)),
    "metrics": metrics,
    "timings": {"epochs_run": evaluated, "selected_epoch": evaluated, "train_seconds": round(epochs[evaluated - 1], 1),
                "seconds_per_epoch": round(epochs[evaluated - 1] / evaluated, 3),
                "seconds_to_selected": round(epochs[evaluated - 1], 1),
                "eval_seconds": round(tests[-1][0] - epochs[evaluated - 1], 1)},
    "evaluations": {int(epoch): float(values[0][0]) for (epoch, _, _), values in zip(clusters, rounds)},
    "recorded": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
}
if evaluated < 1200:
    record["stopped"] = f"at epoch {evaluated} of 1,200" + (
        ": the device time ran out (run_official_adameow_gpu.sh's deadline)" if arm == "official_adameow" else "")
json.dump(record, sys.stdout, indent=2)
print()
