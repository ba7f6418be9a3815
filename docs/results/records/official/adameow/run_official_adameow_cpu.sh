#!/bin/bash
# Issue 39: the official code_adameow on ACM on this project's CPU machine, its whole default schedule (1,200 epochs,
# evaluations at 500, 600, ..., 1,200), one thread, each output line time-stamped.
#
#   bash docs/results/records/official/adameow/run_official_adameow_cpu.sh SEED
#
# Code: github.com/jianxiangyu/MEOW 6a072d7, folder code_adameow, with code_adameow_cpu.patch (no .cuda(), numpy's
# removed np.float alias, scikit-learn's KMeans n_init=10 default of the authors' version, the pair weights' first
# linear layer applied per side instead of on N x N x 64 tensors of repeated rows; ../adameow_acm.md). Exported once to
# $OFFICIAL/adameow_cpu (default /tmp/official). Writes, beside this script,
# official_acm_cpu_seed<SEED>.log and official_acm_cpu_machine.txt; then
#   python docs/results/records/official/adameow_gpu/record.py LOG SEED MACHINE_TXT $CONTRASUITE_DATA/graph/acm \
#       > docs/results/records/graph_paper/official_adameow_cpu_acm_seed<SEED>.json
set -eu
SEED=${1:?usage: run_official_adameow_cpu.sh SEED}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
RECORDS=$(cd "$HERE/.." && pwd)
CODE=${OFFICIAL:-/tmp/official}/adameow_cpu
MEOW_GIT=${MEOW_GIT:-/work/.mirror/jianxiangyu+MEOW/repo}
bash "$RECORDS/export_commit.sh" "$MEOW_GIT" 6a072d79648ab83f7ec7b7482af1696ed00938a1 \
    "$CODE" "$HERE/code_adameow_cpu.patch"
{ echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
  python3 -c "import torch,sklearn,numpy,scipy;print('torch',torch.__version__,'sklearn',sklearn.__version__,'numpy',numpy.__version__,'scipy',scipy.__version__)"
  nproc --all; date -u; } > "$HERE/official_acm_cpu_machine.txt"
cd "$CODE/code_adameow"
OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 python3 -u main.py acm --seed "$SEED" 2>&1 \
  | while IFS= read -r line; do printf '%s %s\n' "$(date +%s.%N)" "$line"; done > "$HERE/official_acm_cpu_seed$SEED.log"
