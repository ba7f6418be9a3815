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
``[N, M, D]`` Mobius tensor of the reference code; the tests check it against ``mobius_add``.
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


def pairwise_poincare_distance(x: Tensor, y: Tensor, c: float) -> Tensor:
    """All distances ``[N, M]`` between ball points ``x [N, D]`` and ``y [M, D]`` in O(NM) memory."""
    _check_curvature(c)
    with full_precision(x):
        x, y = upcast(x), upcast(y)
        x2 = (x * x).sum(dim=-1, keepdim=True)
        y2 = (y * y).sum(dim=-1, keepdim=True).T
        xy = x @ y.T
        sq_diff = (x2 + y2 - 2 * xy).clamp_min(0)
        den = (1 - 2 * c * xy + c**2 * x2 * y2).clamp_min(_margin(x, 1e-5))
        return _artanh_distance(sq_diff / den, c)
