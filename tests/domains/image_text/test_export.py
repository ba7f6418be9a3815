"""``contrasuite export`` of trained image_text runs: each format loaded back by its consumer."""

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from contrasuite.domains.image_text.export import load_towers
from contrasuite.domains.image_text.models import build_model
from contrasuite.pipelines import checkpoint
from contrasuite.pipelines.cli import main
from contrasuite.pipelines.config import load_config
from contrasuite.pipelines.trainer import Trainer
from tests.domains.exports import assert_export_refused

CONFIGS = Path(__file__).resolve().parents[3] / "configs" / "image_text"
TINY = ["run.max_steps=2", "run.epochs=1", "run.precision=fp32", "run.progress=false", "run.health_every_steps=0",
        "config.data.limit=30", "config.batch_size=8", "config.eval_batch_size=64"]
TINY_CLIP = {  # a CLIP with a sigmoid-loss bias, so that the export's logit bias has somewhere to go
    "embed_dim": 16, "init_logit_bias": -10.0,
    "vision_cfg": {"image_size": 32, "layers": 1, "width": 32, "patch_size": 16, "head_width": 16},
    "text_cfg": {"context_length": 16, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 1},
}
SIGLIP = "config.objective.terms.0={name: siglip, weight: 1.0, init_logit_scale: 3.0, init_logit_bias: -5.0}"


def trained(config: str, overrides: list[str], out: Path, data_root: Path):
    """A finished tiny run and its towers as the checkpoint holds them (the weight average when kept)."""
    torch.manual_seed(0)
    loaded = load_config(CONFIGS / config, [*TINY, *overrides, f"run.output_root={out}", f"config.cache_dir={out / 'cache'}"],
                         data_root=str(data_root))
    run_dir = Trainer(loaded).fit()
    state = checkpoint.load(run_dir / "checkpoints" / "last.pt")["modules"]
    model = build_model(loaded.config.model)
    model.load_state_dict(state["model_ema" if "model_ema" in state else "model"])
    return run_dir, model.eval(), state["objective"]


@pytest.fixture(scope="module")
def towers_run(emoji_root, tmp_path_factory):
    """reduced_align (EfficientNet-Lite0 + MiniLM, pretrained frozen trunks left out of the checkpoint), with EMA."""
    out = tmp_path_factory.mktemp("towers")
    return trained("reduced_align.yaml", ["config.model.image_size=64", "config.ema=0.5"], out, emoji_root)


@pytest.fixture(scope="module")
def clip_run(emoji_root, tmp_path_factory):
    """open_clip_local with a tiny custom architecture (a model_config JSON) and a SigLIP objective."""
    out = tmp_path_factory.mktemp("clip")
    arch = out / "tiny-clip-export.json"
    arch.write_text(json.dumps(TINY_CLIP))
    return trained("open_clip_local.yaml", ["config.model.architecture=tiny-clip-export", f"config.model.model_config={arch}",
                                            "config.gradcache_chunks=0", SIGLIP], out, emoji_root)


def uint8_images(n: int, size: int) -> torch.Tensor:
    return torch.randint(0, 256, (n, size, size, 3), dtype=torch.uint8, generator=torch.Generator().manual_seed(1))


def as_unit_floats(images: torch.Tensor) -> np.ndarray:
    return (images.permute(0, 3, 1, 2).float() / 255).numpy()


def export(run_dir: Path, fmt: str, out: Path) -> dict:
    assert main(["export", str(run_dir), "--format", fmt, "--out", str(out)]) == 0
    record = json.loads((out / "export.json").read_text())
    assert set(record["files"]) == {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()} \
        - {"export.json", "README.md"}
    return json.loads((out / "config.json").read_text())


