"""A style's training data: its image-caption pairs, its generated negative images, and the split by group."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import numpy as np
from torch import Tensor

from contrasuite.core.task.errors import ConfigValueError
from contrasuite.core.task.protocol import Progress, no_progress
from contrasuite.domains.image_text.captions import normalise
from contrasuite.domains.image_text.config import DataConfig, ImageTextConfig
from contrasuite.domains.image_text.data import PairSet, join_groups, load_captions, load_emoji, split_groups


@dataclass
class StyleData:
    """One style's pairs, the rows of its negative images, and (cached) trunk inputs or features."""

    pairs: PairSet
    images: np.ndarray
    """Pairs' images followed by the generated negative images."""
    neg_records: list[dict]
    neg_rows: list[int]
    neg_truths: list[set[str]]
    """Normalised true captions of each negative image (its ``negative`` and, for a near copy of
    another image of the set, that image's caption)."""
    features: Tensor | None = None


def style_data(pairs: PairSet, records: list[dict], generated: list[np.ndarray]) -> StyleData:
    """A style's :class:`StyleData`: its pairs, and the negative images (``records`` and their ``generated``
    pixels) that show one of its emoji, after the pairs' images."""
    index = {k: i for i, k in enumerate(pairs.keys)}
    rows, kept, truths = [], [], []
    for rec in records:
        if "image_key" in rec:
            if rec["image_key"] not in index:
                continue
            rows.append(index[rec["image_key"]])
        else:
            rows.append(len(pairs) + rec["image_index"])
        kept.append(rec)
        copy = rec.get("same_as")
        truths.append({normalise(rec["negative"]),
                       *([normalise(pairs.captions[index[copy]])] if copy in index else [])})
    images = np.concatenate([pairs.images, np.stack(generated)]) if generated else pairs.images
    return StyleData(pairs, images, kept, rows, truths)


def load_pairs(cfg: ImageTextConfig, data_root: Path, progress: Progress = no_progress) -> dict[str, PairSet]:
    """The image-caption pairs of every style ``config.data`` names (emoji: the training and unseen style)."""
    if cfg.data.source == "emoji":
        styles = [cfg.data.style] + ([cfg.data.unseen_style] if cfg.data.unseen_style else [])
        return {s: load_emoji(data_root, s, limit=cfg.data.limit, progress=progress) for s in styles}
    if cfg.data.source == "captions":
        if not cfg.data.captions_file or not cfg.data.image_root:
            raise ConfigValueError("data.source=captions needs data.captions_file and data.image_root")
        return {"images": load_captions(cfg.data.captions_file, cfg.data.image_root)}
    raise ConfigValueError(f"data.source must be emoji or captions, got {cfg.data.source!r}")


def split_pairs(pairs: PairSet, image_sets: Mapping[str, tuple[list[dict], list]], cfg: DataConfig) -> dict[str, list[int]]:
    """Row indices of ``pairs`` per split, by group, where an emoji and the emoji that one of its negative
    images copies (``same_as``, in any style) share a group: a held-out emoji's negative image is never a
    training image, and no training negative image is a held-out image."""
    links = [(r["key"], r["same_as"]) for records, _ in image_sets.values() for r in records if "same_as" in r]
    groups = join_groups(pairs.groups, pairs.keys, links)
    return split_groups(groups, (cfg.val_fraction, cfg.test_fraction), cfg.split_seed)
