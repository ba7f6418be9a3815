"""Generate, write and read a dataset's hard negatives (the ``contrasuite generate-negatives`` work).

A negatives file is JSONL, one negative a line, every line recording its operation::

    {"modality": "text",  "key": "1f499.png", "caption": "blue heart", "negative": "red heart",
     "operation": "replace_colour"}
    {"modality": "image", "key": "1f499.png", "style": "twitter", "caption": "blue heart",
     "negative": "red heart", "operation": "replace_colour", "editor": "kornia", "image": "images/twitter/000007.png"}

``negative`` of an image record is the true caption of the negative image (what it depicts).
``editor: dataset`` records point to another image of the same set instead of a file
(``image_key``): a skin-tone variation is the exact image of a ``replace_skin_tone`` caption.
An edited image that is a near copy of another image of the set (the flip of ``thumbs up sign`` is
``thumbs down sign``; the flip of ``person running facing right`` is ``runner``) records that image as
``same_as``: it depicts that image's caption too, and the two emoji must share a split.
"""

from __future__ import annotations

import json
import random
import sys
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

import kornia
import numpy as np
import torch
from PIL import Image

from contrasuite.core.task.errors import ConfigValueError, DataError
from contrasuite.core.task.protocol import Progress, no_progress
from contrasuite.domains.disk_cache import key_digest, load_or_compute
from contrasuite.domains.image_text.captions import normalise
from contrasuite.domains.image_text.data import PairSet
from contrasuite.domains.image_text.features import cache_folder
from contrasuite.domains.image_text.image_negatives import DiffusionEditor, KorniaEditor, to_tensor, to_uint8
from contrasuite.domains.image_text.text_negatives import (
    OPERATIONS, LanguageModelGenerator, RuleGenerator, TextNegativeGenerator, generate_text_negatives,
)
from contrasuite.domains.images import open_image, to_rgb8


@dataclass
class NegativesConfig:
    """``config.negatives``: how hard negatives are generated (the same for training and evaluation)."""

    operations: list[str] = field(default_factory=lambda: list(OPERATIONS))
    per_operation: int = 2
    """Text negatives per caption and operation (before the false-negative filter)."""
    seed: int = 0
    image_editor: str = "kornia"
    """``kornia`` (exact flips and hue rotations), ``diffusion`` (inpainting from ``diffusion_path``) or ``none``."""
    dataset_siblings: bool = True
    """Use another image of the set as the negative image when it depicts a negative caption exactly."""
    diffusion_path: Optional[str] = None
    diffusion_steps: int = 30
    language_model: Optional[str] = None
    """A local text-generation model folder; its rewrites are added to the rule-based negatives."""
    duplicate_tolerance: float = 0.015
    """An edited image within this mean absolute pixel difference (in [0, 1]) of another image of the set
    is a copy of it (``same_as``); measured on emoji: copies below 0.01, other nearest images above 0.025."""
    output: str = "runs/negatives/emoji.jsonl"
    """Where ``contrasuite generate-negatives`` writes (relative paths: to the working directory)."""


def object_vocabulary(pairs: PairSet) -> dict[str, list[str]] | None:
    """Emoji: each category's head nouns (last name word); ``None`` for free text (the offline list)."""
    if pairs.items is None:
        return None
    vocab: dict[str, set[str]] = defaultdict(set)
    for item in pairs.items:
        word = item.caption.split(", ")[0].split(" ")[-1]
        if word.isalpha() and len(word) > 2:
            vocab[item.category].add(word)
    return {k: sorted(v) for k, v in vocab.items()}


def text_generators(cfg: NegativesConfig, pairs: PairSet) -> list[TextNegativeGenerator]:
    vocab = object_vocabulary(pairs)
    rules = RuleGenerator(cfg.operations, cfg.per_operation, **({"object_vocabulary": vocab} if vocab else {}))
    generators: list[TextNegativeGenerator] = [rules]
    if cfg.language_model:
        generators.append(LanguageModelGenerator.from_pretrained(cfg.language_model))
    return generators


def text_negative_records(pairs: PairSet, cfg: NegativesConfig, generators: list[TextNegativeGenerator] | None = None,
                          progress: Progress = no_progress) -> list[dict[str, Any]]:
    """Text negatives of every pair; a negative equal to another true caption of the same image is dropped."""
    generators = generators if generators is not None else text_generators(cfg, pairs)
    truths: dict[str, list[str]] = defaultdict(list)
    for key, caption in zip(pairs.keys, pairs.captions):
        truths[key].append(caption)
    rng, records = random.Random(cfg.seed), []
    rows = enumerate(zip(pairs.keys, pairs.captions))
    for i, (key, caption) in progress(rows, f"text negatives of {len(pairs)} captions", total=len(pairs)):
        item = pairs.items[i] if pairs.items is not None else None
        for neg in generate_text_negatives(caption, item, generators, rng, truths[key]):
            records.append({"modality": "text", "key": key, "caption": caption, "negative": neg.text,
                            "operation": neg.operation, **({"edit": neg.edit} if neg.edit else {})})
    return records


