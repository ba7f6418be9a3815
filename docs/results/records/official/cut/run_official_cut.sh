#!/usr/bin/env bash
# Official CUT / FastCUT / the GAN alone (github.com/taesungp/contrastive-unpaired-translation) on the reduced emoji
# protocol of configs/translation/reduced_{cut,fastcut,gan}_emoji.yaml, one thread on the CPU, with cut_cpu.patch;
# scored by our metrics (emoji_official.py score); writes docs/results/records/official/cut/official_<mode>_seed<S>.json
#
# usage: run_official_cut.sh MODE SEED        (MODE: cut | fastcut | gan)
#        run_official_cut.sh export           (step 1 alone: the patched export at $OFFICIAL/cut, which
#                                              `contrasuite bench translation --against official` reads)
# env:   CUT_GIT    the fetched repository's git directory (default /work/.mirror/taesungp+contrastive-unpaired-translation/repo)
#        CUT_COMMIT commit to export (default b3ac297708dfb6f7589d04662277e53c0d579c27)
#        OFFICIAL   scratch folder outside the repository (default /tmp/official)
#        PYTHON     interpreter with torch, torchvision, dominate and contrasuite installed (default python)
#        CONTRASUITE_DATA  data root holding emoji/ (docs/data.md)
set -euo pipefail
MODE=${1:?cut, fastcut, gan or export}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../../../../.." && pwd)
CUT_GIT=${CUT_GIT:-/work/.mirror/taesungp+contrastive-unpaired-translation/repo}
CUT_COMMIT=${CUT_COMMIT:-b3ac297708dfb6f7589d04662277e53c0d579c27}
OFFICIAL=${OFFICIAL:-/tmp/official}
PYTHON=${PYTHON:-python}
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
# gan: CUT mode without PatchNCE (reduced_gan_emoji.yaml: config.nce.weight 0). --lambda_NCE 0 skips the NCE loss,
# its identity term and netF's optimiser, but this commit then fails on two lines that --lambda_NCE 0 does not
# reach: optimize_parameters steps optimizer_F whenever --netF is mlp_sample (the default), and the printed losses
# read loss_NCE_Y whenever --nce_idt is on (CUT's default). --netF sample (no MLP: netF is never called at
# lambda_NCE 0, so nothing else changes) and --nce_idt False (G(y) would only feed the skipped identity term; ours
# skips it too) avoid both.
GAN_FLAGS=()
case "$MODE" in
  cut) CUT_MODE=CUT ;;
  fastcut) CUT_MODE=FastCUT ;;
  gan) CUT_MODE=CUT; GAN_FLAGS=(--lambda_NCE 0 --nce_idt False --netF sample) ;;
  export) ;;
  *) echo "MODE: cut, fastcut, gan or export" >&2; exit 2 ;;
esac

# 1. export the commit blob by blob (the stored snapshot lacks the README's images) and apply the patch
"$HERE/../export_commit.sh" "$CUT_GIT" "$CUT_COMMIT" "$OFFICIAL/cut" "$HERE/cut_cpu.patch"
[ "$MODE" = export ] && { echo "$OFFICIAL/cut"; exit 0; }
SEED=${2:?seed}

# 2. our emoji split in CUT's unaligned layout (trainA 1563 Twemoji, trainB 1673 Noto, testA/testB the 400 test emoji)
DATA="$OFFICIAL/emoji_unaligned"
[ -d "$DATA/testB" ] || (cd "$REPO" && "$PYTHON" "$HERE/emoji_official.py" prepare "$DATA")

# 3. train: 64 px (resize 64 -> 64 and crop 64 are the identity), random flip, batch 4, 100 steps an epoch
#    (--max_dataset_size 400 with the patch), 4 + 2 epochs, ngf/ndf 32, 4 residual blocks, 128 patches,
#    NCE layers 0,4,8,12,15 (ours for 4 blocks); lambda_NCE / nce_idt / flip_equivariance: the mode's defaults (gan:
#    CUT's, with GAN_FLAGS)
NAME=emoji_${MODE}_seed${SEED}
COMMON=(--dataroot "$DATA" --name "$NAME" --checkpoints_dir "$OFFICIAL/checkpoints" --model cut --CUT_mode "$CUT_MODE"
        --gpu_ids -1 --netG resnet_4blocks --ngf 32 --ndf 32 --netD basic --num_patches 128 --nce_layers 0,4,8,12,15
        --load_size 64 --crop_size 64)
TRAIN=(python train.py "${COMMON[@]}" --batch_size 4 --n_epochs 4 --n_epochs_decay 2 --max_dataset_size 400
       --num_threads 0 --display_id 0 --no_html --save_epoch_freq 1 --print_freq 100 --seed "$SEED" "${GAN_FLAGS[@]}")
TEST=(python test.py "${COMMON[@]}" --num_test 100000 --results_dir "$OFFICIAL/results")
LOG="$OFFICIAL/logs"; mkdir -p "$LOG"
START=$(date +%s.%N)
(cd "$OFFICIAL/cut" && nice -n 10 "$PYTHON" "${TRAIN[@]:1}") > "$LOG/$NAME.train.log" 2>&1
END=$(date +%s.%N)
(cd "$OFFICIAL/cut" && nice -n 10 "$PYTHON" "${TEST[@]:1}") > "$LOG/$NAME.test.log" 2>&1

# 4. score the saved fake_B PNGs with our metrics and write the record
cd "$REPO"
nice -n 10 "$PYTHON" "$HERE/emoji_official.py" score "$OFFICIAL/results/$NAME/test_latest/images/fake_B" \
  --json "$LOG/$NAME.metrics.json" > /dev/null
"$PYTHON" "$HERE/emoji_official.py" record "$HERE/official_${MODE}_seed${SEED}.json" --metrics "$LOG/$NAME.metrics.json" \
  --side official --mode "$MODE" --seed "$SEED" --train-seconds "$(echo "$END - $START" | bc)" \
  --train-log "$LOG/$NAME.train.log" --commit "$CUT_COMMIT" --checkpoint last \
  --command "(cd cut && OMP_NUM_THREADS=1 nice -n 10 ${TRAIN[*]}) && (cd cut && ${TEST[*]})"
