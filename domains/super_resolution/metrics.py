"""PSNR and SSIM on the Y channel with the border cropped, the SISR evaluation convention.

Y is ITU-R BT.601 luma as MATLAB's ``rgb2ycbcr`` computes it, on RGB in ``[0, 1]``:

    Y = 16 + (65.481 R + 128.553 G + 24.966 B)        (in [16, 235] on the 0-255 scale)

``scale`` pixels are cropped from every side before measuring (EDSR, RCAN, PCL-SR's
``test_psnr_ssim.py``). PSNR uses peak 255; SSIM is Wang et al. (2004) with an 11x11 Gaussian
window (sigma 1.5), ``C1 = (0.01 L)^2``, ``C2 = (0.03 L)^2``, ``L = 255``, over the valid region.
A greyscale image (one channel) is used as it is, Y = 255 I, as the MATLAB evaluation scripts
skip ``rgb2ycbcr`` for single-channel images (this is what reproduces the published Set14 numbers,
whose ``bridge`` is greyscale).
"""

from __future__ import annotations

import torch
from torch import Tensor

from contrasuite.domains.ssim import ssim_map

_Y_WEIGHTS = (65.481, 128.553, 24.966)


def rgb_to_y(image: Tensor) -> Tensor:
    """``[..., C, H, W]`` RGB (C=3) or grey (C=1) in ``[0, 1]`` -> Y ``[..., H, W]`` on the 0-255 scale."""
    c = image.shape[-3] if image.dim() >= 3 else 0
    image = image.to(torch.float64)
    if c == 3:
        w = torch.tensor(_Y_WEIGHTS, dtype=torch.float64, device=image.device)
        return 16.0 + torch.einsum("...chw,c->...hw", image, w)
    if c == 1:
        return 255.0 * image[..., 0, :, :]
    raise ValueError(f"image must be [..., 3 or 1, H, W], got shape {tuple(image.shape)}")


def crop_border(image: Tensor, border: int) -> Tensor:
    """Remove ``border`` pixels from each side of the last two dimensions."""
    if border == 0:
        return image
    if image.shape[-1] <= 2 * border or image.shape[-2] <= 2 * border:
        raise ValueError(f"image {tuple(image.shape)} is too small to crop a border of {border}")
    return image[..., border:-border, border:-border]


def _check_pair(sr: Tensor, hr: Tensor) -> None:
    if sr.shape != hr.shape:
        raise ValueError(f"sr and hr must have the same shape, got {tuple(sr.shape)} and {tuple(hr.shape)}")


def psnr_y(sr: Tensor, hr: Tensor, border: int) -> Tensor:
    """PSNR (dB) on Y between ``sr`` and ``hr`` ``[..., C, H, W]`` in ``[0, 1]``; one value per image."""
    _check_pair(sr, hr)
    y_sr, y_hr = crop_border(rgb_to_y(sr), border), crop_border(rgb_to_y(hr), border)
    mse = (y_sr - y_hr).pow(2).mean(dim=(-2, -1))
    return 10.0 * torch.log10(255.0**2 / mse.clamp_min(1e-12))


def ssim_y(sr: Tensor, hr: Tensor, border: int) -> Tensor:
    """SSIM on Y (module docstring; :mod:`contrasuite.domains.ssim`, peak 255) between ``sr`` and ``hr``
    ``[..., C, H, W]``; one value per image."""
    _check_pair(sr, hr)
    lead = sr.shape[:-3]
    y1, y2 = crop_border(rgb_to_y(sr), border), crop_border(rgb_to_y(hr), border)
    y1, y2 = y1.reshape(-1, 1, *y1.shape[-2:]), y2.reshape(-1, 1, *y2.shape[-2:])
    return ssim_map(y1, y2, 255.0).mean(dim=(-3, -2, -1)).reshape(lead)
