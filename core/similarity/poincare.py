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
from contrasuite.core.similarity import gram_gradient


def _margin(x: Tensor, eps: float) -> float:
    """``eps`` raised to a value that changes ``1 - eps`` in ``x``'s dtype."""
    return max(eps, 4.0 * float(torch.finfo(x.dtype).eps))


def _check_curvature(c: float) -> None:
    if c <= 0:
        raise ValueError(f"curvature c must be > 0 on the Poincare ball, got {c}")


def _row_norm(x: Tensor) -> Tensor:
    """``|x|`` over the last dimension, kept as ``[..., 1]``."""
    return torch.linalg.vector_norm(x, dim=-1, keepdim=True)


def _shrink_scale(norm: Tensor, bound: float) -> Tensor:
    """The factor ``min(1, bound / |x|)`` that caps a row's norm at ``bound``, from the row norms ``[..., 1]``
    (:func:`clip_features` with ``bound = r``, :func:`project` with ``bound = (1 - eps) / sqrt(c)``)."""
    return (bound / norm.clamp_min(_margin(norm, 1e-5))).clamp(max=1.0)


def _expmap0_scale(norm: Tensor, c: float) -> Tensor:
    """The factor ``tanh(sqrt(c)|v|) / (sqrt(c)|v|)`` of the exponential map, from the row norms ``[..., 1]``."""
    scaled = math.sqrt(c) * norm.clamp_min(_margin(norm, 1e-5))
    return torch.tanh(scaled.clamp(max=15.0)) / scaled


def _project_scale(norm: Tensor, c: float, eps: float = 1e-3) -> Tensor:
    """The factor ``min(1, (1 - eps) / (sqrt(c)|x|))`` of :func:`project`, from the row norms ``[..., 1]``."""
    return _shrink_scale(norm, (1.0 - _margin(norm, eps)) / math.sqrt(c))


def clip_features(x: Tensor, radius: float) -> Tensor:
    """Feature clipping: rescale rows with ``|x| > radius`` to norm ``radius``; ``radius <= 0`` disables it."""
    return x if radius <= 0 else x * _shrink_scale(_row_norm(x), radius)


def project(x: Tensor, c: float, eps: float = 1e-3) -> Tensor:
    """Pull points with ``sqrt(c)|x| > 1 - eps`` back to that norm (strictly inside the ball)."""
    _check_curvature(c)
    return x * _project_scale(_row_norm(x), c, eps)


def _ball_scale(norm: Tensor, c: float, clip_r: float) -> Tensor:
    """The factor ``[..., 1]`` that maps rows of norm ``norm`` onto the ball: clipping (``clip_r > 0``),
    exponential map and projection are each a rescaling of the row, so the norm after each step is the
    factor times the norm before it, and the three factors multiply."""
    scale = _shrink_scale(norm, clip_r) if clip_r > 0 else None
    norm = norm if scale is None else scale * norm
    exp_scale = _expmap0_scale(norm, c)
    scale = exp_scale if scale is None else scale * exp_scale
    return scale * _project_scale(exp_scale * norm, c)


def expmap0(v: Tensor, c: float) -> Tensor:
    """Exponential map at the origin, ``tanh(sqrt(c)|v|) v / (sqrt(c)|v|)``, projected into the ball."""
    return to_ball(v, c, clip_r=0.0)


def to_ball(v: Tensor, c: float, clip_r: float = 2.3) -> Tensor:
    """Euclidean features -> Poincare ball: ``expmap0(clip_features(v, clip_r), c)`` (Hyp-ViT's head).

    Every step rescales each row, so this is ``v`` times one factor computed from ``|v|``
    (:func:`_ball_scale`): autograd then works on ``[N, 1]`` norms and factors, and only the first
    norm and the last product touch ``[N, D]`` (about 30 ``[N, D]`` steps fewer forward and backward
    than composing the three maps)."""
    _check_curvature(c)
    with full_precision(v):
        x = upcast(v)
        return x * _ball_scale(_row_norm(x), c, clip_r)


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


def _where_below(x: Tensor, bound: float) -> Tensor | None:
    """The mask ``x < bound``, or ``None`` where no entry is (one reduction, no ``N x M`` mask or fill)."""
    return x < bound if bool(x.amin() < bound) else None


def _where_above(x: Tensor, bound: float) -> Tensor | None:
    """The mask ``x > bound``, or ``None`` where no entry is (as :func:`_where_below`)."""
    return x > bound if bool(x.amax() > bound) else None