def image_negative_records(pairs: PairSet, style: str, text_records: list[dict[str, Any]], cfg: NegativesConfig,
                           editor: Any = None, progress: Progress = no_progress) -> tuple[list[dict[str, Any]], list[np.ndarray]]:
    """Negative images of ``pairs`` (one style) for the text negatives that an editor can realise.

    Returns the records and the edited images (``record["image_index"]`` indexes the list).
    """
    index = {k: i for i, k in enumerate(pairs.keys)}
    by_caption = {normalise(c): k for k, c in zip(pairs.keys, pairs.captions)}
    records, images = [], []
    if cfg.image_editor == "kornia":
        editor = editor or KorniaEditor()
    elif cfg.image_editor == "diffusion":
        if editor is None:
            if not cfg.diffusion_path:
                raise ConfigValueError("negatives.image_editor=diffusion needs negatives.diffusion_path (a local pipeline folder)")
            editor = DiffusionEditor(cfg.diffusion_path, steps=cfg.diffusion_steps)
    elif cfg.image_editor != "none":
        raise ConfigValueError(f"negatives.image_editor must be kornia, diffusion or none, got {cfg.image_editor!r}")
    desc = f"{style} image negatives of {len(text_records)} text negatives"
    for n, rec in progress(enumerate(text_records), desc, total=len(text_records)):
        if rec["key"] not in index:
            continue
        base = {k: rec[k] for k in ("key", "caption", "negative", "operation")}
        sibling = by_caption.get(normalise(rec["negative"]))
        if cfg.dataset_siblings and sibling is not None and sibling != rec["key"] and pairs.items is not None \
                and pairs.items[index[sibling]].base == pairs.items[index[rec["key"]]].base:
            records.append({"modality": "image", "style": style, "editor": "dataset", "image_key": sibling, **base})
            continue
        if cfg.image_editor == "none":
            continue
        source = to_tensor(pairs.images[index[rec["key"]]][None])[0]
        if cfg.image_editor == "kornia":
            if not editor.can_edit(rec.get("edit")):
                continue
            edited = editor(source, rec["edit"])
        else:
            edited = editor(source, rec["negative"], seed=cfg.seed + n)
        if edited is None:
            continue
        records.append({"modality": "image", "style": style, "editor": cfg.image_editor, "image_index": len(images),
                        **base})
        images.append(to_uint8(edited[None])[0])
    made = [r for r in records if "image_index" in r]
    copies = near_copies(pairs.images, images, [index[r["key"]] for r in made], cfg.duplicate_tolerance)
    for rec, copy in zip(made, copies):
        if copy is not None:
            rec["same_as"] = pairs.keys[copy]
    return records, images


def near_copies(images: np.ndarray, edited: list[np.ndarray], exclude: list[int], tolerance: float) -> list[int | None]:
    """For each edited image, the row of ``images`` (``[N, H, W, 3]`` uint8) it nearly copies (mean
    absolute difference below ``tolerance``, in [0, 1]), or ``None``; row ``exclude[i]`` (the source) is
    skipped. The nearest row is found by Euclidean distance, then checked by mean absolute difference."""
    if not edited:
        return []
    flat = torch.from_numpy(images.reshape(len(images), -1)).float() / 255
    out = []
    for start in range(0, len(edited), 256):
        chunk = torch.from_numpy(np.stack(edited[start: start + 256]).reshape(-1, flat.shape[1])).float() / 255
        dist = torch.cdist(chunk, flat)
        dist[torch.arange(len(chunk)), torch.tensor(exclude[start: start + 256])] = float("inf")
        nearest = dist.argmin(dim=1)
        mae = (flat[nearest] - chunk).abs().mean(dim=1)
        out += [int(n) if m < tolerance else None for n, m in zip(nearest, mae)]
    return out


