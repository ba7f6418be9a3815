"""Poincare-ball operations with curvature ``-c`` (ball of radius ``1/sqrt(c)``), in fp32/fp64.

Formulas as in Ermolov et al., "Hyperbolic Vision Transformers" (CVPR 2022), whose code vendors
hyptorch (Khrulkov et al. 2020). Every operation upcasts to the loss dtype with autocast off, and
every singular point is clamped with a margin that exists in that dtype:

* ``clip_features``: ``x <- min(1, r / |x|) x`` (feature clipping, Guo et al. 2021), before the map;
* ``expmap0``: ``exp_0(v) = tanh(sqrt(c) |v|) v / (sqrt(c) |v|)``, then projected inside the ball;
* ``mobius_add``: ``x (+) y = ((1 + 2c<x,y> + c|y|^2) x + (1 - c|x|^2) y) / (1 + 2c<x,y> + c^2 |x|^2 |y|^2)``;
* ``poincare_distance``: ``d(x, y) = 2/sqrt(c) artanh(sqrt(c) |(-x) (+) y|)``.

``pairwise_poincare_distance`` computes all ``[N, M]`` distances in O(NM) memory from the identity
``|(-x) (+) y|^2 = |x - y|^2 / (1 - 2c<x,y> + c^2 |x|^2 |y|^2)`` instead of building the
``[N, M, D]`` Mobius tensor of the reference code; the tests check it against ``mobius_add``. It is
one autograd function with a hand-written backward (about a dozen ``N x M`` elementwise steps, each of
which autograd would give its own temporaries forward and backward); the tests check its gradient
against autograd through the same formula and with ``gradcheck``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from contrasuite.core.numerics import full_precision, upcast


def _margin(x: Tensor, eps: float) -> float:
    """``eps`` raised to a value that changes ``1 - eps`` in ``x``'s dtype."""
    return max(eps, 4.0 * float(torch.finfo(x.dtype).eps))


def _check_curvature(c: float) -> None:
    if c <= 0:
        raise ValueError(f"curvature c must be > 0 on the Poincare ball, got {c}")


def clip_features(x: Tensor, radius: float) -> Tensor:
    """Feature clipping: rescale rows with ``|x| > radius`` to norm ``radius``; ``radius <= 0`` disables it."""
    if radius <= 0:
        return x
    norm = x.norm(dim=-1, keepdim=True).clamp_min(_margin(x, 1e-5))
    return x * (radius / norm).clamp(max=1.0)


def project(x: Tensor, c: float, eps: float = 1e-3) -> Tensor:
    """Pull points with ``sqrt(c)|x| > 1 - eps`` back to that norm (strictly inside the ball)."""
    _check_curvature(c)
    max_norm = (1.0 - _margin(x, eps)) / math.sqrt(c)
    norm = x.norm(dim=-1, keepdim=True).clamp_min(_margin(x, 1e-5))
    return x * (max_norm / norm).clamp(max=1.0)


def expmap0(v: Tensor, c: float) -> Tensor:
    """Exponential map at the origin, ``tanh(sqrt(c)|v|) v / (sqrt(c)|v|)``, projected into the ball."""
    _check_curvature(c)
    with full_precision(v):
        v = upcast(v)
        sqrt_c = math.sqrt(c)
        norm = v.norm(dim=-1, keepdim=True).clamp_min(_margin(v, 1e-5))
        scaled = (sqrt_c * norm).clamp(max=15.0)
        return project(torch.tanh(scaled) * v / (sqrt_c * norm), c)


def to_ball(v: Tensor, c: float, clip_r: float = 2.3) -> Tensor:
    """Euclidean features -> Poincare ball: ``expmap0(clip_features(v, clip_r), c)`` (Hyp-ViT's head)."""
    with full_precision(v):
        return expmap0(clip_features(upcast(v), clip_r), c)


def mobius_add(x: Tensor, y: Tensor, c: float) -> Tensor:
    """Mobius addition ``x (+)_c y`` (broadcasting over leading dimensions)."""
    _check_curvature(c)
    xy = (x * y).sum(dim=-1, keepdim=True)
    x2 = (x * x).sum(dim=-1, keepdim=True)
    y2 = (y * y).sum(dim=-1, keepdim=True)
    num = (1 + 2 * c * xy + c * y2) * x + (1 - c * x2) * y
    den = 1 + 2 * c * xy + c**2 * x2 * y2
    return num / den.clamp_min(_margin(x, 1e-5))


def _artanh_distance(sq_norm: Tensor, c: float) -> Tensor:
    """``2/sqrt(c) artanh(sqrt(c) sqrt(sq_norm))`` with the gradient of ``sqrt`` finite at 0."""
    sqrt_c = math.sqrt(c)
    floor = float(torch.finfo(sq_norm.dtype).eps) ** 2
    arg = (sqrt_c * sq_norm.clamp_min(floor).sqrt()).clamp(max=1.0 - _margin(sq_norm, 1e-5))
    return 2.0 / sqrt_c * torch.atanh(arg)


