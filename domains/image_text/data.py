"""Image-text pairs: the emoji set (two styles sharing file names) and a user's own captions.

* Emoji, under ``<data_root>/emoji/``: ``emoji.json`` and ``emoji-<style>-64.tar.gz`` (``twitter``:
  Twemoji, ``google``: Noto), 64x64 RGBA PNGs read straight from the tarball and composited on white.
* Captions files: a CSV with columns ``image,caption``, a JSONL of ``{"image": ..., "caption": ...}``,
  or COCO-style captions (``{"images": [{id, file_name}], "annotations": [{image_id, caption}]}``);
  image paths are relative to an image folder.

Splits are by group, so test emoji are never seen in training: for emoji, all skin tones of one emoji
and all emoji that differ only in a colour or direction word go together
(:func:`~contrasuite.domains.image_text.captions.attribute_group`); for user data, the image file.
"""

from __future__ import annotations

import csv
import json
import tarfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from contrasuite.core.task.errors import DataError
from contrasuite.core.task.protocol import Progress, no_progress
from contrasuite.domains.archives import emoji_archive
from contrasuite.domains.image_text.captions import EmojiItem, build_items, load_metadata
from contrasuite.domains.images import open_image, rgb_on_white

"""Emoji styles and their tarballs (``twitter`` = Twemoji, ``google`` = Noto)."""

SPLITS = ("train", "val", "test")


@dataclass
class PairSet:
    """Images ``[N, H, W, 3]`` uint8 with one caption each, the group each belongs to, and emoji items if any."""

    images: np.ndarray
    captions: list[str]
    groups: list[str]
    keys: list[str]
    """A stable id per image (the emoji file name or the image path)."""
    items: list[EmojiItem] | None = None

    def __len__(self) -> int:
        return len(self.captions)

    def subset(self, index: Sequence[int]) -> "PairSet":
        index = list(index)
        return PairSet(self.images[index], [self.captions[i] for i in index], [self.groups[i] for i in index],
                       [self.keys[i] for i in index], None if self.items is None else [self.items[i] for i in index])


def read_style(data_root: str | Path, style: str, progress: Progress = no_progress) -> dict[str, np.ndarray]:
    """All images of one emoji ``style`` by file name, read from its tarball ``emoji/emoji-<style>-64.tar.gz``
    (a bar of the archive's members)."""
    path = emoji_archive(Path(data_root) / "emoji", style)
    if not path.is_file():
        raise FileNotFoundError(f"emoji images of style {style!r} not found: {path} (config.data.style / unseen_style; "
                                f"the shipped styles come from npm emoji-datasource-<style> 16.0.0, img/<style>/64/)")
    images = {}
    try:
        with tarfile.open(path) as tar:
            for member in progress(tar, f"decoding {style} emoji images"):
                if member.isfile() and member.name.endswith(".png"):
                    with open_image(tar.extractfile(member).read(), f"{path}:{member.name}") as im:
                        images[Path(member.name).name] = rgb_on_white(im)
    except (tarfile.TarError, EOFError, zlib.error, OSError) as err:
        raise DataError(f"{path}: corrupt or truncated archive ({type(err).__name__}: {err})") from None
    return images


def load_emoji(data_root: str | Path, style: str, *, limit: int = 0, progress: Progress = no_progress) -> PairSet:
    """Emoji image-text pairs of ``style``; items without an image in that style are dropped.

    ``limit`` keeps the first ``limit`` base emoji (all their variations), for tests and smoke runs.
    """
    items = build_items(load_metadata(Path(data_root) / "emoji" / "emoji.json"))
    if limit:
        bases = list(dict.fromkeys(i.base for i in items))[:limit]
        keep = set(bases)
        items = [i for i in items if i.base in keep]
    images = read_style(data_root, style, progress)
    items = [i for i in items if i.image in images]
    if not items:
        raise ValueError(f"no emoji of emoji.json found in the {style} tarball under {data_root}/emoji")
    return PairSet(np.stack([images[i.image] for i in items]), [i.caption for i in items], [i.group for i in items],
                   [i.image for i in items], items)