def onnx_embeddings(out: Path, images: np.ndarray, tokens: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    import onnxruntime

    image = onnxruntime.InferenceSession(str(out / "image.onnx"))
    text = onnxruntime.InferenceSession(str(out / "text.onnx"))
    return (torch.from_numpy(image.run(["embedding"], {"images": images})[0]),
            torch.from_numpy(text.run(["embedding"], {"tokens": tokens})[0]))


TEXTS = ["dog face", "two hearts", "woman raising hand, medium-dark skin tone"]


def test_pretrained_towers_onnx_in_onnxruntime(towers_run, tmp_path):
    from transformers import AutoTokenizer

    run_dir, model, _ = towers_run
    out = tmp_path / "onnx"
    config = export(run_dir, "onnx", out)
    assert config["weights"] == "model_ema" and config["image_size"] == 64
    card = (out / "README.md").read_text()
    assert "EfficientNet-Lite0 ImageNet weights" in card and "Apache" in card and "all-MiniLM-L6-v2" in card
    images = uint8_images(3, 64)
    tokenizer = AutoTokenizer.from_pretrained(str(out / "tokenizer"))
    for texts in (TEXTS, TEXTS[:2]):  # two lengths (the batch is padded to its longest caption)
        tokens = tokenizer(texts, padding="longest", truncation=True, max_length=config["context_length"],
                           return_tensors="np").input_ids
        got_image, got_text = onnx_embeddings(out, as_unit_floats(images), tokens)
        with torch.no_grad():
            torch.testing.assert_close(got_image, model.encode_image(images), atol=1e-5, rtol=0)
            torch.testing.assert_close(got_text, model.encode_text(texts), atol=1e-5, rtol=0)


def test_pretrained_towers_safetensors_stand_alone(towers_run, tmp_path):
    from safetensors.torch import load_file

    run_dir, model, objective = towers_run
    out = tmp_path / "st"
    config = export(run_dir, "safetensors", out)
    tensors = load_file(str(out / "model.safetensors"))
    assert any(k.startswith("image_trunk.") for k in tensors) and any(k.startswith("text_trunk.") for k in tensors)
    assert config["model"]["pretrained_trunks"] is False and config["model"]["text_model"] == "tokenizer"
    assert config["logit_scale"] == pytest.approx(math.exp(float(objective["terms.0.logit_scale"])))
    loaded = load_towers(out)
    images = uint8_images(2, 40)  # resized to 64 by both
    with torch.no_grad():
        torch.testing.assert_close(loaded.encode_image(images), model.encode_image(images), atol=1e-5, rtol=0)
        torch.testing.assert_close(loaded.encode_text(TEXTS), model.encode_text(TEXTS), atol=1e-5, rtol=0)


def test_open_clip_format_refused_for_pretrained_towers(towers_run, tmp_path, capsys):
    run_dir, _, _ = towers_run
    assert_export_refused(capsys, run_dir, "open_clip", tmp_path / "x", "not open_clip towers: use safetensors or onnx")


def test_open_clip_checkpoint_loads_in_open_clip(clip_run, tmp_path):
    import open_clip

    run_dir, model, objective = clip_run
    out = tmp_path / "oc"
    config = export(run_dir, "open_clip", out)
    assert (out / "tiny-clip-export.json").is_file() and "add_model_config" in (out / "README.md").read_text()
    open_clip.add_model_config(str(out / "tiny-clip-export.json"))
    loaded, _, _ = open_clip.create_model_and_transforms("tiny-clip-export", pretrained=str(out / "open_clip_pytorch_model.bin"))
    loaded.eval()
    images = uint8_images(3, 32)
    with torch.no_grad():
        got = loaded.encode_image((torch.from_numpy(as_unit_floats(images)) - model.mean) / model.std)
        torch.testing.assert_close(got, model.encode_image(images), atol=1e-5, rtol=0)
        tokens = open_clip.get_tokenizer("tiny-clip-export")(TEXTS)
        torch.testing.assert_close(loaded.encode_text(tokens), model.encode_text(TEXTS), atol=1e-5, rtol=0)
    # the objective's learned SigLIP scale and bias (initialised 3 and -5, not open_clip's log(1/0.07) and -10)
    assert float(loaded.logit_scale.detach()) == pytest.approx(float(objective["terms.0.logit_scale"]), abs=1e-6)
    assert float(loaded.logit_bias.detach()) == pytest.approx(float(objective["terms.0.logit_bias"]), abs=1e-6)
    assert abs(float(loaded.logit_scale.detach()) - 3.0) < 0.01 and abs(float(loaded.logit_bias.detach()) + 5.0) < 0.01
    assert config["logit_scale_from"] == "0:siglip"


@pytest.mark.parametrize("fmt", ["onnx", "safetensors"])
def test_open_clip_towers_as_onnx_and_safetensors(clip_run, tmp_path, fmt):
    import open_clip

    run_dir, model, _ = clip_run
    out = tmp_path / fmt
    export(run_dir, fmt, out)
    images = uint8_images(3, 32)
    with torch.no_grad():
        want_image, want_text = model.encode_image(images), model.encode_text(TEXTS)
        if fmt == "onnx":
            assert (out / "tokenizer" / "bpe_simple_vocab_16e6.txt.gz").is_file()
            open_clip.add_model_config(str(out / "tiny-clip-export.json"))
            tokens = open_clip.get_tokenizer("tiny-clip-export")(TEXTS).numpy()
            got_image, got_text = onnx_embeddings(out, as_unit_floats(images), tokens)
        else:
            loaded = load_towers(out)
            got_image, got_text = loaded.encode_image(images), loaded.encode_text(TEXTS)
    torch.testing.assert_close(got_image, want_image, atol=1e-5, rtol=0)
    torch.testing.assert_close(got_text, want_text, atol=1e-5, rtol=0)
