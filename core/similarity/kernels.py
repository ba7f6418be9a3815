"""Kernels on the unit hypersphere for KCL (Koromilas et al., ICML 2024), computed in fp32.

Embeddings are L2-normalised, so the squared Euclidean distance is ``d^2 = 2 - 2 cos``; taking it
from the cosine keeps the gradient finite at ``d = 0`` (``torch.pdist`` is not differentiable there).

* Gaussian: ``k(d) = exp(-t d^2)`` (KCL's default, ``t = 2``).
* Logarithmic: ``k(d) = -log(1 + t d^2)``.

Each kernel is a function of ``u = t d^2``, written in place on a buffer, together with its
derivative ``dk/du``. :func:`off_diagonal_kernel_sum` uses them for KCL's ``N x N`` energies with one
buffer forward and one backward (autograd through the plain expression allocates about six each way).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from contrasuite.core.numerics import full_precision, upcast

InPlace = Callable[[Tensor], Tensor]


class Kernel(NamedTuple):
    """A kernel as functions of ``u = t d^2`` that overwrite ``u``: its value and ``dk/du``."""

    value_: InPlace
    slope_: InPlace


KERNELS: dict[str, Kernel] = {
    "gaussian": Kernel(value_=lambda u: u.neg_().exp_(), slope_=lambda u: u.neg_().exp_().neg_()),
    "log": Kernel(value_=lambda u: u.log1p_().neg_(), slope_=lambda u: u.add_(1.0).reciprocal_().neg_()),
}


def get_kernel(name: str) -> Kernel:
    """Look a kernel up by name; the error lists the known names."""
    try:
        return KERNELS[name]
    except KeyError:
        raise ValueError(f"unknown kernel {name!r}; known: {sorted(KERNELS)}") from None


def paired_squared_distance(x: Tensor, y: Tensor) -> Tensor:
    """``[N]`` squared distances between normalised rows ``x_i`` and ``y_i``, ``2 - 2 cos``, >= 0."""
    with full_precision(x):
        cos = (F.normalize(upcast(x), dim=-1) * F.normalize(upcast(y), dim=-1)).sum(dim=-1)
    return (2.0 - 2.0 * cos).clamp_min(0.0)


def _scaled_sq_distance(cos: Tensor, t: float) -> Tensor:
    """``u = t d^2 = 2 t max(1 - cos, 0)`` in a fresh buffer (the same floats as ``t (2 - 2 cos)``)."""
    return torch.rsub(cos, 1.0).clamp_min_(0.0).mul_(2.0 * t)


class _OffDiagonalKernelSum(torch.autograd.Function):
    """``sum_{j != i} k(u_ij)`` from cosines ``[N, N]``; ``d/dcos = -2 t k'(u)`` where ``cos <= 1``
    (the clamp passes no gradient above), 0 on the diagonal (the row sum minus the diagonal)."""

    @staticmethod
    def forward(ctx, cos: Tensor, t: float, kernel: Kernel) -> Tensor:  # type: ignore[override]
        ctx.save_for_backward(cos)
        ctx.t, ctx.kernel = t, kernel
        k = kernel.value_(_scaled_sq_distance(cos, t))
        return k.sum(dim=1) - k.diagonal()

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None, None]:  # type: ignore[override]
        (cos,) = ctx.saved_tensors
        slope = ctx.kernel.slope_(_scaled_sq_distance(cos, ctx.t)).mul_(grad[:, None] * (-2.0 * ctx.t))
        slope.fill_diagonal_(0.0)
        above = cos > 1.0
        if bool(above.any()):
            slope.masked_fill_(above, 0.0)
        return slope, None, None


def off_diagonal_kernel_sum(x: Tensor, kernel: Kernel, t: float) -> Tensor:
    """``[N]`` ``sum_{j != i} k(|x_i - x_j|^2)`` over the L2-normalised rows of ``x [N, D]``."""
    with full_precision(x):
        z = F.normalize(upcast(x), dim=-1)
        return _OffDiagonalKernelSum.apply(z @ z.T, t, kernel)