def split_groups(groups: Sequence[str], fractions: tuple[float, float], seed: int) -> dict[str, list[int]]:
    """Indices of ``train``/``val``/``test``, disjoint by group; ``fractions`` = (val, test) shares of groups."""
    val_frac, test_frac = fractions
    if min(fractions) < 0 or val_frac + test_frac >= 1:
        raise ValueError(f"split fractions (val, test) must be >= 0 and sum below 1, got {fractions}")
    unique = sorted(set(groups))
    order = np.random.default_rng(seed).permutation(len(unique))
    n_val, n_test = round(val_frac * len(unique)), round(test_frac * len(unique))
    which = {}
    for rank, g in enumerate(order):
        which[unique[g]] = "val" if rank < n_val else "test" if rank < n_val + n_test else "train"
    out: dict[str, list[int]] = {s: [] for s in SPLITS}
    for i, g in enumerate(groups):
        out[which[g]].append(i)
    return out


def join_groups(groups: Sequence[str], keys: Sequence[str], links: Iterable[tuple[str, str]]) -> list[str]:
    """``groups`` with the groups of every linked pair of keys merged (union-find); each merged group is
    named by its smallest member group. Links to keys not in ``keys`` are ignored."""
    parent = {g: g for g in groups}

    def root(g: str) -> str:
        while parent[g] != g:
            parent[g] = parent[parent[g]]
            g = parent[g]
        return g

    group_of = dict(zip(keys, groups))
    for a, b in links:
        if a in group_of and b in group_of:
            ra, rb = root(group_of[a]), root(group_of[b])
            if ra != rb:
                parent[max(ra, rb)] = min(ra, rb)
    return [root(g) for g in groups]


def read_captions_file(path: str | Path) -> list[tuple[str, str]]:
    """``(image path, caption)`` rows of a CSV (``image,caption``), JSONL or COCO captions JSON; errors name the file
    (and the line of a JSONL)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"captions file not found: {path}")
    suffix = path.suffix.lower()
    readers = {".csv": _read_csv, ".jsonl": _read_jsonl, ".json": _read_coco}
    if suffix not in readers:
        raise DataError(f"{path}: captions file must be .csv, .jsonl or COCO .json, got {suffix!r}")
    try:
        return readers[suffix](path)
    except UnicodeDecodeError as err:
        raise DataError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from None


def _read_csv(path: Path) -> list[tuple[str, str]]:
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        missing = {"image", "caption"} - set(reader.fieldnames or ())
        if missing:
            raise DataError(f"{path}: CSV needs columns 'image' and 'caption'; missing {sorted(missing)}, "
                            f"it has {list(reader.fieldnames or [])}")
        return [(row["image"], row["caption"]) for row in reader]


def _read_jsonl(path: Path) -> list[tuple[str, str]]:
    rows = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise DataError(f"{path}, line {n}, column {err.colno}: not valid JSON ({err.msg})") from None
        if not isinstance(record, dict) or "image" not in record or "caption" not in record:
            raise DataError(f"{path}, line {n}: each JSONL record needs 'image' and 'caption'")
        rows.append((record["image"], record["caption"]))
    return rows


def _read_coco(path: Path) -> list[tuple[str, str]]:
    try:
        data = json.loads(path.read_text())
    except ValueError as err:
        raise DataError(f"{path}: not valid JSON ({err})") from None
    if not isinstance(data, dict) or "images" not in data or "annotations" not in data:
        raise DataError(f"{path}: COCO captions need top-level 'images' and 'annotations'")
    try:
        files = {im["id"]: im["file_name"] for im in data["images"]}
        pairs = [(a["image_id"], a["caption"]) for a in data["annotations"]]
    except (KeyError, TypeError) as err:
        raise DataError(f"{path}: COCO images need 'id' and 'file_name', annotations 'image_id' and 'caption' "
                        f"({type(err).__name__}: {err})") from None
    unknown = [image for image, _ in pairs if image not in files]
    if unknown:
        raise DataError(f"{path}: annotation refers to unknown image id {unknown[0]!r}")
    return [(files[image], caption) for image, caption in pairs]


def load_captions(path: str | Path, image_root: str | Path, size: int = 64) -> PairSet:
    """A captions file as pairs; images resized to ``size``; grouped by image (several captions per image)."""
    rows = read_captions_file(path)
    if not rows:
        raise DataError(f"{path}: no image-caption rows")
    root, cache = Path(image_root), {}
    for image, _ in rows:
        if image not in cache:
            file = root / image
            if not file.is_file():
                raise FileNotFoundError(f"{path}: image {image!r} not found under {root}")
            with open_image(file) as im:
                cache[image] = rgb_on_white(im, size)
    return PairSet(np.stack([cache[i] for i, _ in rows]), [c for _, c in rows], [i for i, _ in rows],
                   [i for i, _ in rows])
