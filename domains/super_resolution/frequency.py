"""Positives and hard negatives built in frequency space (PCL-SR, Wu et al., TNNLS 2023, sec. III).

An SR output should be rich in high frequencies like the HR image, not smooth like its degraded
versions. So, per HR image ``[B, 3, H, W]`` in ``[0, 1]`` (each variant quantised to 8 bits, as
the official code does):

* positives: ``n_sharp`` sharpened copies (kornia ``sharpness``, factor ~ U(sharp_min, sharp_max)),
  which boost high frequencies. The official scripts draw U(0.5, 3.0); kornia's factor < 1 blends
  towards a smoothed image, so such a "positive" loses high frequencies. The default here is
  U(1.0, 3.0); ``frequency.sharp_min=0.5`` restores the official range;
* negatives, all missing high frequencies:
  - ``n_blur`` anisotropic Gaussian blurs (kernel sizes from {3, 5, 7, 9, 11}, sigmas ~ U(0.1, 2.0));
  - ``n_lowpass`` ideal-ish low-pass filters in the Fourier domain: a Gaussian mask
    ``exp(-(f / f_c)^2 / 2)`` on the radial frequency ``f`` (cycles/pixel), ``f_c ~ U(0.05, 0.2)``;
  - the LR input upsampled by bicubic interpolation;
  - ``n_mix`` mixtures ``a x + (1 - a) y`` of two of the above, ``a ~ U(0.25, 0.75)``.

All randomness comes from the :class:`Draws` (or generator) passed in, so variants are reproducible;
with ``Draws`` every draw is made for the whole global batch, so an image's variants do not depend on
how the batch is split over ranks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from contrasuite.core.task.errors import ConfigValueError
from contrasuite.domains.super_resolution.imresize import imresize, quantize

BLUR_KERNELS = (3, 5, 7, 9, 11)


@dataclass
class Draws:
    """Random draws for the images ``rows`` of a global batch of ``total``: each draw is made for all
    ``total`` images and the ``rows`` part kept (``generator=None``: the global RNG)."""

    generator: torch.Generator | None
    total: int
    rows: slice = field(default_factory=lambda: slice(None))

    def uniform(self, low: float, high: float, per_image: int = 1) -> Tensor:
        """``[images, per_image]`` float32 values ~ U(low, high)."""
        u = torch.rand(self.total, per_image, generator=self.generator, dtype=torch.float32)
        return (low + (high - low) * u)[self.rows]


RandomSource = Draws | torch.Generator | None


def _draws(source: RandomSource, hr: Tensor) -> Draws:
    return source if isinstance(source, Draws) else Draws(source, hr.shape[0])


def sharpen(hr: Tensor, low: float, high: float, source: RandomSource) -> Tensor:
    """kornia ``sharpness`` with a per-image factor ~ U(low, high)."""
    from kornia.enhance import sharpness

    factor = _draws(source, hr).uniform(low, high).flatten().to(hr.device, hr.dtype)
    return sharpness(hr, factor)


def gaussian_blur(hr: Tensor, sigma_range: tuple[float, float], source: RandomSource) -> Tensor:
    """Anisotropic Gaussian blur: one kernel size pair per call, per-image sigmas."""
    from kornia.filters import gaussian_blur2d

    draws = _draws(source, hr)
    k = torch.randint(len(BLUR_KERNELS), (2,), generator=draws.generator)
    ksize = (BLUR_KERNELS[int(k[0])], BLUR_KERNELS[int(k[1])])
    sigma = draws.uniform(*sigma_range, per_image=2).to(hr.device, hr.dtype)
    return gaussian_blur2d(hr, ksize, sigma, border_type="reflect")


def fourier_lowpass(hr: Tensor, cutoff_range: tuple[float, float], source: RandomSource) -> Tensor:
    """Gaussian low-pass in the Fourier domain with per-image cutoff (cycles/pixel)."""
    h, w = hr.shape[-2:]
    fy = torch.fft.fftfreq(h, device=hr.device)[:, None]
    fx = torch.fft.rfftfreq(w, device=hr.device)[None, :]
    radius2 = fy**2 + fx**2
    cutoff = _draws(source, hr).uniform(*cutoff_range).to(hr.device).view(-1, 1, 1, 1)
    mask = torch.exp(-radius2 / (2 * cutoff**2))
    spectrum = torch.fft.rfft2(hr.float()) * mask
    return torch.fft.irfft2(spectrum, s=(h, w)).to(hr.dtype)


@dataclass
class FrequencyConfig:
    """How many variants of each kind per HR image, and their ranges (official PCL-SR scripts except sharp_min)."""

    n_sharp: int = 3
    sharp_min: float = 1.0
    sharp_max: float = 3.0
    n_blur: int = 3
    blur_sigma_min: float = 0.1
    blur_sigma_max: float = 2.0
    n_lowpass: int = 1
    lowpass_cutoff_min: float = 0.05
    lowpass_cutoff_max: float = 0.2
    use_upsampled_lr: bool = True
    n_mix: int = 1

    def __post_init__(self) -> None:
        for key in ("n_sharp", "n_blur", "n_lowpass", "n_mix"):
            if getattr(self, key) < 0:
                raise ConfigValueError(f"frequency.{key} must be >= 0, got {getattr(self, key)}")
        if self.n_mix and self.n_blur + self.n_lowpass + int(self.use_upsampled_lr) < 2:
            raise ValueError("frequency.n_mix > 0 needs at least two other negative kinds to mix")
        if self.n_blur + self.n_lowpass + int(self.use_upsampled_lr) + self.n_mix == 0:
            raise ValueError("frequency: no negatives; enable at least one kind")


def positives(hr: Tensor, cfg: FrequencyConfig, source: RandomSource) -> Tensor:
    """Sharpened positive variants, ``[n_sharp, B, C, H, W]`` (empty first dim when ``n_sharp = 0``)."""
    out = [quantize(sharpen(hr, cfg.sharp_min, cfg.sharp_max, source)) for _ in range(cfg.n_sharp)]
    return torch.stack(out) if out else hr.new_empty(0, *hr.shape)


def negatives(hr: Tensor, lr: Tensor | None, scale: int, cfg: FrequencyConfig, source: RandomSource) -> Tensor:
    """Frequency-space hard negatives of each HR image, ``[K, B, C, H, W]`` (module docstring)."""
    draws = _draws(source, hr)
    out = [gaussian_blur(hr, (cfg.blur_sigma_min, cfg.blur_sigma_max), draws) for _ in range(cfg.n_blur)]
    out += [fourier_lowpass(hr, (cfg.lowpass_cutoff_min, cfg.lowpass_cutoff_max), draws) for _ in range(cfg.n_lowpass)]
    if cfg.use_upsampled_lr:
        if lr is None:
            raise ValueError("frequency.use_upsampled_lr needs the LR batch")
        out.append(imresize(lr, float(scale)).to(hr.dtype))
    base = len(out)
    for _ in range(cfg.n_mix):
        i, j = torch.randperm(base, generator=draws.generator)[:2].tolist()
        a = draws.uniform(0.25, 0.75).to(hr.device, hr.dtype).view(-1, 1, 1, 1)
        out.append(a * out[i] + (1 - a) * out[j])
    return torch.stack([quantize(x) for x in out])
