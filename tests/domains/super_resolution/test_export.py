"""``contrasuite export`` of a trained super-resolution run: each format loaded back by its consumer."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from contrasuite.domains.super_resolution.networks import EDSR
from contrasuite.domains.super_resolution.upscale import load_generator
from contrasuite.pipelines.cli import main
from contrasuite.pipelines.config import load_config
from contrasuite.pipelines.trainer import Trainer, evaluate
from tests.domains.exports import assert_export_refused, exported_output

CONFIG = Path(__file__).resolve().parents[3] / "configs" / "super_resolution" / "reduced_x2_l1.yaml"
TINY = ["run.epochs=1", "run.precision=fp32", "run.progress=false", "config.data.steps_per_epoch=2",
        "config.batch_size=2", "config.data.patch_size=8", "config.data.max_train_images=20",
        "config.data.val_crop=16", "config.model.n_resblocks=1", "config.model.n_feats=8", "config.test_sets=[Set5]"]


@pytest.fixture(scope="module")
def trained(sr_data_root, tmp_path_factory):
    """A finished, evaluated tiny run of the shipped reduced x2 config, and its model."""
    out = tmp_path_factory.mktemp("sr_export")
    torch.manual_seed(0)
    run_dir = Trainer(load_config(CONFIG, [*TINY, f"run.output_root={out}"], data_root=str(sr_data_root))).fit()
    evaluate(run_dir)
    model, scale = load_generator(run_dir)
    return run_dir, model, scale


def lr_batch():
    return torch.rand(3, 3, 13, 19, generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("fmt", ["onnx", "torchscript", "safetensors"])
def test_each_format_reproduces_the_run(trained, tmp_path, fmt):
    run_dir, model, scale = trained
    out = tmp_path / fmt
    assert main(["export", str(run_dir), "--format", fmt, "--out", str(out)]) == 0
    record = json.loads((out / "export.json").read_text())
    card = (out / "README.md").read_text()
    assert record["task"] == "super_resolution" and record["run"]["config_digest"][:16] in card
    assert "Set5/psnr_y" in card and "contrasuite export" in card and "reduced_x2_l1" in card
    assert set(record["files"]) == {p.name for p in out.iterdir()} - {"export.json", "README.md"}
    config = json.loads((out / "config.json").read_text())
    assert config["scale"] == scale == 2
    lr = lr_batch()
    with torch.no_grad():
        want = model(lr).clamp(0, 1)
    net = EDSR(config["scale"], config["n_resblocks"], config["n_feats"], config["res_scale"])
    got = exported_output(fmt, out, lr, ("lr", "sr"), net)
    if fmt == "safetensors":
        got = got.clamp(0, 1)  # the exported networks clamp inside
    assert got.shape == (3, 3, 26, 38)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)


def test_upscale_takes_the_export(trained, tmp_path):
    run_dir, _, _ = trained
    src = tmp_path / "in"
    src.mkdir()
    rgb = (np.random.default_rng(0).random((21, 17, 3)) * 255).astype(np.uint8)
    Image.fromarray(rgb).save(src / "a.png")
    assert main(["upscale", str(run_dir), str(src), str(tmp_path / "from_run")]) == 0
    want = np.asarray(Image.open(tmp_path / "from_run" / "a.png")).astype(int)
    assert main(["export", str(run_dir), "--format", "onnx", "--out", str(tmp_path / "e")]) == 0
    for given in (tmp_path / "e", tmp_path / "e" / "model.onnx"):
        assert main(["upscale", str(given), str(src), str(tmp_path / "from_export")]) == 0
        got = np.asarray(Image.open(tmp_path / "from_export" / "a.png")).astype(int)
        assert got.shape == want.shape and np.abs(got - want).max() <= 1


def test_refusals_say_one_line_and_change_nothing(trained, tmp_path, capsys):
    run_dir, _, _ = trained
    assert_export_refused(capsys, run_dir, "npy", tmp_path / "x", "onnx, torchscript, safetensors")
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "keep.txt").write_text("mine")
    assert main(["export", str(run_dir), "--format", "onnx", "--out", str(busy)]) == 2
    assert "not an empty folder" in capsys.readouterr().err
    assert [p.name for p in busy.iterdir()] == ["keep.txt"]
    assert main(["export", str(tmp_path), "--format", "onnx", "--out", str(tmp_path / "y")]) == 2
    assert "not a run folder" in capsys.readouterr().err
    assert not any(p.name.startswith(".") for p in tmp_path.iterdir())  # no partial folder left behind
