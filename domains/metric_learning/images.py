"""Reading images for retrieval: RGBA composited on white, resized, normalised for EfficientNet-Lite.

Augmentation is a mild random resized crop only: no horizontal flip, because mirrored emoji
(arrows, pointing hands) are different classes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.data import Dataset

from contrasuite.core.task.protocol import Progress, no_progress
from contrasuite.domains.efficientnet_lite0 import normalize as lite_normalize
from contrasuite.domains.images import read_rgb_array


def read_rgb(path: Path, size: int) -> Tensor:
    """``uint8 [3, size, size]``: transparent pixels composited on white, bicubic resize."""
    return torch.from_numpy(read_rgb_array(path, size)).permute(2, 0, 1)


def normalize(images: Tensor) -> Tensor:
    """``[B, 3, H, W]`` on 0..255 (``uint8``, or float after :func:`random_resized_crop`) -> float,
    EfficientNet-Lite's ``(x - 127) / 128``."""
    return lite_normalize(images.float() / 255.0)


def random_resized_crop(images: Tensor, generator: torch.Generator, min_scale: float = 0.7, *,
                        part: slice | None = None, total: int | None = None) -> Tensor:
    """Per-image random crop of area ``[min_scale, 1]`` (aspect 1), resized back; float ``[B, 3, S, S]``.

    ``images`` may be the ``part`` of a batch of ``total`` (a rank's shard): the draws are made for the
    whole batch and the part's are used, so the shards of several ranks are cropped as one process would."""
    b, _, s, _ = images.shape
    total = b if total is None else total
    part = slice(0, b) if part is None else part
    scale = min_scale + (1 - min_scale) * torch.rand(total, generator=generator)
    side = (scale.sqrt() * s).round().clamp(8, s).long().tolist()
    corners = [torch.randint(s - k + 1, (2,), generator=generator).tolist() for k in side]
    out = []
    for img, k, (top, left) in zip(images, side[part], corners[part]):
        crop = img[:, top : top + k, left : left + k].unsqueeze(0)
        out.append(F.interpolate(crop, size=(s, s), mode="bilinear", align_corners=False))
    return torch.cat(out)


class ImageFiles(Dataset):
    """``(uint8 [3, S, S], label)`` per image; ``preload`` decodes everything once into memory (a bar of
    images through ``progress``, named ``desc``)."""

    def __init__(self, paths: Sequence[Path], labels: Sequence[int], size: int, preload: bool = False,
                 progress: Progress = no_progress, desc: str = "decoding images") -> None:
        self.paths, self.labels, self.size = list(paths), torch.tensor(list(labels)), size
        self.images = None
        if preload and self.paths:
            self.images = torch.stack([read_rgb(p, size) for p in progress(self.paths, desc, total=len(self.paths))])

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> tuple[Tensor, Tensor]:
        image = self.images[i] if self.images is not None else read_rgb(self.paths[i], self.size)
        return image, self.labels[i]
