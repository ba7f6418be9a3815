"""Circle loss (Sun et al., "Circle Loss: A Unified Perspective of Pair Similarity Optimization", CVPR 2020).

Pair-wise form (the paper's Eq. 4 with self-paced weights). For anchor ``i`` with positive
similarities ``s_p`` and negative similarities ``s_n`` (cosine)::

    L_i = log( 1 + sum_n exp(gamma a_n (s_n - D_n)) * sum_p exp(-gamma a_p (s_p - D_p)) )
        = softplus( LSE_n(gamma a_n (s_n - D_n)) + LSE_p(-gamma a_p (s_p - D_p)) )
    a_p = [1 + m - s_p]_+,   a_n = [s_n + m]_+,   D_p = 1 - m,   D_n = m

By default the weights ``a_p, a_n`` are constants in back-propagation (detached), as in
pytorch-metric-learning (there is no official code); ``detach_weights=False`` differentiates them too.
Defaults ``m = 0.4, gamma = 80`` are the paper's
fine-grained retrieval setting and PML's defaults (face recognition: ``m = 0.25, gamma = 256``; re-ID:
``m = 0.25, gamma = 128``).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import once_differentiable

from contrasuite.core.numerics import loss_dtype, masked_logsumexp
from contrasuite.core.objectives.base import ContrastiveObjective
from contrasuite.core.pairs import Pairs
from contrasuite.core.similarity import cosine


BLOCK_BYTES = 1 << 20
"""The fused loss works on blocks of rows of about this many bytes of similarities (they stay in the CPU's cache)."""


def circle_loss(
    sim: Tensor, pairs: Pairs, *, m: float = 0.4, gamma: float = 80.0, detach_weights: bool = True
) -> Tensor:
    """Per-anchor circle loss ``[N]`` on cosine similarities ``sim [N, M]`` (module docstring).

    An anchor without positives or without negatives gets 0 (``log(1 + 0)``). With the weights detached (the
    default) the loss and its gradient are computed a block of rows at a time (:class:`_CircleRows`); otherwise by
    autograd through :func:`circle_loss_autograd`.
    """
    if not detach_weights:
        return circle_loss_autograd(sim, pairs, m=m, gamma=gamma, detach_weights=False)
    return _CircleRows.apply(sim, pairs, m, gamma)


def circle_loss_autograd(
    sim: Tensor, pairs: Pairs, *, m: float = 0.4, gamma: float = 80.0, detach_weights: bool = True
) -> Tensor:
    """:func:`circle_loss` as whole-matrix tensor operations, differentiated by autograd (the weights too unless
    ``detach_weights``): the reference the fused form is tested against."""
    detached = sim.detach() if detach_weights else sim
    pos_logits = -gamma * torch.relu(1 + m - detached) * (sim - (1 - m))
    neg_logits = gamma * torch.relu(detached + m) * (sim - m)
    neg = pairs.neg
    lse_pos = masked_logsumexp(pos_logits, pairs.pos, dim=1)
    lse_neg = masked_logsumexp(neg_logits, neg, dim=1)
    losses = F.softplus(lse_pos + lse_neg)
    both = pairs.has_pos & neg.any(dim=1)
    return torch.where(both, losses, torch.zeros_like(losses))


def _block_logits(s: Tensor, pos: Tensor, valid: Tensor | None, m: float, gamma: float) -> tuple[Tensor, ...]:
    """A block's positive and negative logits ``l = slope * (s - D)``, each the dtype's lowest finite value outside
    its set, their slopes ``dl/ds`` with the weights held constant (``-gamma a_p`` and ``gamma a_n``) and the sets."""
    low = torch.finfo(s.dtype).min
    neg = ~pos if valid is None else valid & ~pos
    slope_pos = (1 + m - s).clamp_min_(0).mul_(-gamma)
    slope_neg = (s + m).clamp_min_(0).mul_(gamma)
    pos_logits = (s - (1 - m)).mul_(slope_pos).masked_fill_(~pos, low)
    neg_logits = (s - m).mul_(slope_neg).masked_fill_(~neg, low)
    return pos_logits, neg_logits, slope_pos, slope_neg, pos, neg


EXP_FLOOR = -80.0
"""Shifted logits are clamped here before ``exp``: ``exp(-80)`` is still a normal float, and an ``exp`` whose result
would underflow takes a slow path on x86 (most of a row's entries lie outside the small positive set)."""


def _exp_within_(shifted: Tensor, mask: Tensor) -> Tensor:
    """``exp(shifted)`` in place where ``mask``, exactly 0 elsewhere."""
    return shifted.clamp_min_(EXP_FLOOR).exp_().masked_fill_(~mask, 0)


def _logsumexp_within(logits: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """``log sum_{mask} exp(logits)`` per row (``logits`` is overwritten), ``log(tiny)`` for a row whose mask is
    empty as :func:`~contrasuite.core.numerics.masked_logsumexp`, and which rows' masks are not empty (their sums
    are at least ``exp(EXP_FLOOR)``)."""
    top = logits.amax(dim=1, keepdim=True)
    total = _exp_within_(logits.sub_(top), mask).sum(dim=1)
    found = total > 0
    tiny = torch.finfo(total.dtype).tiny
    return torch.where(found, total.clamp_min(tiny).log_() + top.squeeze(1), math.log(tiny)), found


def _row_blocks(sim: Tensor) -> list[slice]:
    rows = max(1, BLOCK_BYTES // max(1, sim.shape[1] * 4))
    return [slice(r, min(r + rows, sim.shape[0])) for r in range(0, sim.shape[0], rows)]


class _CircleRows(torch.autograd.Function):
    """Per-anchor circle loss with detached weights, ``softplus(P_i + Q_i)`` for ``P_i = LSE_p l^p_ij`` and
    ``Q_i = LSE_n l^n_ij``, a block of rows at a time in the loss dtype. Backward, with ``w_i = g_i sigmoid(P_i + Q_i)``
    (0 for an anchor lacking positives or negatives)::

        dL/ds_ij = w_i (exp(l^p_ij - P_i) (-gamma a_p) + exp(l^n_ij - Q_i) gamma a_n)

    recomputing each block's logits instead of keeping ``N x M`` of them. The whole-matrix form
    (:func:`circle_loss_autograd`) makes a dozen ``N x M`` temporaries or more, each written and read once.
    """

    @staticmethod
    def forward(ctx, sim: Tensor, pairs: Pairs, m: float, gamma: float) -> Tensor:  # type: ignore[override]
        dtype = loss_dtype(sim)
        lse_pos = torch.empty(sim.shape[0], dtype=dtype, device=sim.device)
        lse_neg, both = torch.empty_like(lse_pos), torch.empty(sim.shape[0], dtype=torch.bool, device=sim.device)
        columns = slice(0, sim.shape[1])
        for rows in _row_blocks(sim):
            pos_logits, neg_logits, _, _, pos, neg = _block_logits(sim[rows].to(dtype), *pairs.block(rows, columns),
                                                                   m, gamma)
            lse_pos[rows], has_pos = _logsumexp_within(pos_logits, pos)
            lse_neg[rows], has_neg = _logsumexp_within(neg_logits, neg)
            both[rows] = has_pos & has_neg
        total = torch.where(both, lse_pos + lse_neg, torch.zeros_like(lse_pos))
        ctx.save_for_backward(sim, lse_pos, lse_neg, total, both)
        ctx.pairs, ctx.m, ctx.gamma = pairs, m, gamma
        return torch.where(both, F.softplus(total), torch.zeros_like(total))

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        sim, lse_pos, lse_neg, total, both = ctx.saved_tensors
        weight = torch.where(both, grad.to(total.dtype) * torch.sigmoid(total), torch.zeros_like(total))[:, None]
        out = torch.empty_like(sim)
        columns = slice(0, sim.shape[1])
        for rows in _row_blocks(sim):
            pos_logits, neg_logits, slope_pos, slope_neg, pos, neg = _block_logits(
                sim[rows].to(total.dtype), *ctx.pairs.block(rows, columns), ctx.m, ctx.gamma)
            g = _exp_within_(pos_logits.sub_(lse_pos[rows, None]), pos).mul_(slope_pos)
            g.add_(_exp_within_(neg_logits.sub_(lse_neg[rows, None]), neg).mul_(slope_neg))
            out[rows] = g.mul_(weight[rows])
        return out, None, None, None


class CircleLoss(ContrastiveObjective):
    """Circle loss on cosine similarities; see the module docstring.

    Args:
        m: relaxation margin (``O_p = 1 + m``, ``O_n = -m``, ``D_p = 1 - m``, ``D_n = m``). Default 0.4.
        gamma: scale. Default 80.
        detach_weights: treat ``a_p, a_n`` as constants in back-propagation (True, the paper and PML).
    """

    def __init__(self, m: float = 0.4, gamma: float = 80.0, detach_weights: bool = True) -> None:
        super().__init__()
        if gamma <= 0:
            raise ValueError(f"gamma must be > 0, got {gamma}")
        self.m = m
        self.gamma = gamma
        self.detach_weights = detach_weights

    def per_anchor(self, anchors: Tensor, candidates: Tensor, pairs: Pairs, neg_weight: Tensor | None) -> Tensor:
        if neg_weight is not None:
            raise ValueError("CircleLoss weights every pair itself; neg_weight is not supported")
        sim = cosine(anchors, candidates)
        return circle_loss(sim, pairs, m=self.m, gamma=self.gamma, detach_weights=self.detach_weights)
