"""MATLAB-compatible bicubic ``imresize`` in torch, antialiasing included.

MATLAB's ``imresize(img, 1/s, 'bicubic')`` is the degradation behind every published SISR table
(SRCNN, EDSR, RCAN, PCL-SR evaluate on LR images made with it). For output pixel ``i`` (1-based) of
a dimension resized by factor ``r = out/in``:

    u_i = i / r + (1 - 1/r) / 2                       (position in input coordinates)
    w_ij ∝ k(u_i - j),  j = floor(u_i - W/2) + 0 .. ceil(W) + 1

with Keys' cubic kernel ``k`` (a = -0.5, support 4). When shrinking (``r < 1``) the kernel is
stretched to antialias: ``k_r(x) = r * k(r x)`` with width ``W = 4 / r``. Weights are normalised
per output pixel and out-of-range ``j`` are mirrored (``1, ..., n, n, ..., 1``), as in MATLAB.

Each dimension is a dense ``[out, in]`` matrix, so ``imresize(x) = W_h @ x @ W_w^T`` in float64.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def cubic(x: Tensor) -> Tensor:
    """Keys' cubic convolution kernel with ``a = -0.5`` (MATLAB's ``cubic``)."""
    ax = x.abs()
    ax2, ax3 = ax**2, ax**3
    near = (1.5 * ax3 - 2.5 * ax2 + 1) * (ax <= 1)
    far = (-0.5 * ax3 + 2.5 * ax2 - 4 * ax + 2) * ((ax > 1) & (ax <= 2))
    return near + far


def resize_matrix(in_len: int, out_len: int, scale: float, antialias: bool = True) -> Tensor:
    """The ``[out_len, in_len]`` float64 matrix that resizes one dimension (module docstring)."""
    if in_len < 1 or out_len < 1:
        raise ValueError(f"lengths must be positive, got in_len={in_len}, out_len={out_len}")
    shrink = scale < 1 and antialias
    width = 4.0 / scale if shrink else 4.0
    x = torch.arange(1, out_len + 1, dtype=torch.float64)
    u = x / scale + 0.5 * (1 - 1 / scale)
    left = torch.floor(u - width / 2)
    taps = math.ceil(width) + 2
    idx = left[:, None] + torch.arange(taps, dtype=torch.float64)[None, :]
    dist = u[:, None] - idx
    w = scale * cubic(scale * dist) if shrink else cubic(dist)
    w = w / w.sum(dim=1, keepdim=True)
    # Mirror 1-based indices into [1, in_len] with MATLAB's symmetric padding (edge repeated).
    period = 2 * in_len
    j = torch.remainder(idx.long() - 1, period)
    j = torch.where(j >= in_len, period - 1 - j, j)
    mat = torch.zeros(out_len, in_len, dtype=torch.float64)
    return mat.scatter_add_(1, j, w)


def imresize(image: Tensor, scale: float | None = None, size: tuple[int, int] | None = None) -> Tensor:
    """Resize ``image [..., H, W]`` by ``scale`` (or to ``size``) like MATLAB ``imresize(..., 'bicubic')``.

    Computed in float64 and returned in the input's floating dtype (float64 for integer input);
    no rounding or clamping is applied: quantise with :func:`quantize` for uint8 semantics.
    """
    if image.dim() < 2:
        raise ValueError(f"image must be [..., H, W], got shape {tuple(image.shape)}")
    h, w = image.shape[-2:]
    if size is None:
        if scale is None or scale <= 0:
            raise ValueError(f"give a positive scale or a size, got scale={scale}, size={size}")
        size = (math.ceil(h * scale), math.ceil(w * scale))
        scales = (scale, scale)
    else:
        scales = (size[0] / h, size[1] / w)
    out_dtype = image.dtype if image.is_floating_point() else torch.float64
    mh = resize_matrix(h, size[0], scales[0]).to(image.device)
    mw = resize_matrix(w, size[1], scales[1]).to(image.device)
    out = mh @ image.to(torch.float64) @ mw.T
    return out.to(out_dtype)


def quantize(image: Tensor, levels: int = 255) -> Tensor:
    """Round ``image`` in ``[0, 1]`` to ``levels`` steps, as saving to uint8 does (clamped)."""
    return torch.round(image.clamp(0, 1) * levels) / levels
