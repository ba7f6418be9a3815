"""EDSR-baseline (the generator) and PCL-SR's wavelet discriminator (the embedding network).

EDSR-baseline (Lim et al., "Enhanced Deep Residual Networks for Single Image Super-Resolution",
CVPRW 2017): mean shift, a 3x3 head, 16 residual blocks ``x + s * conv(relu(conv(x)))`` of 64
channels (no BatchNorm, ``res_scale`` s = 1), a 3x3 body conv with a global skip, a pixel-shuffle
upsampler (one x2 stage per factor 2, one x3 stage for x3) and a 3x3 tail.

The discriminator follows PCL-SR (Wu, Jiang, Liu, TNNLS 2023, arXiv 2111.13924, official
``src/model/discriminator``): a one-level Haar transform keeps the three detail sub-bands (9
channels at half resolution), then 8 conv3x3-BN-LeakyReLU(0.2) blocks with channels
64, 64/s2, 128, 128/s2, 256, 256/s2, 512, 512/s2. Its patch head average-pools to 4x4 and maps
each cell to one logit (16 per image). The contrastive embedding ``phi`` is block ``embed_layer``'s
BatchNorm output (before the activation; block 4 = 256 channels at 1/8 of the input size).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

RGB_MEAN = (0.4488, 0.4371, 0.4040)
"""DIV2K mean colour that EDSR subtracts before the head and adds after the tail."""


class ResBlock(nn.Module):
    """``x + res_scale * conv(relu(conv(x)))``."""

    def __init__(self, channels: int, res_scale: float) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1)
        self.res_scale = res_scale

    def forward(self, x: Tensor) -> Tensor:
        return x + self.res_scale * self.conv2(F.relu(self.conv1(x)))


def upsampler(scale: int, channels: int) -> nn.Sequential:
    """Pixel-shuffle stages: ``log2(scale)`` x2 stages, or one x3 stage."""
    if scale & (scale - 1) == 0:
        factors = [2] * int(math.log2(scale))
    elif scale == 3:
        factors = [3]
    else:
        raise ValueError(f"scale must be a power of 2 or 3, got {scale}")
    layers: list[nn.Module] = []
    for f in factors:
        layers += [nn.Conv2d(channels, channels * f * f, 3, padding=1), nn.PixelShuffle(f)]
    return nn.Sequential(*layers)


class EDSR(nn.Module):
    """EDSR on RGB; defaults are EDSR-baseline (16 blocks, 64 channels, res_scale 1). Input/output in ``[0, 1]``."""

    def __init__(self, scale: int, n_resblocks: int = 16, n_feats: int = 64, res_scale: float = 1.0) -> None:
        super().__init__()
        self.scale = scale
        self.register_buffer("mean", torch.tensor(RGB_MEAN).view(1, 3, 1, 1))
        self.head = nn.Conv2d(3, n_feats, 3, padding=1)
        self.body = nn.Sequential(*[ResBlock(n_feats, res_scale) for _ in range(n_resblocks)])
        self.body_tail = nn.Conv2d(n_feats, n_feats, 3, padding=1)
        self.upsample = upsampler(scale, n_feats)
        self.tail = nn.Conv2d(n_feats, 3, 3, padding=1)

    def forward(self, lr: Tensor) -> Tensor:
        x = self.head(lr - self.mean)
        x = x + self.body_tail(self.body(x))
        return self.tail(self.upsample(x)) + self.mean


def haar_details(x: Tensor) -> Tensor:
    """One-level orthonormal Haar transform of ``[B, C, H, W]`` (H, W even): the LH, HL, HH sub-bands, ``[B, 3C, H/2, W/2]``."""
    if x.shape[-1] % 2 or x.shape[-2] % 2:
        raise ValueError(f"haar_details needs even H and W, got {tuple(x.shape[-2:])}")
    a, b = x[..., 0::2, 0::2], x[..., 0::2, 1::2]
    c, d = x[..., 1::2, 0::2], x[..., 1::2, 1::2]
    lh = (a - b + c - d) / 2
    hl = (a + b - c - d) / 2
    hh = (a - b - c + d) / 2
    return torch.cat([lh, hl, hh], dim=1)


DISC_CHANNELS = (64, 64, 128, 128, 256, 256, 512, 512)


class WaveletDiscriminator(nn.Module):
    """PCL-SR's discriminator on RGB (module docstring): patch logits and the contrastive embedding.

    ``channel_divisor`` divides every width (1 = the paper's network; larger values for tests).
    """

    def __init__(self, embed_layer: int = 4, channel_divisor: int = 1) -> None:
        super().__init__()
        if not 0 <= embed_layer < len(DISC_CHANNELS):
            raise ValueError(f"embed_layer must be in [0, {len(DISC_CHANNELS) - 1}], got {embed_layer}")
        self.embed_layer = embed_layer
        convs, norms = [], []
        c_in = 9
        for i, c in enumerate(DISC_CHANNELS):
            c = max(1, c // channel_divisor)
            convs.append(nn.Conv2d(c_in, c, 3, stride=2 if i % 2 else 1, padding=1))
            norms.append(nn.BatchNorm2d(c))
            c_in = c
        self.convs, self.norms = nn.ModuleList(convs), nn.ModuleList(norms)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(4), nn.Conv2d(c_in, 1, 1))

    def _blocks(self, x: Tensor, stop: int | None) -> tuple[Tensor, Tensor | None]:
        x = haar_details(x)
        feature = None
        for i, (conv, norm) in enumerate(zip(self.convs, self.norms)):
            pre = norm(conv(x))
            if i == self.embed_layer:
                feature = pre
                if stop == i:
                    return x, feature
            x = F.leaky_relu(pre, 0.2)
        return x, feature

    def forward(self, x: Tensor) -> Tensor:
        """Patch logits ``[B, 16]``."""
        x, _ = self._blocks(x, stop=None)
        return self.head(x).flatten(1)

    def embed(self, x: Tensor) -> Tensor:
        """``phi(x)`` flattened so that a dot product is PCL-SR's similarity, ``[B, C*h*w]``.

        PCL-SR compares feature maps by the channel-wise cosine averaged over positions,
        ``s(a, b) = mean_hw <phi(a)_hw / |phi(a)_hw|, phi(b)_hw / |phi(b)_hw|>``. Normalising each
        position and dividing by ``sqrt(h w)`` gives unit vectors whose dot (and cosine) equals ``s``.
        """
        _, f = self._blocks(x, stop=self.embed_layer)
        f = F.normalize(f.float(), dim=1)
        return f.flatten(1) / math.sqrt(f.shape[-2] * f.shape[-1])
