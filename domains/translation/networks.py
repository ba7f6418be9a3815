"""CUT's networks (Park et al., ECCV 2020, after CycleGAN's): ResNet generator, PatchGAN, patch MLP head.

* :class:`ResnetGenerator`: ``c7s1-ngf, d(2ngf), d(4ngf), R(4ngf) x n_blocks, u(2ngf), u(ngf), c7s1-3``
  with instance norm, reflection padding and tanh. Anti-aliased down-sampling (stride-1 conv, then a
  [1, 2, 1]^2 blur with stride 2; Zhang, ICML 2019) as CUT's default; up-sampling is bilinear x2 then a
  conv, which is CUT's default up-sampling too (its ``Upsample``, a transposed convolution with the fixed
  ``[1, 3, 3, 1]^2 / 16`` filter after replicate padding, computes the same bilinear interpolation); CUT's
  ``--no_antialias_up`` (a learned transposed convolution) is not built. The layers form one
  ``nn.Sequential`` indexed like CUT's, so ``nce_layers = 0, 4, 8, 12, 16`` are the padded input, the
  first and second down-sampling convolutions, and the 1st and 5th residual blocks. The paper uses 9 blocks
  at 256 px; fewer blocks suit smaller images (4 at 64 px here). Its 3x3 stride-1 convolutions (the blocks', the
  anti-aliased down-sampling and the up-sampling ones) run as Winograd products on the CPU in fp32 where those
  pay (:mod:`~contrasuite.domains.winograd_conv`: 128+ channels in and out, 32 x 32+ maps).
* :class:`PatchDiscriminator`: the 70x70 PatchGAN (``n_layers = 3``), instance norm, LeakyReLU 0.2,
  anti-aliased as CUT's default (each stride-2 convolution becomes a stride-1 convolution, the
  activation, then the same blur with stride 2; ``antialias=False`` is CUT's ``--no_antialias``).
* :class:`PatchHead`: per layer, ``Linear(C_l, 256) - ReLU - Linear(256, 256)`` on sampled patch
  features (CUT's ``mlp_sample``), built up front from the generator's channel counts, so no
  data-dependent initialisation pass is needed.
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from contrasuite.domains.winograd_conv import WinogradConv2d


GLOBAL_SKIP_CLAMP = 0.995
"""Inputs are clamped to this before ``atanh`` in the generator's global skip (atanh(1) is infinite)."""


class BlurDownsample(nn.Module):
    """Depthwise ``[1, 2, 1]^T [1, 2, 1] / 16`` blur with stride 2 after reflection padding."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        k = torch.tensor([1.0, 2.0, 1.0])
        kernel = (k[:, None] * k[None, :]) / 16.0
        self.register_buffer("kernel", kernel.expand(channels, 1, 3, 3).contiguous(), persistent=False)
        self.channels = channels

    def forward(self, x: Tensor) -> Tensor:
        x = F.pad(x, (1, 1, 1, 1), mode="reflect")
        return F.conv2d(x, self.kernel.to(x.dtype), stride=2, groups=self.channels)


class ResnetBlock(nn.Module):
    """``x + (pad-conv3-IN-ReLU-pad-conv3-IN)(x)``."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.ReflectionPad2d(1), WinogradConv2d(dim, dim), nn.InstanceNorm2d(dim), nn.ReLU(True),
            nn.ReflectionPad2d(1), WinogradConv2d(dim, dim), nn.InstanceNorm2d(dim),
        )

    def forward(self, x: Tensor) -> Tensor:
        return x + self.body(x)


def init_weights(module: nn.Module, gain: float = 0.02) -> None:
    """CUT's default init: Xavier-normal convolutions/linears with gain 0.02, zero biases."""
    for m in module.modules():
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            nn.init.xavier_normal_(m.weight, gain=gain)
            if m.bias is not None:
                nn.init.zeros_(m.bias)


