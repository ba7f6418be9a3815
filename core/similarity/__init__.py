"""Similarity functions between anchors ``[N, D]`` and candidates ``[M, D]``, computed in fp32."""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import Tensor

from contrasuite.core.numerics import full_precision, upcast


class _Normalize(torch.autograd.Function):
    """``x / max(|x|, eps)`` over the last dimension, as ``F.normalize``, with the backward in one
    expression: ``(g - y (g.y)) / |x|``, or ``g / eps`` for the rows whose norm was clamped. Autograd
    through ``F.normalize`` takes about a dozen small ops backward (measured 2x the cost at N = 256)."""

    @staticmethod
    def forward(ctx, x: Tensor, eps: float) -> Tensor:  # type: ignore[override]
        norm = torch.linalg.vector_norm(x, dim=-1, keepdim=True)
        clamped = norm < eps  # [..., 1]: cheap, and no device sync to test whether any row is
        y = x / norm.clamp_min_(eps)
        ctx.save_for_backward(y, norm, clamped)
        return y

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None]:  # type: ignore[override]
        y, norm, clamped = ctx.saved_tensors
        along = (grad * y).sum(dim=-1, keepdim=True)
        along.masked_fill_(clamped, 0.0)  # a clamped (constant) norm passes no gradient
        return torch.addcmul(grad, y, along, value=-1.0).div_(norm), None


def normalize(x: Tensor, eps: float = 1e-12) -> Tensor:
    """``F.normalize(x, dim=-1, eps=eps)``: the same values and gradient, with a cheaper backward."""
    return _Normalize.apply(x, eps)


def cosine(anchors: Tensor, candidates: Tensor, scale: float = 1.0) -> Tensor:
    """``scale * <a_i, c_j> / (|a_i| |c_j|)`` in the loss dtype.

    ``scale`` (e.g. ``1 / t``) multiplies the normalised anchors ``[N, D]`` before the matmul, not the
    ``[N, M]`` result (as open_clip does): the same logits up to rounding, one ``N x M`` step fewer each
    way. Candidates that are the anchors (``candidates=None`` in the contract) are normalised once, and
    the symmetric product takes one matmul backward instead of two.
    """
    with full_precision(anchors):
        if candidates is anchors:  # symmetric: one matmul backward (:func:`gram_gradient`)
            return _Gram.apply(normalize(upcast(anchors)), scale)
        x, y = cosine_factors(anchors, candidates, scale)
        return x @ y.T


def cosine_factors(anchors: Tensor, candidates: Tensor, scale: float = 1.0) -> tuple[Tensor, Tensor]:
    """``(scale * a / |a|, c / |c|)`` in the loss dtype, whose product ``x @ y.T`` is :func:`cosine`;
    candidates that are the anchors are normalised once."""
    with full_precision(anchors):
        a = normalize(upcast(anchors))
        c = a if candidates is anchors else normalize(upcast(candidates))
        return (a * scale if scale != 1.0 else a), c


def dot(anchors: Tensor, candidates: Tensor, scale: float = 1.0) -> Tensor:
    """``scale * <a_i, c_j>`` in the loss dtype (no normalisation: Soft-InfoNCE's raw scores); ``scale``
    multiplies the anchors before the matmul, as in :func:`cosine`."""
    x, y = dot_factors(anchors, candidates, scale)
    with full_precision(anchors):
        return x @ y.T


def dot_factors(anchors: Tensor, candidates: Tensor, scale: float = 1.0) -> tuple[Tensor, Tensor]:
    """``(scale * a, c)`` in the loss dtype, whose product is :func:`dot`."""
    with full_precision(anchors):
        a = upcast(anchors)
        return (a * scale if scale != 1.0 else a), upcast(candidates)


def gram_gradient(e: Tensor, z: Tensor, row_weight: Tensor | None = None, symmetric: bool = False) -> Tensor:
    """``dL/dz [..., N, D]`` of a loss of the Gram matrix ``z z^T`` with ``dL/dG_ij = w_i e_ij`` (``w = 1``
    without ``row_weight``): ``(W + W^T) z`` for ``W = diag(w) e``, as ``G_ij = G_ji = z_i.z_j``. One
    matmul instead of autograd's two (``W z`` and ``W^T z``); ``W^T`` comes from a 2-D transposed copy,
    which torch blocks for cache (a batched one it does not, so views are taken one at a time).
    ``symmetric``: ``e`` is symmetric, so ``W + W^T = e * (w_i + w_j)`` and no transposed copy is made."""
    if e.dim() > 2:
        weights = [None] * e.shape[0] if row_weight is None else row_weight
        return torch.stack([gram_gradient(*view, symmetric=symmetric) for view in zip(e, z, weights)])
    if symmetric:
        if row_weight is None:
            return (e @ z).mul_(2.0)
        return torch.add(row_weight[:, None], row_weight[None, :]).mul_(e) @ z
    if row_weight is None:
        return e.mT.contiguous().add_(e) @ z
    return e.mT.contiguous().mul_(row_weight[None, :]).addcmul_(e, row_weight[:, None]) @ z


class _Gram(torch.autograd.Function):
    """``scale * z z^T`` with the backward ``scale (G + G^T) z``: one matmul (:func:`gram_gradient`)."""

    @staticmethod
    def forward(ctx, z: Tensor, scale: float) -> Tensor:  # type: ignore[override]
        ctx.save_for_backward(z)
        ctx.scale = scale
        return (z * scale if scale != 1.0 else z) @ z.T

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None]:  # type: ignore[override]
        (z,) = ctx.saved_tensors
        out = gram_gradient(grad, z)
        return (out.mul_(ctx.scale) if ctx.scale != 1.0 else out), None


Similarity = Callable[..., Tensor]
"""``(anchors [N, D], candidates [M, D], scale=1.0) -> [N, M]``."""

SIMILARITIES: dict[str, Similarity] = {"cosine": cosine, "dot": dot}
Factors = Callable[..., tuple[Tensor, Tensor]]
"""``(anchors [N, D], candidates [M, D], scale=1.0) -> (x [N, D], y [M, D])`` with ``x @ y.T`` the similarity:
what tiled objectives (:mod:`contrasuite.core.tiling`) multiply block by block."""
FACTORS: dict[str, Factors] = {"cosine": cosine_factors, "dot": dot_factors}


def get_similarity(name: str) -> Similarity:
    """Look a similarity up by name; the error lists the known names."""
    return _lookup(SIMILARITIES, name)


def get_factors(name: str) -> Factors:
    """The factors of a similarity, by name (:data:`FACTORS`)."""
    return _lookup(FACTORS, name)


def _lookup(table: dict, name: str) -> Callable[..., Any]:
    try:
        return table[name]
    except KeyError:
        raise ValueError(f"unknown similarity {name!r}; known: {sorted(table)}") from None