class _PairwiseDistance(torch.autograd.Function):
    """``scale * d_c(x_i, y_j)`` for ball points ``x [N, D]``, ``y [M, D]``, with the clamps of
    :func:`_artanh_distance` and ``den >= margin``. With ``u = |x - y|^2 / den``,
    ``den = 1 - 2c<x,y> + c^2 |x|^2 |y|^2`` and ``z = sqrt(c u)``: ``d = 2/sqrt(c) artanh(z)``,
    ``dd/du = 1 / ((1 - c u) sqrt(u))``, ``du/d|x-y|^2 = 1 / den``, ``du/dden = -u / den``. A clamped
    quantity passes no gradient, as in autograd (``u < floor``, which covers ``|x - y|^2 < 0`` from
    rounding; ``z > 1 - margin``; ``den < margin``); each clamp runs only where some entry needs it.
    ``scale`` multiplies the ``[N, D]`` gradients, not an ``N x M`` buffer.
    """

    @staticmethod
    def forward(ctx, x: Tensor, y: Tensor, c: float, scale: float) -> Tensor:  # type: ignore[override]
        x2 = (x * x).sum(dim=-1, keepdim=True)
        y2 = (y * y).sum(dim=-1, keepdim=True).T
        u = (x * -2.0) @ y.T  # -2 <x, y>
        den = torch.mul(u, c).addcmul_(x2, y2, value=c**2).add_(1.0)
        margin = _margin(x, 1e-5)
        den_clamped = _where_below(den, margin)
        if den_clamped is not None:
            den.clamp_min_(margin)
        u.add_(x2).add_(y2).div_(den)  # |(-x) (+) y|^2, below 0 only by rounding
        floor = float(torch.finfo(u.dtype).eps) ** 2
        u_floored = _where_below(u, floor)
        if u_floored is not None:
            u.clamp_min_(floor)
        max_z = 1.0 - _margin(u, 1e-5)
        dist = torch.mul(u, c).sqrt_()
        z_clamped = _where_above(dist, max_z)
        if z_clamped is not None:
            dist.clamp_max_(max_z)
        dist.atanh_().mul_(2.0 / math.sqrt(c) * scale)
        ctx.save_for_backward(x, y, x2, y2, u, den, u_floored, den_clamped, z_clamped)
        ctx.c, ctx.scale, ctx.same = c, scale, x is y
        return dist

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, Tensor, None, None]:  # type: ignore[override]
        x, y, x2, y2, u, den, u_floored, den_clamped, z_clamped = ctx.saved_tensors
        c = ctx.c
        # g_sq = dL/d|x-y|^2 / scale = grad / ((sqrt(u) - c u sqrt(u)) den), u floored as in the forward.
        g_sq = u.sqrt()
        g_sq.addcmul_(g_sq, u, value=-c).mul_(den)
        torch.div(grad, g_sq, out=g_sq)
        for clamped in (u_floored, z_clamped):
            if clamped is not None:
                g_sq.masked_fill_(clamped, 0.0)
        g_sq_u = g_sq * u  # -dL/dden / scale
        if den_clamped is not None:
            g_sq_u.masked_fill_(den_clamped, 0.0)
        g_x2 = g_sq.sum(dim=1, keepdim=True) - c**2 * (g_sq_u @ y2.T)
        g_y2 = g_sq.sum(dim=0, keepdim=True).T - c**2 * (g_sq_u.T @ x2)
        w = g_sq.add_(g_sq_u, alpha=-c)  # dL/d<x,y> / (-2 scale) = g_sq + c dL/dden
        scale = 2.0 * ctx.scale
        if ctx.same:  # x is y: both gradients in one, with one matmul (gram_gradient)
            return scale * (x * (g_x2 + g_y2) - gram_gradient(w, x)), None, None, None
        return scale * (x * g_x2 - w @ y), scale * (y * g_y2 - w.T @ x), None, None


def pairwise_poincare_distance(x: Tensor, y: Tensor, c: float, scale: float = 1.0) -> Tensor:
    """All distances ``[N, M]`` between ball points ``x [N, D]`` and ``y [M, D]`` in O(NM) memory,
    times ``scale`` (e.g. ``-1 / t`` for logits, saving a separate ``N x M`` step)."""
    _check_curvature(c)
    with full_precision(x):
        return _PairwiseDistance.apply(upcast(x), upcast(y), c, scale)
