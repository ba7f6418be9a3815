#!/usr/bin/env bash
# MEOW, ours against the official code_meow: CPU seconds of training up to the checkpoint each side selects,
# one dataset and seed, one thread, the two sides one after the other (issue 41). Writes
#   docs/results/records/graph_perf/time_to_checkpoint_<dataset>_seed<seed>.json
#
# usage: time_to_checkpoint.sh DATASET SEED [EPOCHS]   (DATASET: acm | dblp | imdb)
#        EPOCHS: ours trains that many epochs (run.epochs=EPOCHS, e.g. the official code's stop epoch) instead of
#        the config's; the record is then time_to_checkpoint_<dataset>_seed<seed>_epochs<EPOCHS>.json
# env:   MEOW_GIT    the fetched repository's git directory (default /work/.mirror/jianxiangyu+MEOW/repo)
#        MEOW_COMMIT commit to export (default 6a072d79648ab83f7ec7b7482af1696ed00938a1)
#        PERF        scratch folder for the official copy, our runs and the logs (default /tmp/official/meow_perf)
#        OFFICIAL    the scratch folder of run_official_meow.sh, whose data/dblp holds the four DBLP files it
#                    builds (default /tmp/official/meow; DBLP only)
#        PYTHON      interpreter with torch, numpy, scipy, scikit-learn, faiss-cpu (default python)
# Ours: `contrasuite train` (the trainer saves train_cpu_seconds in every checkpoint, so best.pt holds the CPU
# time to the checkpoint selected on validation) then `contrasuite eval`, which copies it into eval_test.json.
# Official: its own copy of the code (runs must not share a folder: it writes embeds/ and result_*.txt there)
# with code_meow_cpu.patch and official_train_only.patch, run with MEOW_TRAIN_ONLY=1: it prints the CPU
# seconds after setup and after training, then exits. Each log starts and ends with a `[perf]` line (date,
# 1-min load average); time_to_checkpoint_record.py reads everything from the two logs.
set -euo pipefail
DATASET=${1:?dataset}; SEED=${2:?seed}; EPOCHS=${3:-}
case "$DATASET" in acm|dblp|imdb) ;; *) echo "time_to_checkpoint.sh: unknown dataset '$DATASET' (acm, dblp or imdb)" >&2; exit 2;; esac
[[ "$SEED" =~ ^[0-9]+$ ]] || { echo "time_to_checkpoint.sh: seed must be a non-negative integer, got '$SEED'" >&2; exit 2; }
[[ -z "$EPOCHS" || "$EPOCHS" =~ ^[1-9][0-9]*$ ]] || { echo "time_to_checkpoint.sh: epochs must be a positive integer, got '$EPOCHS'" >&2; exit 2; }
NAME=${DATASET}_seed${SEED}${EPOCHS:+_epochs$EPOCHS}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../../../.." && pwd)
MEOW_GIT=${MEOW_GIT:-/work/.mirror/jianxiangyu+MEOW/repo}
MEOW_COMMIT=${MEOW_COMMIT:-6a072d79648ab83f7ec7b7482af1696ed00938a1}
PERF=${PERF:-/tmp/official/meow_perf}
OFFICIAL=${OFFICIAL:-/tmp/official/meow}
PYTHON=${PYTHON:-python}
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

# 1. the official copy: export, both patches (the second once), DBLP's four built files
"$HERE/../official/export_commit.sh" "$MEOW_GIT" "$MEOW_COMMIT" "$PERF/meow" "$HERE/../official/meow/code_meow_cpu.patch"
if [ ! -f "$PERF/meow/.train_only" ]; then
  (cd "$PERF/meow" && patch -p1 < "$HERE/official_train_only.patch") && touch "$PERF/meow/.train_only"
fi
if [ "$DATASET" = dblp ]; then
  for f in apcpa aptpa nei_apcp nei_aptp; do
    [ -f "$PERF/meow/data/dblp/$f.npz" ] && continue
    [ -f "$OFFICIAL/data/dblp/$f.npz" ] || { echo "time_to_checkpoint.sh: $OFFICIAL/data/dblp/$f.npz missing (run_official_meow.sh dblp builds it)" >&2; exit 2; }
    cp "$OFFICIAL/data/dblp/$f.npz" "$PERF/meow/data/dblp/"
  done
fi

mkdir -p "$PERF/logs"
OURS_LOG="$PERF/logs/${NAME}_ours.log"; OFFICIAL_LOG="$PERF/logs/${NAME}_official.log"
perf_line() { echo "[perf] $1=$(date -u +%Y-%m-%dT%H:%M:%SZ) load_average_1min=$(cut -d' ' -f1 /proc/loadavg)"; }

# 2. ours: a full run, then the test of best.pt
OURS_CMD="contrasuite train configs/graph/meow_$DATASET.yaml run.seed=$SEED run.output_root=$PERF/runs run.progress=false${EPOCHS:+ run.epochs=$EPOCHS}"
{
  perf_line start
  echo "[perf] command=$OURS_CMD"
  echo "[perf] git_status=$(git -C "$REPO" status --porcelain -- core domains pipelines configs | tr '\n' ' ')"
  (cd "$REPO" && $OURS_CMD) 2>&1
  RUN_DIR=$(grep -o 'run folder: .*' "$OURS_LOG" | tail -1 | cut -d' ' -f3-)
  (cd "$REPO" && contrasuite eval "$RUN_DIR") 2>&1
  echo "[perf] run_dir=$RUN_DIR"
  perf_line end
} > "$OURS_LOG"

# 3. official: training only
OFFICIAL_CMD="cd code_meow && MEOW_TRAIN_ONLY=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 python -u main.py $DATASET --seed $SEED"
{
  perf_line start
  echo "[perf] command=$OFFICIAL_CMD"
  (cd "$PERF/meow/code_meow" && MEOW_TRAIN_ONLY=1 "$PYTHON" -u main.py "$DATASET" --seed "$SEED") 2>&1
  perf_line end
} > "$OFFICIAL_LOG"

# 4. the record, parsed from the two logs
"$PYTHON" "$HERE/time_to_checkpoint_record.py" "$DATASET" "$SEED" "$OURS_LOG" "$OFFICIAL_LOG" "$MEOW_COMMIT" $EPOCHS
