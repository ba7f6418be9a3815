"""``contrasuite export`` of a trained translation run: each format loaded back by its consumer."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from contrasuite.domains.translation.export import generator_from_config
from contrasuite.domains.translation.networks import translate_any_size
from contrasuite.domains.translation.translate import load_generator
from contrasuite.pipelines import checkpoint
from contrasuite.pipelines.cli import main
from contrasuite.pipelines.config import load_config
from contrasuite.pipelines.trainer import Trainer

CONFIG = Path(__file__).resolve().parents[3] / "configs" / "translation" / "reduced_cut_emoji.yaml"
# The global skip (residual) is the generator whose shapes torch.export must prove for every size; the
# average (ema) is what the export must pick.
EXTRA = ["run.precision=fp32", "config.ema=0.9", "config.generator.residual=true"]


@pytest.fixture(scope="module")
def trained(data_root, tiny_overrides, tmp_path_factory):
    """A finished tiny run of the shipped reduced CUT config (weight average kept), and its generator."""
    out = tmp_path_factory.mktemp("translation_export")
    overrides = [*tiny_overrides, *EXTRA, f"run.output_root={out}", f"config.data.cache_dir={out / 'cache'}"]
    torch.manual_seed(0)
    run_dir = Trainer(load_config(CONFIG, overrides, data_root=str(data_root))).fit()
    return run_dir, load_generator(run_dir)


def images():
    """A batch whose height and width are neither multiples of 4 nor the traced sizes."""
    return torch.rand(2, 3, 13, 19, generator=torch.Generator().manual_seed(1)) * 2 - 1


@pytest.mark.parametrize("fmt", ["onnx", "torchscript", "safetensors"])
def test_each_format_reproduces_the_run(trained, tmp_path, fmt):
    run_dir, generator = trained
    saved = checkpoint.load(run_dir / "checkpoints" / "best.pt")["modules"]
    assert all(torch.equal(generator.state_dict()[k], v) for k, v in saved["generator_ema"].items())
    out = tmp_path / fmt
    assert main(["export", str(run_dir), "--format", fmt, "--out", str(out)]) == 0
    record = json.loads((out / "export.json").read_text())
    card = (out / "README.md").read_text()
    assert record["task"] == "translation" and "reduced_cut_emoji" in card and "[-1, 1]" in record["inputs"]
    assert set(record["files"]) == {p.name for p in out.iterdir()} - {"export.json", "README.md"}
    config = json.loads((out / "config.json").read_text())
    assert config["weights"] == "generator_ema" and config["residual"] is True and config["ngf"] == 4
    x = images()
    with torch.no_grad():
        want = translate_any_size(generator, x)
    if fmt == "onnx":
        import onnxruntime

        session = onnxruntime.InferenceSession(str(out / "model.onnx"))
        got = torch.from_numpy(session.run(["translated"], {"image": x.numpy()})[0])
        assert record["max_abs_diff"]["translated"] <= 1e-5
    elif fmt == "torchscript":
        model = torch.jit.load(str(out / "model.torchscript.pt"))
        assert "cpu" not in str(model.inlined_graph)  # no device traced in: it runs where it is moved
        got = model(x)
    else:
        from safetensors.torch import load_file

        net = generator_from_config(config).eval()
        net.load_state_dict(load_file(str(out / "model.safetensors")))
        with torch.no_grad():
            got = translate_any_size(net, x)
    assert got.shape == (2, 3, 13, 19)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)


def test_translate_takes_the_export(trained, tmp_path):
    run_dir, _ = trained
    src = tmp_path / "in"
    src.mkdir()
    for i, size in enumerate([(21, 17), (24, 32)]):
        rgb = (np.random.default_rng(i).random((*size, 3)) * 255).astype(np.uint8)
        Image.fromarray(rgb).save(src / f"img{i}.png")
    assert main(["translate", str(run_dir), str(src), str(tmp_path / "from_run"), "--device", "cpu"]) == 0
    assert main(["export", str(run_dir), "--format", "onnx", "--out", str(tmp_path / "e")]) == 0
    assert main(["export", str(run_dir), "--format", "safetensors", "--out", str(tmp_path / "s")]) == 0
    for given in (tmp_path / "e", tmp_path / "e" / "model.onnx", tmp_path / "s" / "model.safetensors"):
        assert main(["translate", str(given), str(src), str(tmp_path / "from_export"), "--device", "cpu"]) == 0
        for name in ("img0.png", "img1.png"):
            want = np.asarray(Image.open(tmp_path / "from_run" / name)).astype(int)
            got = np.asarray(Image.open(tmp_path / "from_export" / name)).astype(int)
            assert got.shape == want.shape and np.abs(got - want).max() <= 1


def test_translate_refuses_another_tasks_export(trained, tmp_path, capsys):
    folder = tmp_path / "other"
    folder.mkdir()
    (folder / "export.json").write_text(json.dumps({"task": "super_resolution", "format": "onnx", "model_file": "model.onnx"}))
    (folder / "config.json").write_text("{}")
    assert main(["translate", str(folder), str(tmp_path), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "not of a 'translation' run" in err
