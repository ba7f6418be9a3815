#!/usr/bin/env bash
# Official MEOW (github.com/jianxiangyu/MEOW, folder code_meow) on one dataset and seed, one thread,
# on the CPU, with code_meow_cpu.patch; writes one run record
#   docs/results/records/graph_paper/official_meow_<dataset>_seed<seed>.json
#
# usage: run_official_meow.sh DATASET SEED        (DATASET: acm | dblp | imdb)
#        run_official_meow.sh export              (steps 1-2 only: the patched tree with DBLP's built files,
#                                                  what `contrasuite bench graph --against official` runs)
# env:   MEOW_GIT    the fetched repository's git directory (default /work/.mirror/jianxiangyu+MEOW/repo)
#        MEOW_COMMIT commit to export (default 6a072d79648ab83f7ec7b7482af1696ed00938a1)
#        OFFICIAL    scratch folder outside the repository (default /tmp/official/meow)
#        PYTHON      interpreter with torch, numpy, scipy, scikit-learn, faiss-cpu (default python)
# The first call exports the commit into $OFFICIAL, applies the patch, and (DBLP only) builds the four
# DBLP files the repository does not ship (see README.md). Runs of the same scratch folder must not
# overlap (the code writes its embeddings and result_*.txt into code_meow/).
set -euo pipefail
DATASET=${1:?dataset}; SEED=${2:-}
EXPORT_ONLY=0; if [ "$DATASET" = export ]; then EXPORT_ONLY=1; DATASET=dblp; else : "${SEED:?seed}"; fi
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../../../../.." && pwd)
MEOW_GIT=${MEOW_GIT:-/work/.mirror/jianxiangyu+MEOW/repo}
MEOW_COMMIT=${MEOW_COMMIT:-6a072d79648ab83f7ec7b7482af1696ed00938a1}
OFFICIAL=${OFFICIAL:-/tmp/official/meow}
PYTHON=${PYTHON:-python}
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

# 1. export the commit blob by blob (git archive stops at the first blob the snapshot lacks: the
#    stored snapshot of the repository lacks its six largest files, DBLP's apcpa.npz, aptpa.npz,
#    nei_apcp.npz, nei_aptp.npz and two AMiner feature files)
"$HERE/../export_commit.sh" "$MEOW_GIT" "$MEOW_COMMIT" "$OFFICIAL" "$HERE/code_meow_cpu.patch"

# 2. DBLP: build the missing meta-path files from pa.txt, pc.txt, pt.txt (only if absent)
if [ "$DATASET" = dblp ] && [ ! -f "$OFFICIAL/data/dblp/apcpa.npz" ]; then
  "$PYTHON" - "$OFFICIAL/data/dblp" <<'PY'
import sys, numpy as np, scipy.sparse as sp
d = sys.argv[1] + "/"
n_a, n_p, n_c, n_t = 4057, 14328, 20, 7723            # params.py dblp type_num
def inc(f, rows, cols, swap):
    e = np.loadtxt(d + f, dtype=np.int64)
    r, c = (e[:, 1], e[:, 0]) if swap else (e[:, 0], e[:, 1])
    return sp.csr_matrix((np.ones(len(e)), (r, c)), shape=(rows, cols))
AP = inc("pa.txt", n_a, n_p, True)                    # pa.txt: "paper author"
PC = inc("pc.txt", n_p, n_c, False)
PT = inc("pt.txt", n_p, n_t, False)
binar = lambda m: (m > 0).astype(np.float64).tocsr()
# the conventions, checked on the files the repository ships: meta-path matrices are path counts,
# nei_* are binary "reached through the path" incidences
assert abs(sp.load_npz(d + "apa.npz") - AP @ AP.T).max() == 0
assert abs(sp.load_npz(d + "nei_ap.npz") - AP).max() == 0
assert abs(sp.load_npz(d + "nei_apc.npz") - binar(AP @ PC)).max() == 0
assert abs(sp.load_npz(d + "nei_apt.npz") - binar(AP @ PT)).max() == 0
APC, APT = AP @ PC, AP @ PT
import time; time.time = lambda: 315619200.0  # zip entry dates fixed (1980-01-02) so the files are byte-reproducible
sp.save_npz(d + "apcpa.npz", (APC @ APC.T).tocsr())
sp.save_npz(d + "aptpa.npz", (APT @ APT.T).tocsr())
sp.save_npz(d + "nei_apcp.npz", binar(APC @ PC.T))
sp.save_npz(d + "nei_aptp.npz", binar(APT @ PT.T))
for f in ("apcpa", "aptpa", "nei_apcp", "nei_aptp"):
    m = sp.load_npz(d + f + ".npz"); print("built", f, m.shape, m.nnz)
PY
fi
[ "$EXPORT_ONLY" = 1 ] && exit 0

# 3. run, one thread, niced; the log is kept beside the scratch tree
LOGDIR=${LOGDIR:-$(dirname "$OFFICIAL")/meow_logs}; mkdir -p "$LOGDIR"
LOG="$LOGDIR/${DATASET}_seed${SEED}.log"
CMD="OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 nice -n 10 python -u main.py $DATASET --seed $SEED"
LOAD=$(cut -d' ' -f1 /proc/loadavg)
cd "$OFFICIAL/code_meow"
nice -n 10 "$PYTHON" -u main.py "$DATASET" --seed "$SEED" > "$LOG" 2>&1

# 4. the record, parsed from the log (nothing is written if the run did not finish)
"$PYTHON" "$HERE/record.py" "$DATASET" "$SEED" "$LOG" "$CMD" "$LOAD" "$OFFICIAL" "$REPO" "$MEOW_COMMIT"
