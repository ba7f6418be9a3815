"""Encoders for 32x32 images and the SimCLR projection head.

* ``resnet18_cifar``: torchvision's ResNet-18 with the CIFAR stem of SimCLR (Chen et al. 2020, appendix
  B.9) and of the WEINCE/DHEL code bases: the 7x7 stride-2 conv becomes a 3x3 stride-1 conv and the
  max-pool is removed; ``fc`` is dropped, so the encoder returns the 512-d pooled features ``h``.
* ``small_conv``: a four-stage conv net (about 0.3M parameters at width 32) that trains a few epochs
  of a CIFAR subset in minutes on a CPU; used by the reduced comparison.

The projection head is SimCLR's 2-layer MLP ``g(h) = W2 ReLU(BN(W1 h))``; the loss sees ``z = g(h)``,
the frozen-feature evaluation sees ``h``.
"""

from __future__ import annotations

from typing import Callable

from torch import Tensor, nn
from torchvision.models import resnet18

from contrasuite.core.task.errors import ConfigValueError


def resnet18_cifar(width: int = 64) -> tuple[nn.Module, int]:
    """CIFAR ResNet-18 without its classifier; returns ``(encoder, feature_dim)``. ``width`` must be 64."""
    if width != 64:
        raise ConfigValueError(f"model.width: resnet18_cifar has width 64, got {width}")
    net = resnet18(weights=None)
    net.conv1 = nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=1, bias=False)
    net.maxpool = nn.Identity()
    net.fc = nn.Identity()
    return net, 512


def _block(cin: int, cout: int, stride: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True)
    )


def small_conv(width: int = 32) -> tuple[nn.Module, int]:
    """Conv-BN-ReLU stages at 32, 16, 8, 4 px with widths ``w, 2w, 4w, 8w``, global average pooled."""
    if width < 1:
        raise ConfigValueError(f"model.width must be >= 1, got {width}")
    w = width
    net = nn.Sequential(
        _block(3, w, 1),
        _block(w, 2 * w, 2),
        _block(2 * w, 4 * w, 2),
        _block(4 * w, 8 * w, 2),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
    )
    return net, 8 * w


ENCODERS: dict[str, Callable[[int], tuple[nn.Module, int]]] = {
    "resnet18_cifar": resnet18_cifar,
    "small_conv": small_conv,
}


def build_encoder(name: str, width: int) -> tuple[nn.Module, int]:
    """Look an encoder up by ``model.encoder`` name; the error lists the known names."""
    if name not in ENCODERS:
        raise ConfigValueError(f"model.encoder: unknown encoder {name!r}; known: {sorted(ENCODERS)}")
    return ENCODERS[name](width)


class ProjectionHead(nn.Module):
    """SimCLR's 2-layer MLP: ``Linear(d, hidden) -> BN -> ReLU -> Linear(hidden, out)``."""

    def __init__(self, in_dim: int, hidden_dim: int = 512, out_dim: int = 128) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(in_dim, hidden_dim, bias=False),
            nn.BatchNorm1d(hidden_dim),
            nn.ReLU(inplace=True),
            nn.Linear(hidden_dim, out_dim),
        )

    def forward(self, h: Tensor) -> Tensor:
        return self.net(h)


class SSLModel(nn.Module):
    """Encoder ``f`` and projection head ``g``: ``forward(x) -> (h, z)``."""

    def __init__(self, encoder: nn.Module, feature_dim: int, hidden_dim: int, out_dim: int) -> None:
        super().__init__()
        self.encoder = encoder
        self.head = ProjectionHead(feature_dim, hidden_dim, out_dim)
        self.feature_dim = feature_dim

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        h = self.encoder(x)
        return h, self.head(h)


def count_parameters(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())