def write_negatives(path: str | Path, text_records: list[dict[str, Any]],
                    image_sets: dict[str, tuple[list[dict[str, Any]], list[np.ndarray]]]) -> Path:
    """Write the JSONL and each edited image as ``images/<style>/NNNNNN.png`` next to it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(r) for r in text_records]
    for style, (records, images) in image_sets.items():
        folder = path.parent / "images" / style
        folder.mkdir(parents=True, exist_ok=True)
        for rec in records:
            rec = dict(rec)
            if "image_index" in rec:
                name = f"{rec.pop('image_index'):06d}.png"
                Image.fromarray(images[int(name[:6])]).save(folder / name)
                rec["image"] = f"images/{style}/{name}"
            lines.append(json.dumps(rec))
    path.write_text("\n".join(lines) + "\n")
    return path


def _record(path: Path, n: int, line: str) -> dict[str, Any]:
    """Line ``n`` of a negatives file as a record with every key; errors name the file and line."""
    try:
        rec = json.loads(line)
    except json.JSONDecodeError as err:
        raise DataError(f"{path}, line {n}, column {err.colno}: not valid JSON ({err.msg})") from None
    keys = ("modality", "key", "caption", "negative", "operation")
    absent = [key for key in keys if not isinstance(rec, dict) or key not in rec]
    if absent:
        raise DataError(f"{path}, line {n}: negative record lacks {absent[0]!r}")
    return rec


def read_negatives(path: str | Path) -> tuple[list[dict[str, Any]], dict[str, tuple[list[dict[str, Any]], list[np.ndarray]]]]:
    """The inverse of :func:`write_negatives`: text records and per-style image records with their images."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"negatives file not found: {path} (make it with `contrasuite generate-negatives`)")
    texts, sets = [], defaultdict(lambda: ([], []))
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        rec = _record(path, n, line)
        if rec["modality"] == "text":
            texts.append(rec)
            continue
        records, images = sets[rec["style"]]
        if "image" in rec:
            file = path.parent / rec.pop("image")
            if not file.is_file():
                raise FileNotFoundError(f"{path}:{n}: negative image {file} not found")
            with open_image(file) as im:
                rec["image_index"] = len(images)
                images.append(np.asarray(to_rgb8(im), dtype=np.uint8))
        records.append(rec)
    return texts, dict(sets)


def generate(pairs_by_style: dict[str, PairSet], cfg: NegativesConfig, editor: Any = None,
             progress: Progress = no_progress) -> tuple[list[dict[str, Any]], dict[str, tuple[list[dict[str, Any]], list[np.ndarray]]]]:
    """Text negatives of the first style's pairs (captions are shared) and image negatives of every style."""
    first = next(iter(pairs_by_style.values()))
    texts = text_negative_records(first, cfg, progress=progress)
    with torch.no_grad():
        images = {s: image_negative_records(p, s, texts, cfg, editor, progress) for s, p in pairs_by_style.items()}
    return texts, images


GENERATOR_MODULES = ("captions", "text_negatives", "image_negatives", "negatives")
"""The modules whose code decides the generated negatives (their source is part of the cache key)."""


def negatives_cache_key(pairs_by_style: dict[str, PairSet], cfg: NegativesConfig) -> str | None:
    """The cache key of :func:`generate`'s result: the settings, every style's pairs and the generating code
    (with kornia's version); ``None`` where a model outside the key (language model, diffusion) takes part."""
    if cfg.language_model or cfg.image_editor == "diffusion":
        return None
    code = [Path(sys.modules[f"{__package__}.{m}"].__file__).read_bytes() for m in GENERATOR_MODULES]
    data = [[s, key_digest(p.images.tobytes()), p.captions, p.keys, repr(p.items)] for s, p in pairs_by_style.items()]
    return key_digest(asdict(cfg), data, *code, kornia.__version__)


def cached_generate(pairs_by_style: dict[str, PairSet], cfg: NegativesConfig, cache_dir: str | None,
                    progress: Progress = no_progress) -> tuple[list[dict[str, Any]], dict[str, tuple[list[dict[str, Any]], list[np.ndarray]]]]:
    """:func:`generate`, cached on disk across runs (under :func:`negatives_cache_key`)."""
    key = negatives_cache_key(pairs_by_style, cfg)
    if key is None:
        return generate(pairs_by_style, cfg, progress=progress)

    def compute() -> dict[str, Any]:
        texts, images = generate(pairs_by_style, cfg, progress=progress)
        return {"texts": texts, "images": {s: {"records": records, "pixels": _stacked(pixels)}
                                           for s, (records, pixels) in images.items()}}

    cached = load_or_compute(cache_folder(cache_dir) / f"negatives-{key}.pt", compute,
                             what="image_text: the generated-negatives cache")
    return cached["texts"], {s: (v["records"], list(v["pixels"].numpy())) for s, v in cached["images"].items()}


def _stacked(images: list[np.ndarray]) -> torch.Tensor:
    """``[K, H, W, 3]`` uint8 (``[0]`` for none)."""
    return torch.from_numpy(np.stack(images)) if images else torch.zeros(0, dtype=torch.uint8)
