"""SimCLR two-view augmentation on the device (kornia), seeded per batch so resume is exact.

SimCLR's CIFAR-10 recipe (Chen et al. 2020, arXiv:2002.05709, appendix B.9): random resized crop to
32x32, horizontal flip (p=0.5), colour jitter of strength 0.5 i.e. (0.4, 0.4, 0.4, 0.1) with p=0.8,
random grayscale p=0.2, no Gaussian blur. The crop's scale range defaults to SimCLR's (0.08, 1);
many CIFAR re-implementations (SupContrast, most short-schedule runs) use (0.2, 1), which the
reduced CPU configs use because a few epochs of a small encoder cannot absorb 8%-area crops.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import kornia.augmentation as K
import torch
from torch import Tensor, nn

from contrasuite.core.task.errors import ConfigValueError

CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)


@dataclass
class AugmentConfig:
    """Two-view augmentation settings (``config.augment``)."""

    crop_scale: list[float] = field(default_factory=lambda: [0.08, 1.0])
    flip_p: float = 0.5
    jitter: list[float] = field(default_factory=lambda: [0.4, 0.4, 0.4, 0.1])
    """Brightness, contrast, saturation, hue."""
    jitter_p: float = 0.8
    grayscale_p: float = 0.2


class Normalize(nn.Module):
    """uint8 ``[B, 32, 32, 3]`` or float ``[B, 3, H, W]`` in [0, 1] -> normalised float ``[B, 3, H, W]``."""

    def __init__(self, mean: tuple[float, ...] = CIFAR10_MEAN, std: tuple[float, ...] = CIFAR10_STD) -> None:
        super().__init__()
        self.register_buffer("mean", torch.tensor(mean).view(1, -1, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(std).view(1, -1, 1, 1), persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        if x.dtype == torch.uint8:
            x = to_float(x)
        return (x - self.mean) / self.std


def to_float(images: Tensor) -> Tensor:
    """uint8 HWC ``[B, H, W, 3]`` -> float CHW ``[B, 3, H, W]`` in [0, 1]."""
    if images.dim() != 4 or images.shape[-1] != 3:
        raise ValueError(f"images must be uint8 [B, H, W, 3], got {tuple(images.shape)} {images.dtype}")
    return images.permute(0, 3, 1, 2).float().div_(255.0)


class TwoViewAugment(nn.Module):
    """Two independent SimCLR views of a uint8 batch, normalised; ``forward(images, seed)``."""

    def __init__(self, config: AugmentConfig, size: int = 32) -> None:
        super().__init__()
        if len(config.crop_scale) != 2 or not 0 < config.crop_scale[0] <= config.crop_scale[1] <= 1:
            raise ConfigValueError(f"augment.crop_scale must be [low, high] with 0 < low <= high <= 1, got {config.crop_scale}")
        if len(config.jitter) != 4:
            raise ConfigValueError(f"augment.jitter must be [brightness, contrast, saturation, hue], got {config.jitter}")
        b, c, s, h = config.jitter
        self.pipeline = K.AugmentationSequential(
            K.RandomResizedCrop((size, size), scale=tuple(config.crop_scale)),
            K.RandomHorizontalFlip(p=config.flip_p),
            K.ColorJitter(b, c, s, h, p=config.jitter_p),
            K.RandomGrayscale(p=config.grayscale_p),
        )
        self.normalize = Normalize()

    @torch.no_grad()
    def forward(self, images: Tensor, seed: int) -> tuple[Tensor, Tensor]:
        x = to_float(images)
        devices = [x.device] if x.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices, device_type=x.device.type if devices else "cuda"):
            torch.manual_seed(seed)
            view1 = self.pipeline(x)
            view2 = self.pipeline(x)
        return self.normalize(view1), self.normalize(view2)
