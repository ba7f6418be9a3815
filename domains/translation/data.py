"""Unpaired image sets: emoji style pairs (Twemoji -> Noto) and ``trainA/`` ``trainB/`` folders.

Emoji (``<data_root>/emoji``): the two tarballs share file names. Emoji are grouped by base emoji
(skin-tone variants stay with their base, from ``emoji.json``) and the groups are shuffled with
``split_seed``; the first groups up to ``test_images`` form the held-out *test* set, the next up to
``val_images`` the *validation* set (both styles of each, so a translation can be compared with the
true target drawing), and the remaining groups are dealt alternately to *train A* (Twemoji only)
and *train B* (Noto only), so the two training sets share no emoji. RGBA is composited on white.

Folders (``<data_root>/<path>``): ``trainA/``, ``trainB/`` and optionally ``testA/``, ``testB/``
(the CycleGAN/CUT layout of horse2zebra and the others; a single image per folder is the
single-image setting). Images are resized to ``load_size`` (square; ``null`` keeps the size, capped
at ``max_side``) and randomly cropped to ``crop_size`` with a horizontal flip, as in CUT.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from contrasuite.core.task.config_fields import bounded, one_of
from contrasuite.core.task.errors import ConfigValueError
from contrasuite.domains.image_loading import albumentations_transform
from contrasuite.domains.images import image_size, read_rgb_array

SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".webp", ".tif", ".tiff")


@dataclass
class DataConfig:
    kind: str = one_of("emoji", ("emoji", "folders"))
    """``emoji`` or ``folders``."""
    path: str = "emoji"
    """Relative to the data root (or absolute): the emoji folder, or the folder holding trainA/ trainB/."""
    source_style: str = "twitter"
    """emoji: the style translated from (domain A), read from ``emoji-<style>-64.tar.gz`` in ``path``."""
    target_style: str = "google"
    """emoji: the style translated to (domain B); any style packed the same way (e.g. ``openmoji``) works."""
    load_size: Optional[int] = None
    """Square resize before cropping (CUT: 286); null keeps the image size (capped at ``max_side``)."""
    max_side: int = bounded(1024, ge=1)
    crop_size: int = bounded(64, ge=4)
    flip: bool = True
    steps_per_epoch: Optional[int] = None
    """Default: one pass over the larger training set."""
    split_seed: int = 0
    test_images: int = bounded(400, ge=0)
    val_images: int = bounded(150, ge=0)
    max_train_images: Optional[int] = None
    """Use at most this many training images per domain (tests, quick runs)."""
    workers: int = bounded(0, ge=0)
    """Folders of more than ``DISK_FOLDER`` training images are read from disk in the training loop by this
    many DataLoader workers (``contrasuite.domains.image_loading``); the batches do not depend on it."""
    eval_crops: int = 16
    """Folders: fixed random crops per evaluation image for FD/KID (a single image gives one image)."""
    cache_dir: str = ""
    """Where the emoji tarballs are extracted (default ``$CONTRASUITE_CACHE`` or ``~/.cache/contrasuite``)."""


def missing(path: Path, what: str) -> FileNotFoundError:
    return FileNotFoundError(f"{what} not found: {path} (config.data.path / the data root; docs/data.md, contrasuite data list)")


def read_rgb(path: Path) -> Tensor:
    """``uint8 [3, H, W]``; transparency composited on white."""
    return torch.from_numpy(read_rgb_array(path)).permute(2, 0, 1)


def to_float(images: Tensor) -> Tensor:
    """``uint8`` -> float in ``[-1, 1]`` (the generator's range)."""
    return images.float() / 127.5 - 1.0


def to_uint8(images: Tensor) -> Tensor:
    """Float in ``[-1, 1]`` -> ``uint8``."""
    return ((images.float().clamp(-1, 1) + 1.0) * 127.5).round().to(torch.uint8)


def resized_size(h: int, w: int, load_size: Optional[int], max_side: int) -> tuple[int, int]:
    """``(H, W)`` of an ``h x w`` image after :func:`resize`."""
    if load_size is not None:
        return load_size, load_size
    if max(h, w) > max_side:
        s = max_side / max(h, w)
        return max(1, round(h * s)), max(1, round(w * s))
    return h, w


def resize(image: Tensor, load_size: Optional[int], max_side: int) -> Tensor:
    """``uint8 [3, H, W]`` resized (bicubic, antialiased) to ``load_size`` square or capped at ``max_side``."""
    h, w = image.shape[-2:]
    size = resized_size(h, w, load_size, max_side)
    if size == (h, w):
        return image
    out = F.interpolate(image[None].float(), size=size, mode="bicubic", align_corners=False, antialias=True)
    return out[0].round().clamp(0, 255).to(torch.uint8)


def check_crop(paths: Sequence[Path], load_size: Optional[int], max_side: int, crop_size: int) -> None:
    """Refuse, before training, an image smaller than ``crop_size`` after :func:`resize` (sizes read from the
    files' headers, nothing decoded); the message names the first such file."""
    for path in paths:
        w, h = image_size(path)
        size = resized_size(h, w, load_size, max_side)
        if min(size) < crop_size:
            raise ConfigValueError(f"config.data.crop_size={crop_size} is larger than {path} ({size[0]}x{size[1]} after "
                                   "config.data.load_size / max_side): lower crop_size or remove the image")


def random_crop(image: Tensor, size: int, flip: bool, gen: torch.Generator) -> Tensor:
    h, w = image.shape[-2:]
    if h < size or w < size:
        raise ConfigValueError(f"config.data.crop_size={size} is larger than an image of {h}x{w} (after load_size)")
    y = int(torch.randint(0, h - size + 1, (1,), generator=gen))
    x = int(torch.randint(0, w - size + 1, (1,), generator=gen))
    out = image[:, y : y + size, x : x + size]
    if flip and bool(torch.rand((), generator=gen) < 0.5):
        out = out.flip(-1)
    return out


@dataclass
class EmojiSplits:
    """File names of each split (disjoint)."""

    train_a: list[str]
    train_b: list[str]
    val: list[str]
    test: list[str]


def emoji_groups(meta: Path, names: Sequence[str]) -> list[list[str]]:
    """``names`` grouped by base emoji (skin-tone variants with their base), in sorted order."""
    group_of: dict[str, str] = {}
    if meta.is_file():
        for entry in json.loads(meta.read_text()):
            base = entry["image"]
            group_of[base] = base
            for variant in (entry.get("skin_variations") or {}).values():
                group_of[variant["image"]] = base
    groups: dict[str, list[str]] = {}
    for name in sorted(names):
        groups.setdefault(group_of.get(name, name), []).append(name)
    return [groups[k] for k in sorted(groups)]


def split_emoji(groups: Sequence[Sequence[str]], test_images: int, val_images: int, seed: int) -> EmojiSplits:
    """See the module docstring."""
    order = np.random.default_rng(seed).permutation(len(groups))
    test: list[str] = []
    val: list[str] = []
    rest: list[Sequence[str]] = []
    for i in order:
        group = groups[i]
        if len(test) < test_images:
            test += group
        elif len(val) < val_images:
            val += group
        else:
            rest.append(group)
    train_a = [n for g in rest[0::2] for n in g]
    train_b = [n for g in rest[1::2] for n in g]
    if not train_a or not train_b or not val or not test:
        raise ConfigValueError(
            f"emoji split left an empty set (train A {len(train_a)}, train B {len(train_b)}, val {len(val)}, "
            f"test {len(test)}): lower config.data.test_images / val_images"
        )
    return EmojiSplits(sorted(train_a), sorted(train_b), sorted(val), sorted(test))


def load_stack(folder: Path, names: Sequence[str]) -> Tensor:
    """``uint8 [N, 3, H, W]`` of ``folder/name`` for each name."""
    return torch.stack([read_rgb(folder / n) for n in names]) if names else torch.zeros(0, 3, 1, 1, dtype=torch.uint8)


def list_images(folder: Path) -> list[Path]:
    if not folder.is_dir():
        raise missing(folder, "image folder")
    files = sorted(p for p in folder.iterdir() if p.suffix.lower() in SUFFIXES)
    if not files:
        raise FileNotFoundError(f"no images ({', '.join(SUFFIXES)}) in {folder}")
    return files


class ImageSet:
    """Images of one domain: preloaded ``uint8`` tensors (emoji) or files read on demand (folders)."""

    def __init__(self, *, stack: Tensor | None = None, paths: Sequence[Path] = (), load_size: Optional[int] = None,
                 max_side: int = 1024) -> None:
        self.stack, self.paths = stack, list(paths)
        self.load_size, self.max_side = load_size, max_side
        self._cache: dict[int, Tensor] = {}

    def __len__(self) -> int:
        return len(self.stack) if self.stack is not None else len(self.paths)

    def __getitem__(self, i: int) -> Tensor:
        if self.stack is not None:
            return self.stack[i]
        if i not in self._cache:
            image = resize(read_rgb(self.paths[i]), self.load_size, self.max_side)
            if len(self.paths) > 64:  # large folders are read each time; small ones (single image) kept
                return image
            self._cache[i] = image
        return self._cache[i]


DISK_FOLDER = 64
"""Training folders up to this many images are decoded once and kept; larger ones are read per step."""


def disk_transform(load_size: Optional[int], max_side: int, crop_size: int, flip: bool) -> Callable[[np.ndarray, int], np.ndarray]:
    """The folder pipeline for DataLoader workers: :func:`resize`, then albumentations' random crop and flip."""
    import albumentations as A

    crop = albumentations_transform(A.RandomCrop(crop_size, crop_size), *([A.HorizontalFlip()] if flip else []))

    def run(image: np.ndarray, seed: int) -> np.ndarray:
        resized = resize(torch.from_numpy(image).permute(2, 0, 1), load_size, max_side).permute(1, 2, 0).numpy()
        h, w = resized.shape[:2]
        if h < crop_size or w < crop_size:
            raise ConfigValueError(f"config.data.crop_size={crop_size} is larger than an image of {h}x{w} (after load_size)")
        return crop(np.ascontiguousarray(resized), seed)

    return run


def fixed_crops(images: ImageSet, size: int, per_image: int, seed: int) -> Tensor:
    """``uint8 [N * per_image, 3, size, size]``: reproducible crops (the whole image when it is ``size``)."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for i in range(len(images)):
        image = images[i]
        if tuple(image.shape[-2:]) == (size, size):
            out.append(image)
            continue
        out += [random_crop(image, size, False, gen) for _ in range(per_image)]
    return torch.stack(out)
