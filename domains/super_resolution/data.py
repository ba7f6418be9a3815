"""SR image sets (HR ground truth only), the bicubic degradation, and seeded training patches.

Sets are read from ``<data_root>/sr/<Name>.tar.gz`` (members ``<Name>/*.png|bmp``) or from an
extracted folder ``<data_root>/sr/<Name>/``. T91 trains; Set5, Set14 and B100 test. LR images are
made from the HR ones: modcrop to a multiple of the scale, MATLAB bicubic downscaling
(:mod:`~contrasuite.domains.super_resolution.imresize`), rounded to 8 bits as a saved LR PNG is.
"""

from __future__ import annotations

import sys
import tarfile
import zlib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch
from torch import Tensor

from contrasuite.core.task.errors import DataError
from contrasuite.domains.images import GREY_MODES, open_image, to_grey8, to_rgb8
from contrasuite.domains.super_resolution.imresize import imresize, quantize

SOURCES = {
    "T91": "GitHub jiny2001/dcscn-super-resolution data/yang91/",
    "B100": "GitHub jiny2001/dcscn-super-resolution data/bsd100/",
    "Set5": "GitHub majedelhelou/denoising_datasets CSet5/",
    "Set14": "GitHub majedelhelou/denoising_datasets CSet14/",
}
_SUFFIXES = (".png", ".bmp", ".jpg", ".jpeg", ".tif", ".tiff")


def _decode(data: bytes, name: str) -> Tensor:
    """Image bytes -> ``[C, H, W]`` float32 in ``[0, 1]`` (C = 3, or 1 for greyscale; 16-bit scaled, not clipped)."""
    with open_image(data, name) as im:
        arr = np.asarray(to_grey8(im) if im.mode in GREY_MODES else to_rgb8(im), dtype=np.uint8)
    if arr.ndim == 2:
        arr = arr[..., None]
    if arr.ndim != 3:
        raise ValueError(f"{name}: unexpected image array shape {arr.shape}")
    return torch.from_numpy(arr.copy()).permute(2, 0, 1).float() / 255.0


@lru_cache(maxsize=8)
def load_set(data_root: str, name: str) -> tuple[tuple[str, Tensor], ...]:
    """All images of set ``name`` as ``(stem, [C, H, W] in [0, 1])``, sorted by file name."""
    folder = Path(data_root) / "sr"
    archive, extracted = folder / f"{name}.tar.gz", folder / name
    items: list[tuple[str, Tensor]] = []
    if extracted.is_dir():
        for path in sorted(extracted.iterdir()):
            if path.suffix.lower() in _SUFFIXES:
                items.append((path.stem, _decode(path.read_bytes(), str(path))))
    elif archive.is_file():
        try:
            with tarfile.open(archive) as tar:
                for member in sorted(tar.getmembers(), key=lambda m: m.name):
                    if member.isfile() and Path(member.name).suffix.lower() in _SUFFIXES:
                        data = tar.extractfile(member).read()
                        items.append((Path(member.name).stem, _decode(data, f"{archive}:{member.name}")))
        except (tarfile.TarError, EOFError, zlib.error, OSError) as err:
            raise DataError(f"{archive}: corrupt or truncated archive ({type(err).__name__}: {err})") from None
    else:
        raise FileNotFoundError(
            f"SR set {name!r} not found: expected {archive} or the folder {extracted} "
            f"(public source: {SOURCES.get(name, 'unknown')}; docs/data.md); set run.data_root or CONTRASUITE_DATA"
        )
    if not items:
        raise FileNotFoundError(f"SR set {name!r}: no images in {archive if archive.is_file() else extracted}")
    return tuple(items)


def modcrop(image: Tensor, scale: int) -> Tensor:
    """Crop ``[..., H, W]`` to the largest multiple of ``scale`` (top-left kept, as MATLAB's modcrop)."""
    h, w = image.shape[-2:]
    return image[..., : h - h % scale, : w - w % scale]


def degrade(hr: Tensor, scale: int) -> Tensor:
    """HR ``[..., C, H, W]`` (H, W multiples of ``scale``) -> LR by MATLAB bicubic, 8-bit rounded."""
    if hr.shape[-1] % scale or hr.shape[-2] % scale:
        raise ValueError(f"hr size {tuple(hr.shape[-2:])} is not a multiple of scale {scale}: modcrop first")
    return quantize(imresize(hr, 1.0 / scale)).to(hr.dtype)


def upscale_bicubic(lr: Tensor, scale: int) -> Tensor:
    """The bicubic baseline: MATLAB bicubic upscaling by ``scale``, 8-bit rounded."""
    return quantize(imresize(lr, float(scale))).to(lr.dtype)


