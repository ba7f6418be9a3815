"""Every shipped super-resolution config runs a few engine steps on tiny crops and networks."""

import json
import math
from pathlib import Path

import pytest
import torch

from contrasuite.pipelines.config import load_config
from contrasuite.pipelines.trainer import Trainer, evaluate

CONFIGS = sorted((Path(__file__).resolve().parents[3] / "configs" / "super_resolution").glob("*.yaml"))
TINY = [
    "run.epochs=1", "run.precision=fp32", "run.progress=false", "run.log_every_steps=1", "run.health_every_steps=1",
    "config.data.steps_per_epoch=2", "config.data.batch_size=2", "config.data.patch_size=8",
    "config.data.max_train_images=20", "config.data.val_crop=16", "config.model.n_resblocks=1",
    "config.model.n_feats=8", "config.test_sets=[Set5]", "config.discriminator.channel_divisor=16",
]


def run(config: Path, root: Path, out: Path, extra: tuple[str, ...] = ()) -> Path:
    overrides = [*TINY, f"run.output_root={out}", *extra]
    loaded = load_config(config, overrides, data_root=str(root))
    torch.manual_seed(0)
    return Trainer(loaded).fit()


def test_shipped_configs_exist():
    names = {p.stem for p in CONFIGS}
    assert {"edsr_baseline_x2_l1", "edsr_baseline_x2_pcl", "edsr_baseline_x4_l1", "edsr_baseline_x4_pcl",
            "reduced_x2_l1", "reduced_x2_pcl"} <= names


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.stem)
def test_config_trains_and_validates(config, sr_data_root, tmp_path):
    run_dir = run(config, sr_data_root, tmp_path)
    val = json.loads((run_dir / "eval_val.json").read_text())["metrics"]
    assert math.isfinite(val["psnr_y"]) and 0 < val["ssim_y"] <= 1
    assert (run_dir / "checkpoints" / "best.pt").is_file()


def test_objective_swapped_by_config_and_test_eval(sr_data_root, tmp_path):
    # SigLIP has a learnable scale and bias: they train with the generator and are checkpointed.
    config = next(p for p in CONFIGS if p.stem == "reduced_x2_pcl")
    run_dir = run(config, sr_data_root, tmp_path, ("config.objective.terms.0={name: siglip, weight: 0.02}",))
    assert json.loads((run_dir / "status.json").read_text())["state"] == "finished"
    result = evaluate(run_dir)
    assert set(result["metrics"]) == {"Set5/psnr_y", "Set5/ssim_y"} and result["metrics"]["Set5/psnr_y"] > 5
