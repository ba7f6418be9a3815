"""Kernels on the unit hypersphere for KCL (Koromilas et al., ICML 2024), computed in fp32.

Embeddings are L2-normalised, so the squared Euclidean distance is ``d^2 = 2 - 2 cos``; taking it
from the cosine keeps the gradient finite at ``d = 0`` (``torch.pdist`` is not differentiable there).

* Gaussian: ``k(d) = exp(-t d^2)`` (KCL's default, ``t = 2``).
* Logarithmic: ``k(d) = -log(1 + t d^2)``.

Each kernel is a function of ``u = t d^2``, written in place on a buffer, together with its
negated derivative ``-dk/du`` written in place over the value ``k``. :func:`off_diagonal_kernel_sum`
uses them for KCL's ``N x N`` energies with one buffer forward and one backward (autograd through the
plain expression allocates about six each way, and takes two matmuls backward instead of one).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import torch
from torch import Tensor

from contrasuite.core.numerics import full_precision, upcast
from contrasuite.core.similarity import gram_gradient

InPlace = Callable[[Tensor], Tensor]


class Kernel(NamedTuple):
    """A kernel of ``u = t d^2``: ``value_`` overwrites ``u`` with ``k(u)``; ``neg_slope_`` overwrites
    ``k(u)`` with ``-dk/du`` (as a function of the value, so the backward needs no ``u``)."""

    value_: InPlace
    neg_slope_: InPlace


KERNELS: dict[str, Kernel] = {
    # exp(-u): -dk/du = k.  -log(1 + u): -dk/du = 1 / (1 + u) = exp(k); log(1 + u) rather than
    # log1p(u), which torch's CPU kernels do not vectorise (u >= 0, so they differ by an ulp of 1 + u).
    "gaussian": Kernel(value_=lambda u: u.neg_().exp_(), neg_slope_=lambda k: k),
    "log": Kernel(value_=lambda u: u.add_(1.0).log_().neg_(), neg_slope_=lambda k: k.exp_()),
}


def get_kernel(name: str) -> Kernel:
    """Look a kernel up by name; the error lists the known names."""
    try:
        return KERNELS[name]
    except KeyError:
        raise ValueError(f"unknown kernel {name!r}; known: {sorted(KERNELS)}") from None


def paired_squared_distance(x: Tensor, y: Tensor) -> Tensor:
    """``[N]`` squared distances ``2 - 2 x_i.y_i >= 0`` between unit rows ``x_i`` and ``y_i``."""
    return (2.0 - 2.0 * (x * y).sum(dim=-1)).clamp_min(0.0)


class _OffDiagonalKernelSum(torch.autograd.Function):
    """``sum_{j != i} k(u_ij)``, ``u = 2 t max(1 - z_i.z_j, 0)``, for unit rows ``z [..., N, D]``.

    ``d/dcos = 2 t (-dk/du)`` where ``cos <= 1`` (the clamp passes no gradient above), 0 on the
    diagonal; the forward keeps that slope in its one ``N x N`` buffer, and the backward is one matmul
    (:func:`~contrasuite.core.similarity.gram_gradient`; the slope is symmetric, so no transposed copy).
    """

    @staticmethod
    def forward(ctx, z: Tensor, t: float, kernel: Kernel) -> Tensor:  # type: ignore[override]
        cos = z @ z.mT
        diagonal = cos.diagonal(dim1=-2, dim2=-1)
        diagonal.zero_()  # any cos <= 1: the self-pairs are zeroed in k below
        above = cos > 1.0 if bool(cos.amax() > 1.0) else None
        k = kernel.value_(cos.mul_(-2.0 * t).add_(2.0 * t).clamp_min_(0.0))
        diagonal.zero_()
        energy = k.sum(dim=-1)
        slope = kernel.neg_slope_(k)
        diagonal.zero_()
        if above is not None:
            slope.masked_fill_(above, 0.0)
        ctx.save_for_backward(z, slope)
        ctx.t = t
        return energy

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None, None]:  # type: ignore[override]
        z, slope = ctx.saved_tensors
        return gram_gradient(slope, z, grad * (2.0 * ctx.t), symmetric=True), None, None


def off_diagonal_kernel_sum(z: Tensor, kernel: Kernel, t: float) -> Tensor:
    """``[..., N]`` ``sum_{j != i} k(|z_i - z_j|^2)`` over the unit rows of ``z [..., N, D]`` (each view
    of a batch ``[V, N, D]`` on its own)."""
    with full_precision(z):
        return _OffDiagonalKernelSum.apply(upcast(z), t, kernel)
