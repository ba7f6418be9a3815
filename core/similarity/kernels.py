"""Kernels on the unit hypersphere for KCL (Koromilas et al., ICML 2024), computed in fp32.

Embeddings are L2-normalised, so the squared Euclidean distance is ``d^2 = 2 - 2 cos``; taking it
from the cosine keeps the gradient finite at ``d = 0`` (``torch.pdist`` is not differentiable there).

* Gaussian: ``k(d) = exp(-t d^2)`` (KCL's default, ``t = 2``).
* Logarithmic: ``k(d) = -log(1 + t d^2)``.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from contrasuite.core.numerics import full_precision, upcast
from contrasuite.core.similarity import cosine


def squared_distance(anchors: Tensor, candidates: Tensor) -> Tensor:
    """``[N, M]`` squared Euclidean distances between the L2-normalised rows, ``2 - 2 cos``, >= 0."""
    return (2.0 - 2.0 * cosine(anchors, candidates)).clamp_min(0.0)


def paired_squared_distance(x: Tensor, y: Tensor) -> Tensor:
    """``[N]`` squared distances between normalised rows ``x_i`` and ``y_i``, ``2 - 2 cos``, >= 0."""
    with full_precision(x):
        cos = (F.normalize(upcast(x), dim=-1) * F.normalize(upcast(y), dim=-1)).sum(dim=-1)
    return (2.0 - 2.0 * cos).clamp_min(0.0)


def gaussian_kernel(sq_dist: Tensor, t: float) -> Tensor:
    """``exp(-t d^2)`` from squared distances."""
    return torch.exp(-t * sq_dist)


def log_kernel(sq_dist: Tensor, t: float) -> Tensor:
    """``-log(1 + t d^2)`` from squared distances."""
    return -torch.log1p(t * sq_dist)


KERNELS: dict[str, Callable[[Tensor, float], Tensor]] = {"gaussian": gaussian_kernel, "log": log_kernel}


def get_kernel(name: str) -> Callable[[Tensor, float], Tensor]:
    """Look a kernel up by name; the error lists the known names."""
    try:
        return KERNELS[name]
    except KeyError:
        raise ValueError(f"unknown kernel {name!r}; known: {sorted(KERNELS)}") from None