def poincare_distance(x: Tensor, y: Tensor, c: float) -> Tensor:
    """Geodesic distance ``2/sqrt(c) artanh(sqrt(c)|(-x) (+) y|)`` between matching rows (broadcasting)."""
    with full_precision(x):
        diff = mobius_add(-upcast(x), upcast(y), c)
        return _artanh_distance((diff * diff).sum(dim=-1), c)


def _where_any(mask: Tensor) -> Tensor | None:
    """``mask``, or ``None`` when it is all False (skips an ``N x M`` masked fill)."""
    return mask if bool(mask.any()) else None


class _PairwiseDistance(torch.autograd.Function):
    """``scale * d_c(x_i, y_j)`` for ball points ``x [N, D]``, ``y [M, D]``, with the clamps of
    :func:`_artanh_distance` and ``den >= margin``. With ``u = |x - y|^2 / den``,
    ``den = 1 - 2c<x,y> + c^2 |x|^2 |y|^2`` and ``z = sqrt(c u)``: ``d = 2/sqrt(c) artanh(z)``,
    ``dd/du = 1 / ((1 - c u) sqrt(u))``, ``du/d|x-y|^2 = 1 / den``, ``du/dden = -u / den``. A clamped
    quantity passes no gradient, as in autograd (``u < floor``; ``z > 1 - margin``; ``den < margin``;
    ``|x - y|^2 < 0`` from rounding gives ``u = 0 < floor``).
    """

    @staticmethod
    def forward(ctx, x: Tensor, y: Tensor, c: float, scale: float) -> Tensor:  # type: ignore[override]
        x2 = (x * x).sum(dim=-1, keepdim=True)
        y2 = (y * y).sum(dim=-1, keepdim=True).T
        u = x @ y.T
        den = torch.mul(u, -2.0 * c).addcmul_(x2, y2, value=c**2).add_(1.0)
        den_clamped = _where_any(den < _margin(x, 1e-5))
        den.clamp_min_(_margin(x, 1e-5))
        u.mul_(-2.0).add_(x2).add_(y2).clamp_min_(0).div_(den)  # |(-x) (+) y|^2
        floor = float(torch.finfo(u.dtype).eps) ** 2
        max_z = 1.0 - _margin(u, 1e-5)
        dist = u.clamp_min(floor).mul_(c).sqrt_()
        z_clamped = _where_any(dist > max_z)
        dist.clamp_max_(max_z).atanh_().mul_(2.0 / math.sqrt(c) * scale)
        ctx.save_for_backward(x, y, x2, y2, u, den, den_clamped, z_clamped)
        ctx.c, ctx.scale, ctx.floor = c, scale, floor
        return dist

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, Tensor, None, None]:  # type: ignore[override]
        x, y, x2, y2, u, den, den_clamped, z_clamped = ctx.saved_tensors
        c = ctx.c
        # g_sq = dL/d|x-y|^2 = scale * grad / ((1 - c u) sqrt(u) den), u floored as in the forward.
        g_sq = u.clamp_min(ctx.floor)
        root = g_sq.sqrt()
        g_sq.mul_(-c).add_(1.0).mul_(root).mul_(den)
        torch.div(grad, g_sq, out=g_sq).mul_(ctx.scale)
        for clamped in (_where_any(u < ctx.floor), z_clamped):
            if clamped is not None:
                g_sq.masked_fill_(clamped, 0.0)
        # dL/dden = -g_sq * u; w = dL/d<x,y> / -2 = g_sq + c dL/dden.
        g_den = torch.mul(g_sq, u, out=root).neg_()
        if den_clamped is not None:
            g_den.masked_fill_(den_clamped, 0.0)
        g_x2 = g_sq.sum(dim=1, keepdim=True) + c**2 * (g_den @ y2.T)
        g_y2 = g_sq.sum(dim=0, keepdim=True).T + c**2 * (g_den.T @ x2)
        w = g_den.mul_(c).add_(g_sq)
        return 2.0 * (x * g_x2 - w @ y), 2.0 * (y * g_y2 - w.T @ x), None, None


def pairwise_poincare_distance(x: Tensor, y: Tensor, c: float, scale: float = 1.0) -> Tensor:
    """All distances ``[N, M]`` between ball points ``x [N, D]`` and ``y [M, D]`` in O(NM) memory,
    times ``scale`` (e.g. ``-1 / t`` for logits, saving a separate ``N x M`` step)."""
    _check_curvature(c)
    with full_precision(x):
        return _PairwiseDistance.apply(upcast(x), upcast(y), c, scale)
