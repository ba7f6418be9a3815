"""``contrasuite export`` of a trained image_ssl run: each format loaded back by its consumer."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from contrasuite.domains.image_ssl.augment import Normalize
from contrasuite.domains.image_ssl.encoders import SSLModel, build_encoder
from contrasuite.domains.init_from import checkpoint_file
from contrasuite.pipelines.api import load_checkpoint
from contrasuite.pipelines.cli import main
from contrasuite.pipelines.config import load_config
from contrasuite.pipelines.trainer import Trainer, evaluate

CONFIG = Path(__file__).resolve().parents[3] / "configs" / "image_ssl" / "reduced_infonce.yaml"
TINY = ["run.max_steps=2", "run.epochs=1", "run.progress=false", "config.batch_size=8", "config.data.source=folder",
        "config.data.image_size=24", "config.data.train_subset=0", "config.data.test_subset=0",
        "config.data.val_fraction=0.25", "config.eval.knn_k=3", "config.eval.linear_epochs=2", "config.model.width=4",
        "config.model.proj_hidden=16", "config.model.proj_dim=8"]


def noise_folder(root: Path) -> Path:
    """``root/{train,test}/{a,b}/k.png``: 8 random 24 x 24 RGB images per class and split."""
    rng = np.random.default_rng(0)
    for split in ("train", "test"):
        for cls in ("a", "b"):
            (root / split / cls).mkdir(parents=True)
            for k in range(8):
                Image.fromarray(rng.integers(0, 256, (24, 24, 3), dtype=np.uint8)).save(root / split / cls / f"{k}.png")
    return root


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A finished, evaluated tiny run of the shipped reduced InfoNCE config, and its model with the normalisation."""
    tmp = tmp_path_factory.mktemp("ssl_export")
    folder = noise_folder(tmp / "pets")
    torch.manual_seed(0)
    overrides = [*TINY, f"run.output_root={tmp / 'runs'}", f"config.data.folder={folder}", f"config.data.cache_dir={tmp / 'cache'}"]
    run_dir = Trainer(load_config(CONFIG, overrides, data_root=str(tmp))).fit()
    evaluate(run_dir)
    encoder, dim = build_encoder("small_conv", 4)
    model = SSLModel(encoder, dim, 16, 8)
    model.load_state_dict(load_checkpoint(checkpoint_file(run_dir, "best"))["modules"]["model"])
    return run_dir, model.eval()


def images():
    """Another batch and image size than the training crops (24 x 24)."""
    return torch.rand(3, 3, 30, 20, generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("fmt", ["onnx", "torchscript", "safetensors"])
def test_each_format_reproduces_the_run(trained, tmp_path, fmt):
    run_dir, model = trained
    out = tmp_path / fmt
    assert main(["export", str(run_dir), "--format", fmt, "--out", str(out)]) == 0
    record = json.loads((out / "export.json").read_text())
    card = (out / "README.md").read_text()
    assert record["task"] == "image_ssl" and record["run"]["config_digest"][:16] in card and "knn_acc" in card
    assert set(record["files"]) == {p.name for p in out.iterdir()} - {"export.json", "README.md"}
    assert record["licences"] == [] and "trained by this run" in card
    config = json.loads((out / "config.json").read_text())
    assert (config["encoder"], config["width"], config["feature_dim"], config["proj_dim"], config["image_size"]) == (
        "small_conv", 4, 32, 8, 24)
    x = images()
    with torch.no_grad():
        want = model(Normalize()(x))
    if fmt == "onnx":
        import onnxruntime

        session = onnxruntime.InferenceSession(str(out / "model.onnx"))
        got = [torch.from_numpy(a) for a in session.run(["features", "projection"], {"images": x.numpy()})]
        assert set(record["max_abs_diff"]) == {"features", "projection"}
    elif fmt == "torchscript":
        got = torch.jit.load(str(out / "model.torchscript.pt"))(x)
    else:
        from safetensors.torch import load_file

        encoder, dim = build_encoder(config["encoder"], config["width"])
        net = SSLModel(encoder, dim, config["proj_hidden"], config["proj_dim"]).eval()
        net.load_state_dict(load_file(str(out / "model.safetensors")))
        mean, std = (torch.tensor(config[k]).view(1, 3, 1, 1) for k in ("mean", "std"))
        with torch.no_grad():
            got = net((x - mean) / std)
    assert got[0].shape == (3, 32) and got[1].shape == (3, 8)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, atol=1e-5, rtol=0)


def test_an_unknown_format_is_refused_in_one_line(trained, tmp_path, capsys):
    run_dir, _ = trained
    assert main(["export", str(run_dir), "--format", "npy", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "onnx, torchscript, safetensors" in err
    assert not (tmp_path / "x").exists()
