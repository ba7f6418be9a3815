"""Focal-InfoNCE (Hou and Li, Findings of EMNLP 2023, arXiv:2310.06918).

Self-paced modulation of the InfoNCE logits on cosine similarities (official ``sp_logits`` in
github.com/puerrrr/Focal-InfoNCE ``focalNCE/models.py``)::

    l_ip = s_ip * s_ip / t            (positives)
    l_ij = (s_ij + m) * s_ij / t      (negatives)
    L_i  = -l_ip + log( exp(l_ip) + sum_{j in N_i} exp(l_ij) )     (cross-entropy)

Harder negatives (larger ``s``) get a larger multiplier. The modulating factors are *not* detached
(as in the official code): the gradient is ``2 s / t`` for positives and ``(2 s + m) / t`` for
negatives. Multiple positives, extra candidate columns and ``neg_weight`` go through the shared
weighted kernel (the official code handles square logits only).

Distributed: ``Distributed.GATHER_CANDIDATES`` (row-local).
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor

from contrasuite.core.objectives.base import ContrastiveObjective, Distributed
from contrasuite.core.objectives.infonce import tiled_weighted_infonce, weighted_infonce
from contrasuite.core.pairs import Pairs
from contrasuite.core.similarity import cosine, cosine_factors
from contrasuite.core.tiling import check_tile_size


class _FocalLogits(torch.autograd.Function):
    """``(s + m) s / t``, with ``s^2 / t`` at the positives ``(rows, cols)``; gradient ``(2 s + m) / t``
    and ``2 s / t``. One ``N x M`` buffer forward and one backward (autograd through ``torch.where``
    of the two products allocates several)."""

    @staticmethod
    def forward(ctx, sim: Tensor, rows: Tensor, cols: Tensor, temperature: float, margin: float) -> Tensor:  # type: ignore[override]
        ctx.save_for_backward(sim, rows, cols)
        ctx.temperature, ctx.margin = temperature, margin
        out = (sim + margin).mul_(sim).div_(temperature)
        pos = sim[rows, cols]
        out[rows, cols] = pos * pos / temperature
        return out

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None, None, None, None]:  # type: ignore[override]
        sim, rows, cols = ctx.saved_tensors
        slope = (2.0 * sim).add_(ctx.margin).div_(ctx.temperature).mul_(grad)
        slope[rows, cols] = 2.0 * sim[rows, cols] / ctx.temperature * grad[rows, cols]
        return slope, None, None, None, None


def focal_block(sim: Tensor, positives: tuple[Tensor, Tensor], temperature: float, margin: float) -> tuple[Tensor, Tensor]:
    """One block's focal logits and their slope ``d l / d s`` (a tiled objective's logit map), from
    cosine ``sim`` with positives at ``positives = (rows, cols)``: ``(s + m) s / t`` and ``(2 s + m) / t``,
    with ``s^2 / t`` and ``2 s / t`` at the positives (fresh buffers)."""
    at = sim[positives]
    logits = (sim + margin).mul_(sim).div_(temperature).index_put_(positives, at * at / temperature)
    return logits, (2.0 * sim).add_(margin).div_(temperature).index_put_(positives, 2.0 * at / temperature)


def focal_logits(sim: Tensor, pairs: Pairs, temperature: float, margin: float) -> Tensor:
    """``s^2 / t`` on the positives of ``pairs`` and ``(s + m) s / t`` elsewhere, from cosine ``sim [N, M]``."""
    rows, cols = pairs.positive_indices()
    return _FocalLogits.apply(sim, rows, cols, temperature, margin)


class FocalInfoNCE(ContrastiveObjective):
    """Focal-InfoNCE; see the module docstring.

    Args:
        temperature: ``t``. Default 0.05 (official, unsupervised SimCSE).
        margin: ``m``. Default 0.3 (official).
        tile_size: compute the loss in tiles with the logit map :func:`focal_block`
            (:func:`~contrasuite.core.objectives.infonce.tiled_weighted_infonce`); ``None`` (default): dense.
    """

    tiles: ClassVar[bool] = True
    distributed: ClassVar[Distributed] = Distributed.GATHER_CANDIDATES

    def __init__(self, temperature: float = 0.05, margin: float = 0.3, tile_size: int | None = None) -> None:
        super().__init__()
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        self.temperature = temperature
        self.margin = margin
        self.tile_size = check_tile_size(tile_size)

    def per_anchor(self, anchors: Tensor, candidates: Tensor, pairs: Pairs, neg_weight: Tensor | None) -> Tensor:
        if self.tile_size is not None:
            t = self.temperature
            return tiled_weighted_infonce(
                *cosine_factors(anchors, candidates),
                pairs,
                neg_weight,
                self.tile_size,
                logit_map=lambda sim, pos: focal_block(sim, pos, t, self.margin),
            )
        logits = focal_logits(cosine(anchors, candidates), pairs, self.temperature, self.margin)
        return weighted_infonce(logits, pairs, neg_weight, positive_in_denominator=True)
