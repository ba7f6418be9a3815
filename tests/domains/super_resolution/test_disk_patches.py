"""Full-scale SR folders: patches read by DataLoader workers, LR and HR aligned through the paired D4."""

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from contrasuite.domains.super_resolution.disk import FolderPatches
from contrasuite.pipelines import trainer
from contrasuite.pipelines.checkpoint import load
from contrasuite.pipelines.config import load_config

CONFIG = Path(__file__).resolve().parents[3] / "configs" / "super_resolution" / "reduced_x2_l1.yaml"


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("div2k")
    rng = np.random.default_rng(0)
    for name in ("hr", "lr"):
        (root / name).mkdir()
    for i in range(8):
        hr = rng.integers(0, 255, (80 + 2 * i, 96, 3), dtype=np.uint8)
        Image.fromarray(hr).save(root / "hr" / f"{i:04d}.png")
        lr = np.round(hr.reshape(hr.shape[0] // 2, 2, 48, 2, 3).mean(axis=(1, 3))).astype(np.uint8)  # 2x2 means
        Image.fromarray(lr).save(root / "lr" / f"{i:04d}.png")
    return root


def test_patches_stay_aligned_under_every_flip_and_rotation(folders):
    data = FolderPatches(sorted((folders / "hr").iterdir()), scale=2, patch=12, seed=0, lr_folder=folders / "lr")
    for position in range(16):  # many seeds: all eight dihedral transforms occur
        lr, hr = data[(0, position, position % 8)]
        assert lr.shape == (3, 12, 12) and hr.shape == (3, 24, 24)
        pooled = torch.nn.functional.avg_pool2d(hr.double()[None], 2)[0].round().to(torch.uint8)
        assert torch.equal(lr, pooled)  # the LR is still the 2x2 means of its HR: same crop, same transform
    assert not torch.equal(data[(0, 0, 1)][0], data[(1, 0, 1)][0])  # another epoch, another patch


def _run(folders, tmp_path, workers, *extra):
    overrides = ["run.epochs=2", "run.progress=false", "run.deterministic=true", f"run.output_root={tmp_path}",
                 f"config.data.train_folder={folders / 'hr'}", f"config.data.workers={workers}", "config.data.patch_size=12",
                 "config.batch_size=2", "config.data.steps_per_epoch=3", "config.data.val_every=4", "config.data.val_crop=16",
                 "config.model.n_resblocks=1", "config.model.n_feats=8", "config.test_sets=[Set5]", *extra]
    return trainer.train(load_config(CONFIG, overrides))


@pytest.mark.slow
def test_disk_training_is_the_same_for_any_workers_and_on_resume(folders, tmp_path):
    weights = lambda run: load(run / "checkpoints" / "last.pt")["modules"]["generator"]  # noqa: E731
    serial, parallel = weights(_run(folders, tmp_path / "w0", 0)), weights(_run(folders, tmp_path / "w2", 2))
    assert all(torch.equal(serial[k], parallel[k]) for k in serial)
    stopped = _run(folders, tmp_path / "stop", 2, "run.max_steps=4", "run.checkpoint_every_steps=1")
    trainer.resume(stopped, ["run.max_steps=null"])
    assert all(torch.equal(serial[k], weights(stopped)[k]) for k in serial)