class ResnetGenerator(nn.Module):
    """See the module docstring; ``encode(x, layers)`` returns the feature maps at ``layers``."""

    def __init__(self, ngf: int = 64, n_blocks: int = 9, antialias: bool = True, residual: bool = False) -> None:
        super().__init__()
        self.residual = residual
        if n_blocks < 1:
            raise ValueError(f"generator n_blocks must be >= 1, got {n_blocks}")
        layers: list[nn.Module] = [nn.ReflectionPad2d(3), nn.Conv2d(3, ngf, 7), nn.InstanceNorm2d(ngf), nn.ReLU(True)]
        self.channels: list[int] = [3, ngf, ngf, ngf]
        for mult in (1, 2):
            c_in, c_out = ngf * mult, ngf * mult * 2
            if antialias:
                layers += [WinogradConv2d(c_in, c_out, padding=1), nn.InstanceNorm2d(c_out), nn.ReLU(True),
                           BlurDownsample(c_out)]
            else:
                layers += [nn.Conv2d(c_in, c_out, 3, stride=2, padding=1), nn.InstanceNorm2d(c_out), nn.ReLU(True), nn.Identity()]
            self.channels += [c_out] * 4
        for _ in range(n_blocks):
            layers.append(ResnetBlock(ngf * 4))
            self.channels.append(ngf * 4)
        self.n_encoder_layers = len(layers)
        for mult in (4, 2):
            c_in, c_out = ngf * mult, ngf * mult // 2
            layers += [nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False),
                       WinogradConv2d(c_in, c_out, padding=1), nn.InstanceNorm2d(c_out), nn.ReLU(True)]
            self.channels += [c_in, c_out, c_out, c_out]
        layers += [nn.ReflectionPad2d(3), nn.Conv2d(ngf, 3, 7), nn.Tanh()]
        self.channels += [ngf, 3, 3]
        self.model = nn.Sequential(*layers)
        init_weights(self)

    def forward(self, x: Tensor) -> Tensor:
        return self.forward_and_encode(x, ())[0]

    def forward_and_encode(self, x: Tensor, layers: Sequence[int]) -> tuple[Tensor, list[Tensor]]:
        """``(self(x), self.encode(x, layers))`` in one pass: the features are those the translation computes."""
        feats = self._walk(x, layers, to_end=True)
        h = feats.pop(len(self.model) - 1)
        return h, [feats[i] for i in layers]

    def encode(self, x: Tensor, layers: Sequence[int]) -> list[Tensor]:
        """Outputs of ``self.model[l]`` for each ``l`` in ``layers`` (ascending), stopping after the last."""
        feats = self._walk(x, layers, to_end=False)
        return [feats[i] for i in layers]

    def _walk(self, x: Tensor, layers: Sequence[int], to_end: bool) -> dict[int, Tensor]:
        """Run the layers on ``x``, keeping the outputs at ``layers`` and, ``to_end``, the generator's output
        (under the last index; the global skip applied when ``residual``)."""
        wanted = sorted(set(layers))
        if wanted and (wanted[0] < 0 or wanted[-1] >= self.n_encoder_layers):
            raise ValueError(f"nce_layers must lie in [0, {self.n_encoder_layers - 1}] (the encoder), got {list(layers)}")
        last = len(self.model) - 1 if to_end else (wanted[-1] if wanted else -1)
        feats: dict[int, Tensor] = {}
        h = x
        for i, layer in enumerate(self.model):
            if i > last:
                break
            if i == len(self.model) - 1 and self.residual:
                # Global skip: tanh(h + atanh(x)), so the generator starts near the identity and learns a change.
                h = torch.tanh(h + torch.atanh(x.clamp(-GLOBAL_SKIP_CLAMP, GLOBAL_SKIP_CLAMP)))
            else:
                h = layer(h)
            if i in wanted or i == last:
                feats[i] = h
        return feats


def default_nce_layers(n_blocks: int) -> list[int]:
    """CUT's ``0, 4, 8, 12, 16`` (input, both down-sampling convs, 1st and 5th block), clipped to ``n_blocks``."""
    return [0, 4, 8, 12, 12 + min(4, n_blocks - 1)] if n_blocks > 1 else [0, 4, 8, 12]


