"""SSIM (Wang, Bovik, Sheikh and Simoncelli, IEEE TIP 2004), shared by super_resolution and translation.

For images ``x, y`` and the 11x11 Gaussian window ``w`` (sigma 1.5, MATLAB ``fspecial('gaussian')``)
over the valid region:

    SSIM = ((2 mu_x mu_y + C1)(2 s_xy + C2)) / ((mu_x^2 + mu_y^2 + C1)(s_xx + s_yy + C2)),
    C1 = (0.01 L)^2, C2 = (0.03 L)^2, L the peak value (255 for Y in [16, 235], 1 for RGB in [0, 1]).

The five local moments (``mu_x, mu_y, E[x^2], E[y^2], E[xy]``) are one grouped filtering with the window
as two 1-D passes (22 instead of 121 products per pixel), in float64: the variances ``E[x^2] - mu^2``
cancel too much in float32.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def gaussian_1d(size: int = 11, sigma: float = 1.5) -> Tensor:
    """The normalised 1-D Gaussian ``[size]`` in float64 whose outer product is the SSIM window."""
    x = torch.arange(size, dtype=torch.float64) - (size - 1) / 2
    g = torch.exp(-(x**2) / (2 * sigma**2))
    return g / g.sum()


def gaussian_window(size: int = 11, sigma: float = 1.5) -> Tensor:
    """The normalised 2-D window ``[size, size]`` in float64 (the direct form, for checks and benches)."""
    g = gaussian_1d(size, sigma)
    return g[:, None] * g[None, :]


def gaussian_filter(x: Tensor, g: Tensor) -> Tensor:
    """Valid 2-D filtering of every channel of ``[B, C, H, W]`` by ``g``'s outer product, as two 1-D passes."""
    c = x.shape[1]
    x = F.conv2d(x, g.view(1, 1, -1, 1).expand(c, 1, -1, 1), groups=c)
    return F.conv2d(x, g.view(1, 1, 1, -1).expand(c, 1, 1, -1), groups=c)


def ssim_map(x: Tensor, y: Tensor, peak: float) -> Tensor:
    """The local SSIM ``[B, C, H - 10, W - 10]`` of ``[B, C, H, W]`` images with values up to ``peak``."""
    x, y = x.double(), y.double()
    moments = gaussian_filter(torch.cat([x, y, x * x, y * y, x * y], dim=1), gaussian_1d().to(x.device))
    mu_x, mu_y, exx, eyy, exy = moments.split(x.shape[1], dim=1)
    sxx, syy, sxy = exx - mu_x**2, eyy - mu_y**2, exy - mu_x * mu_y
    c1, c2 = (0.01 * peak) ** 2, (0.03 * peak) ** 2
    return ((2 * mu_x * mu_y + c1) * (2 * sxy + c2)) / ((mu_x**2 + mu_y**2 + c1) * (sxx + syy + c2))
