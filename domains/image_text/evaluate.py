"""Held-out evaluation: retrieval Recall@K both ways, compositional accuracy per operation, SugarCrepe.

* Retrieval: image->text over the split's distinct captions and text->image over its images
  (:func:`contrasuite.core.metrics.retrieval.recall_at_k`; a hit is any item with the same caption).
* Compositional accuracy (Winoground-style "text" and "image" scores, Thrush et al., CVPR 2022; the
  SugarCrepe protocol, Hsieh et al., NeurIPS 2023): text side, ``s(I, c) > s(I, c_neg)`` for an image,
  its caption and a negative caption; image side, ``s(I, c) > s(I_neg, c)`` for a caption, its image and
  a negative image. Reported per operation and as the mean over operations.
* :func:`evaluate_sugarcrepe`: SugarCrepe's published JSON files (``{id: {filename, caption,
  negative_caption}}``, one file per operation) against a COCO image folder.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from torch import Tensor

from contrasuite.core.metrics.retrieval import recall_at_k
from contrasuite.domains.images import open_image, to_rgb8

SUGARCREPE_FILES = ("add_att", "add_obj", "replace_att", "replace_obj", "replace_rel", "swap_att", "swap_obj")


def retrieval(image_emb: Tensor, captions: Sequence[str], text_emb: Mapping[str, Tensor],
              ks: Sequence[int] = (1, 5, 10)) -> dict[str, float]:
    """``i2t_r@K`` and ``t2i_r@K`` (in %) of images against their split's distinct captions."""
    unique = list(dict.fromkeys(captions))
    ids = {c: i for i, c in enumerate(unique)}
    labels = torch.tensor([ids[c] for c in captions])
    texts = torch.stack([text_emb[c] for c in unique])
    ks_i = [k for k in ks if k <= len(unique)]
    ks_t = [k for k in ks if k <= len(captions)]
    i2t = recall_at_k(image_emb, labels, texts, torch.arange(len(unique)), ks=ks_i)
    t2i = recall_at_k(texts, torch.arange(len(unique)), image_emb, labels, ks=ks_t)
    return {**{f"i2t_r{k}": 100 * v for k, v in i2t.items()}, **{f"t2i_r{k}": 100 * v for k, v in t2i.items()}}


def compositional(pairs: Sequence[tuple[str, float, float]], prefix: str) -> dict[str, float]:
    """``(operation, true score, negative score)`` -> accuracy in % per operation (and its count,
    ``<op>/n``: one comparison moves an operation by ``100 / n`` points), their mean and the total count."""
    by_op: dict[str, list[bool]] = defaultdict(list)
    for op, true, neg in pairs:
        by_op[op].append(true > neg)
    out = {f"{prefix}/{op}": 100 * float(np.mean(v)) for op, v in sorted(by_op.items())}
    out.update({f"{prefix}/{op}/n": float(len(v)) for op, v in by_op.items()})
    if by_op:
        out[f"{prefix}/mean"] = float(np.mean([out[f"{prefix}/{op}"] for op in by_op]))
        out[f"{prefix}/n"] = float(sum(len(v) for v in by_op.values()))
    return out


def text_side(image_emb: Mapping[str, Tensor], text_emb: Mapping[str, Tensor], records: Sequence[dict],
              prefix: str = "comp_text") -> dict[str, float]:
    """For each text-negative record of an evaluated image: does the true caption score higher?"""
    scored = []
    for rec in records:
        if rec["key"] in image_emb:
            image = image_emb[rec["key"]]
            scored.append((rec["operation"], float(image @ text_emb[rec["caption"]]),
                           float(image @ text_emb[rec["negative"]])))
    return compositional(scored, prefix)


def image_side(image_emb: Mapping[str, Tensor], negative_emb: Sequence[Tensor], text_emb: Mapping[str, Tensor],
               records: Sequence[dict], prefix: str = "comp_image") -> dict[str, float]:
    """For each image-negative record: does the caption score its true image above the negative image?

    ``negative_emb[i]`` is the embedding of record ``i``'s negative image.
    """
    scored = []
    for rec, neg in zip(records, negative_emb):
        if rec["key"] in image_emb:
            text = text_emb[rec["caption"]]
            scored.append((rec["operation"], float(image_emb[rec["key"]] @ text), float(neg @ text)))
    return compositional(scored, prefix)


def evaluate_sugarcrepe(folder: str | Path, image_root: str | Path, encode_images: Callable[[list[np.ndarray]], Tensor],
                        encode_texts: Callable[[list[str]], Tensor], batch_size: int = 64,
                        image_size: int = 224) -> dict[str, float]:
    """Accuracy (%) on every SugarCrepe file found in ``folder``: ``s(I, caption) > s(I, negative_caption)``.

    ``encode_images`` takes a list of ``[H, W, 3]`` uint8 arrays, ``encode_texts`` a list of strings;
    both return embeddings (normalised here).
    """
    folder, image_root = Path(folder), Path(image_root)
    files = [folder / f"{name}.json" for name in SUGARCREPE_FILES if (folder / f"{name}.json").is_file()]
    if not files:
        raise FileNotFoundError(f"no SugarCrepe files ({', '.join(SUGARCREPE_FILES)}.json) in {folder}")
    out = {}
    for file in files:
        items = list(json.loads(file.read_text()).values())
        correct = 0
        for start in range(0, len(items), batch_size):
            chunk = items[start: start + batch_size]
            images = []
            for it in chunk:
                path = image_root / it["filename"]
                if not path.is_file():
                    raise FileNotFoundError(f"{file}: image {path} not found (SugarCrepe uses COCO val2017)")
                with open_image(path) as im:
                    images.append(np.asarray(to_rgb8(im).resize((image_size, image_size), Image.BICUBIC)))
            with torch.no_grad():
                img = F.normalize(encode_images(images).float(), dim=-1)
                pos = F.normalize(encode_texts([it["caption"] for it in chunk]).float(), dim=-1)
                neg = F.normalize(encode_texts([it["negative_caption"] for it in chunk]).float(), dim=-1)
            correct += int(((img * pos).sum(-1) > (img * neg).sum(-1)).sum())
        out[f"sugarcrepe/{file.stem}"] = 100 * correct / len(items)
    out["sugarcrepe/mean"] = float(np.mean([v for k, v in out.items()]))
    return out
