#!/bin/bash
# Issue 39: the official code_adameow (github.com/jianxiangyu/MEOW 6a072d7, code_adameow_gpu.patch: numpy's removed
# np.float alias and scikit-learn's KMeans n_init=10 default of the authors' version, nothing else) and ours
# (contrasuite compare graph --protocol paper --arms adameow_acm), ACM, seeds 0-2, the default schedule
# (1,200 epochs), side by side on one GPU.
#
#   bash run_official_adameow_gpu.sh prepare   # here, from the repository root: fills .device/ (ignored by git)
#   bash .device/run_adameow.sh                # on the GPU machine (the device tool, carry .device)
#
# prepare: .device/meow (the official folder and its ACM data, patched), .device/src (a shallow clone of HEAD, so
# the records name the commit), .device/data (our data root, ACM only), .device/whl (omegaconf and antlr4 wheels
# the GPU image lacks). The run: both codes at once (3 + 3 processes), until DEADLINE seconds, then
# everything packed into $OUT/res.tgz. Records: record.py (official), and ours' records as the runner wrote them.
set -eu
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
MEOW_GIT=${MEOW_GIT:-/work/.mirror/jianxiangyu+MEOW/repo}
COMMIT=6a072d79648ab83f7ec7b7482af1696ed00938a1
[ "${1:-}" = prepare ] || { echo "usage: run_official_adameow_gpu.sh prepare" >&2; exit 2; }
mkdir -p .device && grep -qx "/.device/" .git/info/exclude || echo "/.device/" >> .git/info/exclude
rm -rf .device/meow .device/src .device/whl && mkdir -p .device/meow .device/whl .device/data/graph
git --git-dir="$MEOW_GIT" archive "$COMMIT" code_adameow data/acm 2>/dev/null | tar -x -C .device/meow || true
(cd .device/meow && patch -p1 < "$HERE/code_adameow_gpu.patch")
cp -r "${CONTRASUITE_DATA:-../shared/data}/graph/acm" .device/data/graph/
git clone -q --depth 1 "file://$PWD" .device/src
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux2014_x86_64 -d .device/whl omegaconf==2.3.0
python3 -m pip wheel -q --no-deps -w .device/whl antlr4-python3-runtime==4.9.3
sed -n '/^# --- device script ---$/,$p' "$0" | tail -n +2 > .device/run_adameow.sh
echo "prepared .device ($(du -sh .device | cut -f1)); on the GPU machine: bash .device/run_adameow.sh"
exit 0
# --- device script ---
set -u
DEADLINE=${DEADLINE:-540}
ROOT=$PWD; RES=/tmp/res; mkdir -p $RES
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .device/whl/*.whl > $RES/pip.log 2>&1
mkdir -p /tmp/pkg && ln -sfn $ROOT/.device/src /tmp/pkg/contrasuite
export PYTHONPATH=/tmp/pkg:/tmp/site CONTRASUITE_DATA=$ROOT/.device/data NO_ALBUMENTATIONS_UPDATE=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; python3 -c "import torch,sklearn,numpy,scipy;print('torch',torch.__version__,'sklearn',sklearn.__version__,'numpy',numpy.__version__,'scipy',scipy.__version__)"; nproc; date -u; } > $RES/machine.txt 2>&1
stamp() { while IFS= read -r l; do printf '%s %s\n' "$(date +%s.%N)" "$l"; done; }
cd $ROOT/.device/meow/code_adameow
for s in 0 1 2; do
  (python3 -u main.py acm --seed $s --gpu 0 2>&1 | stamp > $RES/official_seed$s.log) &
done
cd $ROOT
(python3 -m contrasuite.pipelines.cli compare graph --protocol paper --arms adameow_acm --seeds 0 1 2 --jobs 3 --threads 4 \
   --records $RES/records --cache $RES/cmp --out $RES/adameow_page.md 2>&1 | stamp > $RES/ours.log) &
start=$(date +%s)
while [ $(( $(date +%s) - start )) -lt $DEADLINE ] && [ -n "$(jobs -r)" ]; do sleep 5; nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader >> $RES/gpu_use.txt; done
echo "elapsed $(( $(date +%s) - start )) s; still running: $(jobs -r | wc -l)" >> $RES/machine.txt
pkill -f main.py; pkill -f contrasuite.pipelines.cli; sleep 2
rm -rf $RES/cmp/*/runs/*/*/*/checkpoints 2>/dev/null
tar czf $OUT/res.tgz -C /tmp res
grep -h "Classification\|Clustering" $RES/official_seed*.log | tail -60 > $OUT/summary.txt; tail -5 $RES/ours.log >> $OUT/summary.txt
