"""One run record of the official MEOW from its log (called by run_official_meow.sh; a log can be parsed again).

usage: python record.py DATASET SEED LOG COMMAND LOAD OFFICIAL REPO COMMIT
Writes docs/results/records/graph_paper/official_meow_<dataset>_seed<seed>.json under REPO; stops with an
error, writing nothing, when the log holds no finished run. "recorded" is the log's last write (the run's end).
"""
import sys, re, json, os, hashlib, platform, datetime
ds, seed, log, cmd, load, official, repo, commit = sys.argv[1:]
text = open(log).read()
num = r"(-?[\d.]+)"  # NMI and ARI can be negative
tests = re.findall(r"\[Test Classification\] Macro-F1_mean: {0} var: {0}\s+Micro-F1_mean: {0} var: {0} auc: {0} var: {0}".format(num), text)
clu = re.findall(r"\[Clustering\] NMI: {0}\s+ARI: {0}".format(num), text)
stop = re.findall(r"\[timing\] stop epochs_run=(\d+) last_epoch=(\d+) train_s=([\d.]+)", text)
ev = re.findall(r"\[timing\] eval_s=([\d.]+)", text)
ends = dict((int(e), float(w)) for e, w in re.findall(r"\[timing\] epoch_end epoch=(\d+) wall_s=([\d.]+)", text))
assert len(tests) == 3 and len(clu) == 1 and len(stop) == 1 and len(ev) == 1, "run not finished: " + log
m = {}
for r, t in zip((20, 40, 60), tests):
    ma, mas, mi, mis, auc, aucs = map(float, t)
    m.update({f"macro_f1_{r}": ma, f"micro_f1_{r}": mi, f"auc_{r}": auc,
              f"macro_f1_std_{r}": mas, f"micro_f1_std_{r}": mis, f"auc_std_{r}": aucs})
order = [f"{k}_{r}" for k in ("macro_f1", "micro_f1", "auc") for r in (20, 40, 60)]
metrics = {k: m[k] for k in order}
metrics["nmi"], metrics["ari"] = float(clu[0][0]), float(clu[0][1])
metrics.update({k.replace("_f1_", "_f1_std_").replace("auc_", "auc_std_"): m[k.replace("_f1_", "_f1_std_").replace("auc_", "auc_std_")] for k in order})
epochs_run, last, train_s = int(stop[0][0]), int(stop[0][1]), float(stop[0][2])
data_dir = os.path.join(official, "data", ds)
sums = sorted(hashlib.sha256(open(os.path.join(data_dir, f), "rb").read()).hexdigest()
              for f in sorted(os.listdir(data_dir)) if os.path.isfile(os.path.join(data_dir, f)))
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "")
import torch, numpy, sklearn, scipy
rec = {"page": "graph_paper", "arm": "official_meow", "group": ds, "seed": int(seed),
       "command": cmd, "config": None, "overrides": [], "config_sha256": None,
       "data_version": hashlib.sha256("".join(sums).encode()).hexdigest()[:12],
       "code": {"repository": "github.com/jianxiangyu/MEOW", "commit": commit, "folder": "code_meow",
                "patch": "docs/results/records/official/meow/code_meow_cpu.patch"},
       "machine": {"platform": platform.platform(), "cpu": cpu, "cores": os.cpu_count(), "threads": 1,
                   "load_average_1min": float(load)},
       "libraries": {"torch": torch.__version__, "numpy": numpy.__version__,
                     "scikit-learn": sklearn.__version__, "scipy": scipy.__version__},
       "metrics": metrics,
       "timings": {"train_seconds": round(train_s, 2), "epochs_run": epochs_run, "selected_epoch": epochs_run,
                   "seconds_per_epoch": round(train_s / epochs_run, 2),
                   "seconds_to_selected": round(ends[last], 2), "eval_seconds": round(float(ev[0]), 2)},
       "recorded": datetime.datetime.fromtimestamp(os.path.getmtime(log), datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
out = os.path.join(repo, "docs/results/records/graph_paper", f"official_meow_{ds}_seed{seed}.json")
with open(out, "w") as f:
    json.dump(rec, f, indent=2); f.write("\n")
print("wrote", out)