class PatchDiscriminator(nn.Module):
    """70x70 PatchGAN: ``C64 (no norm) - C128 - C256 - C512 (stride 1) - conv to 1``, 4x4 kernels.

    ``antialias`` (CUT's default): every stride-2 convolution is a stride-1 convolution followed by
    its norm and LeakyReLU, then :class:`BlurDownsample`; the map is as large as without it (30x30 at
    256 px), and the layers are indexed as in CUT's ``NLayerDiscriminator``, so its weights load by name.
    """

    def __init__(self, ndf: int = 64, n_layers: int = 3, antialias: bool = True) -> None:
        super().__init__()
        self.antialias = antialias

        def down(c_in: int, c_out: int, norm: bool) -> list[nn.Module]:
            conv = nn.Conv2d(c_in, c_out, 4, stride=1 if antialias else 2, padding=1)
            block = [conv, *([nn.InstanceNorm2d(c_out)] if norm else []), nn.LeakyReLU(0.2, True)]
            return block + [BlurDownsample(c_out)] if antialias else block

        layers: list[nn.Module] = down(3, ndf, norm=False)
        mult = 1
        for n in range(1, n_layers):
            prev, mult = mult, min(2**n, 8)
            layers += down(ndf * prev, ndf * mult, norm=True)
        prev, mult = mult, min(2**n_layers, 8)
        layers += [nn.Conv2d(ndf * prev, ndf * mult, 4, stride=1, padding=1), nn.InstanceNorm2d(ndf * mult),
                   nn.LeakyReLU(0.2, True)]
        layers.append(nn.Conv2d(ndf * mult, 1, 4, stride=1, padding=1))
        self.model = nn.Sequential(*layers)
        init_weights(self)

    def forward(self, x: Tensor) -> Tensor:
        return self.model(x)


class PatchHead(nn.Module):
    """Per-layer two-layer MLP on patch features, then L2 normalisation (``/ (norm + 1e-7)`` as in CUT)."""

    def __init__(self, in_channels: Sequence[int], dim: int = 256, use_mlp: bool = True) -> None:
        super().__init__()
        self.use_mlp = use_mlp
        self.mlps = nn.ModuleList(
            nn.Sequential(nn.Linear(c, dim), nn.ReLU(), nn.Linear(dim, dim)) if use_mlp else nn.Identity()
            for c in in_channels
        )
        init_weights(self)

    def forward(self, patches: Sequence[Tensor]) -> list[Tensor]:
        """``patches[l]``: ``[B, S, C_l]`` -> ``[B, S, dim]`` unit vectors."""
        out = []
        for mlp, x in zip(self.mlps, patches):
            z = mlp(x)
            out.append(z / (z.norm(dim=-1, keepdim=True) + 1e-7))
        return out


def sample_locations(feat: Tensor, num_patches: int, generator: torch.Generator | None = None) -> Tensor:
    """``num_patches`` distinct flat positions of ``feat [B, C, H, W]`` (all of them if fewer), shared by the batch."""
    hw = feat.shape[-2] * feat.shape[-1]
    idx = torch.randperm(hw, generator=generator)[: min(num_patches, hw)]
    return idx.to(feat.device)


def gather_patches(feat: Tensor, idx: Tensor) -> Tensor:
    """``feat [B, C, H, W]`` at flat positions ``idx [S]`` -> ``[B, S, C]``."""
    return feat.flatten(2)[:, :, idx].transpose(1, 2)


def reflect_index(n: int, size: int, like: Tensor) -> Tensor:
    """``0 .. size-1`` as indices into an axis of length ``n``, reflected past its end (``F.pad``'s reflect mode),
    on ``like``'s device: made from it (not ``arange(device=...)``), so a traced TorchScript runs on any device."""
    i = like.new_ones(size, dtype=torch.long).cumsum(0) - 1
    return torch.where(i < n, i, 2 * (n - 1) - i)


def translate_any_size(generator: nn.Module, x: Tensor, multiple: int = 4) -> Tensor:
    """``generator(x)`` for any ``H, W`` (at least 5 for the ResNet generator, so its deepest map has more than one
    pixel): reflection-pad bottom and right to a multiple of ``multiple`` (two 2x down-samplings), crop back.

    The pad is a gather rather than ``F.pad``, with the padded size written as ``multiple * ceil(H / multiple)``:
    that way ``torch.export`` proves the shapes for every ``H, W`` and an export keeps them free."""
    h, w = x.shape[-2:]
    rows = reflect_index(h, multiple * ((h + multiple - 1) // multiple), x)
    cols = reflect_index(w, multiple * ((w + multiple - 1) // multiple), x)
    return generator(x.index_select(-2, rows).index_select(-1, cols))[..., :h, :w]
