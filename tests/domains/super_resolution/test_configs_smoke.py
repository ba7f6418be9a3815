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
    "config.data.steps_per_epoch=2", "config.batch_size=2", "config.data.patch_size=8",
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


def test_the_optimizers_of_a_shipped_config_follow_its_optim_section(sr_data_root, tmp_path):
    """reduced_finetune_x2_pcl_official: Adam for the discriminator at its group's lr and for the generator (with the
    objective) at optim.lr, the config's betas; both decay on one cosine to min_lr at the schedule's end (computed
    here from the config)."""
    config = next(p for p in CONFIGS if p.stem == "reduced_finetune_x2_pcl_official")
    loaded = load_config(config, [*TINY, f"run.output_root={tmp_path}"], data_root=str(sr_data_root))
    trainer = Trainer(loaded)
    task, o = trainer.task, loaded.config.optim
    optimizers = task.optimizers()
    assert list(optimizers) == ["discriminator", "generator"]
    (d,), (g,) = optimizers["discriminator"].param_groups, optimizers["generator"].param_groups
    assert all(isinstance(opt, torch.optim.Adam) for opt in optimizers.values())
    assert d["params"] == list(task.discriminator.parameters()) and d["initial_lr"] == o.groups["discriminator"].lr
    assert g["params"] == [*task.generator.parameters(), *task.objective.parameters()] and g["initial_lr"] == o.lr
    assert d["betas"] == g["betas"] == tuple(o.betas) and d["weight_decay"] == g["weight_decay"] == o.weight_decay
    end, floor = o.schedule.end.steps, o.schedule.min_lr
    for s in range(end + 2):
        for name, group in (("discriminator", d), ("generator", g)):
            base = group["initial_lr"]
            want = floor + (base - floor) * 0.5 * (1 + math.cos(math.pi * min(s, end) / end))
            assert group["lr"] == pytest.approx(want, rel=1e-12), (name, s)
            task.schedulers()[name].step()
    trainer.close()


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