@dataclass(frozen=True)
class Pair:
    """One evaluation image: name, HR (modcropped) and its LR."""

    name: str
    hr: Tensor
    lr: Tensor


@lru_cache(maxsize=8)
def eval_pairs(data_root: str, name: str, scale: int) -> tuple[Pair, ...]:
    """Modcropped HR images of set ``name`` with their bicubic LR at ``scale``."""
    pairs = []
    for stem, img in load_set(data_root, name):
        hr = modcrop(img, scale)
        pairs.append(Pair(stem, hr, degrade(hr, scale)))
    return tuple(pairs)


def patch_fits(height: int, width: int, scale: int, patch: int) -> bool:
    """Whether an HR image of ``height`` x ``width`` holds an LR patch of ``patch`` px at ``scale`` (after modcrop)."""
    return min(height, width) // scale >= patch


def to_stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def usable_images(sizes: Sequence[tuple[int, int]], source: str, scale: int, patch: int,
                  names: Sequence[str] | None = None, log: Callable[[str], None] = to_stderr) -> list[int]:
    """Indices of the HR images (``(height, width)`` each, optionally named ``names``) that hold a training patch.

    Smaller images cannot be sampled and are left out, said in one line to ``log`` (how many, and the
    first by name; the task logs on rank 0 only). When none is left, a :class:`DataError` names ``source``
    (the folder or set) and the patch size. One usable image is enough: a batch draws its patches from
    the usable images with replacement.
    """
    fits = [patch_fits(h, w, scale, patch) for h, w in sizes]
    small = [name for name, ok in zip(names or (), fits) if not ok]
    need = f"{patch * scale} px on each side (config.data.patch_size={patch} LR px at x{scale})"
    first = f"; the first is {small[0]}" if small else ""
    if not any(fits):
        raise DataError(f"{source}: none of the {len(sizes)} training images is at least {need}{first}")
    if not all(fits):
        log(f"{source}: {fits.count(False)} of {len(sizes)} training images are smaller than {need} and are not used{first}")
    return [i for i, ok in enumerate(fits) if ok]


class PatchSampler:
    """Random aligned (LR, HR) patches from a list of training images, with dihedral augmentation.

    The LR of each whole image is computed once; a patch is an LR crop of ``patch`` pixels and the
    HR crop at ``scale`` times its position. Each patch gets one of the 8 flips/rotations, the same
    for LR and HR (kornia's flips and ``torch.rot90``). All randomness comes from the generator passed
    to :meth:`batch`, so a run's batches are fixed by ``(seed, epoch)``. Images too small for a patch
    are left out as :func:`usable_images` says (``names`` and ``source`` name them; a DataError if none fits).
    """

    def __init__(self, images: list[Tensor], scale: int, patch: int, names: Sequence[str] | None = None,
                 source: str = "the SR training set", log: Callable[[str], None] = to_stderr) -> None:
        self.scale, self.patch = scale, patch
        keep = usable_images([tuple(img.shape[-2:]) for img in images], source, scale, patch, names, log)
        self.hr = [modcrop(images[i], scale) for i in keep]
        self.lr = [degrade(hr, scale) for hr in self.hr]

    def batch(self, size: int, generator: torch.Generator, part: slice | None = None) -> tuple[Tensor, Tensor]:
        """``(lr [B, C, p, p], hr [B, C, s*p, s*p])`` in ``[0, 1]``: the ``part`` (a rank's shard; default
        all) of a batch of ``size`` patches, drawn as the whole batch is, so the ranks' parts are one batch."""
        from kornia.geometry.transform import hflip

        lrs, hrs = [], []
        p, s = self.patch, self.scale
        keep = range(size)[part or slice(None)]
        for i in range(size):
            k = int(torch.randint(len(self.lr), (1,), generator=generator))
            lr_img, hr_img = self.lr[k], self.hr[k]
            y = int(torch.randint(lr_img.shape[-2] - p + 1, (1,), generator=generator))
            x = int(torch.randint(lr_img.shape[-1] - p + 1, (1,), generator=generator))
            flip, rot = (int(v) for v in torch.randint(0, 4, (2,), generator=generator))
            if i not in keep:
                continue
            lr = lr_img[..., y : y + p, x : x + p]
            hr = hr_img[..., y * s : (y + p) * s, x * s : (x + p) * s]
            if flip % 2:
                lr, hr = hflip(lr), hflip(hr)
            lr, hr = torch.rot90(lr, rot, dims=(-2, -1)), torch.rot90(hr, rot, dims=(-2, -1))
            lrs.append(lr)
            hrs.append(hr)
        return torch.stack(lrs).contiguous(), torch.stack(hrs).contiguous()
