"""SR training images smaller than the patch: left out with one line saying how many, and a DataError (exit 2 in
the CLI, one line naming the folder and the patch size) when none is left, not a traceback or a silent drop."""

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from contrasuite.core.task.errors import DataError
from contrasuite.domains.super_resolution.data import PatchSampler
from contrasuite.domains.super_resolution.disk import FolderPatches
from contrasuite.pipelines.cli import main

CONFIG = Path(__file__).resolve().parents[3] / "configs" / "super_resolution" / "reduced_x2_l1.yaml"
PATCH, SCALE = 12, 2  # HR images need 24 px on each side


def _folder(root: Path, sides: dict[str, int]) -> Path:
    root.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name, side in sides.items():
        Image.fromarray(rng.integers(0, 256, (side, side + 4, 3), dtype=np.uint8)).save(root / f"{name}.png")
    return root


def test_sampler_leaves_out_a_small_image_and_says_so(capsys):
    images = [torch.rand(3, 30, 34), torch.rand(3, 20, 40)]
    sampler = PatchSampler(images, SCALE, PATCH, names=["big", "tiny"], source="SR set Mine")
    assert len(sampler.hr) == 1 and sampler.hr[0].shape == (3, 30, 34)
    lr, hr = sampler.batch(4, torch.Generator().manual_seed(0))
    assert lr.shape == (4, 3, PATCH, PATCH) and hr.shape == (4, 3, 24, 24)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("SR set Mine: 1 of 2 training images are smaller than 24 px")
    assert "config.data.patch_size=12" in err[0] and err[0].endswith("the first is tiny")


def test_the_line_comes_from_rank_zero_only(capsys):
    """Every rank reads the training set; on two processes both printed the line (found by the 2-process smoke)."""
    from types import SimpleNamespace

    from contrasuite.domains.super_resolution.task import SuperResolutionTask

    images = [torch.rand(3, 30, 34), torch.rand(3, 20, 40)]
    for rank in (0, 1):
        task = SuperResolutionTask()
        task.ctx = SimpleNamespace(rank=rank)
        PatchSampler(images, SCALE, PATCH, names=["big", "tiny"], source=f"rank {rank}", log=task._log)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("rank 0: 1 of 2 training images are smaller than 24 px")


def test_sampler_refuses_when_no_image_fits():
    with pytest.raises(DataError, match=r"SR set Mine: none of the 2 training images is at least 24 px .*"
                                        r"patch_size=12 LR px at x2.*the first is a$"):
        PatchSampler([torch.rand(3, 23, 50), torch.rand(1, 10, 10)], SCALE, PATCH, names=["a", "b"], source="SR set Mine")
    with pytest.raises(DataError, match=r"^the SR training set: none of the 1 training images .* at x2\)$"):
        PatchSampler([torch.rand(3, 40, 23)], SCALE, PATCH)  # unnamed images: no first name to give


def test_folder_patches_leave_out_small_images_or_refuse_naming_the_folder(tmp_path, capsys):
    mixed = _folder(tmp_path / "mixed", {"0big": 26, "1tiny": 16})
    data = FolderPatches(sorted(mixed.iterdir()), SCALE, PATCH, seed=0)
    assert data.paths == [mixed / "0big.png"] and data[(0, 0, 0)][0].shape == (3, PATCH, PATCH)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{mixed}: 1 of 2 training images are smaller than 24 px" in err[0]
    assert err[0].endswith(str(mixed / "1tiny.png"))
    small = _folder(tmp_path / "small", {"a": 16, "b": 20})
    with pytest.raises(DataError, match=rf"train_folder {small}: none of the 2 training images is at least 24 px"):
        FolderPatches(sorted(small.iterdir()), SCALE, PATCH, seed=0)


def _train(tmp_path: Path, *overrides: str) -> int:
    return main(["train", str(CONFIG), f"run.output_root={tmp_path / 'runs'}", "run.progress=false", "run.epochs=1",
                 f"config.data.patch_size={PATCH}", "config.batch_size=2", "config.data.steps_per_epoch=1",
                 "config.model.n_resblocks=1", "config.model.n_feats=8", "config.test_sets=[Set5]", *overrides])


def test_cli_train_on_a_folder_of_small_images_exits_2_naming_it(tmp_path, capsys):
    small = _folder(tmp_path / "hr", {"a": 16, "b": 20, "c": 22})
    assert _train(tmp_path, f"config.data.train_folder={small}") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"contrasuite train: config.data.train_folder {small}: none of the")
    assert "config.data.patch_size=12" in err[0]


def test_cli_train_on_a_set_of_small_images_exits_2(tmp_path, capsys):
    _folder(tmp_path / "data" / "sr" / "Tiny", {"a": 16, "b": 20})
    assert _train(tmp_path, f"run.data_root={tmp_path / 'data'}", "config.data.train_set=Tiny") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"contrasuite train: SR set Tiny under {tmp_path / 'data' / 'sr'}: ")
    assert "none of the 2 training images" in err[0] and "config.data.patch_size=12" in err[0]
