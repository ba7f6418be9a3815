"""Soft-InfoNCE (Li, Zhou, Tuan, Miao, "Rethinking Negative Pairs in Code Search", EMNLP 2023).

InfoNCE whose negatives are weighted by how relevant a prior says they are (arXiv:2310.08069,
official code github.com/Alex-HaochenLi/Soft-InfoNCE)::

    p_ij = softmax_{j in N_i}( prior_ij / t )                     (no gradient)
    w_ij = max( 0.1, (beta - alpha * p_ij) / (beta - alpha / K_i) )
    L_i  = -x_ii + log( exp(x_ii) + sum_{j in N_i} w_ij exp(x_ij) )

``K_i`` is the number of negatives of anchor ``i`` (``N - 1`` in-batch in the paper), so a uniform
``p`` gives ``w = 1`` and ``alpha = 0`` gives InfoNCE. A more relevant negative (larger ``p``) gets a
smaller weight; the 0.1 floor keeps every negative active. Scores ``x_ij`` are raw dot products with
no temperature, as in the official code (``similarity="dot"``, ``temperature=1``).

The prior (BM25, SimCSE, a trained model) is domain-side: pass ``prior [N, M]`` to the call, compute
the weights yourself with :func:`soft_infonce_weights` and pass ``neg_weight``, or pass neither
(InfoNCE). The loss is the shared weighted kernel with the positive in the denominator.

Distributed: ``Distributed.GATHER_CANDIDATES``; the weights are per row, so a rank needs the prior
rows of its anchors against the gathered candidates.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor

from contrasuite.core.numerics import full_precision, masked_logsumexp, upcast
from contrasuite.core.objectives.base import ContrastiveObjective, Distributed
from contrasuite.core.objectives.infonce import tiled_weighted_infonce, weighted_infonce
from contrasuite.core.pairs import Blocks, Pairs, resolve_pairs
from contrasuite.core.similarity import get_factors, get_similarity
from contrasuite.core.tiling import check_tile_size, tiles


@torch.no_grad()
def soft_infonce_weight_blocks(
    prior: Tensor,
    t: float = 1.0,
    alpha: float = 1.0,
    beta: float = 1.0,
    pairs: Pairs | None = None,
    min_weight: float = 0.1,
    tile_size: int | None = None,
) -> Blocks:
    """The weights of :func:`soft_infonce_weights` as a function of the block ``(rows, cols)`` (for tiled
    objectives); each row's statistics (``log sum_{j in N_i} exp(prior_ij / t)`` and ``K_i``) are
    computed first, in bands of ``tile_size`` rows (all rows at once when ``None``)."""
    if prior.dim() != 2:
        raise ValueError(f"prior must be [N, M], got shape {tuple(prior.shape)}")
    n, m = prior.shape
    pairs = Pairs.single_positive(torch.arange(n, device=prior.device), m) if pairs is None else pairs
    if tuple(prior.shape) != pairs.shape:
        raise ValueError(f"prior must be [N, M] = {list(pairs.shape)}, got {list(prior.shape)}")
    if t <= 0:
        raise ValueError(f"t must be > 0, got {t}")

    def negatives(rows: slice, cols: slice) -> Tensor:
        pos, valid = pairs.block(rows, cols)
        return ~pos if valid is None else valid & ~pos

    def scaled(rows: slice, cols: slice) -> Tensor:
        return upcast(prior[rows, cols].detach()) / t

    everything = slice(0, m)
    bands = list(tiles(n, tile_size or max(n, 1)))
    lse = torch.cat([masked_logsumexp(scaled(r, everything), negatives(r, everything), dim=1) for r in bands])
    n_neg = torch.cat([negatives(r, everything).sum(dim=1) for r in bands])
    norm = beta - alpha / n_neg.clamp_min(1).to(lse.dtype)
    if bool(((norm <= 0) & (n_neg > 0)).any()):
        raise ValueError(
            f"soft_infonce_weights: beta - alpha / K must be > 0 for every anchor (alpha={alpha}, beta={beta}, "
            f"smallest negative count K={int(n_neg[n_neg > 0].min())})"
        )

    def block(rows: slice, cols: slice) -> Tensor:
        p = scaled(rows, cols).sub_(lse[rows, None]).exp_()  # softmax over the row's negatives
        w = ((beta - alpha * p) / norm[rows, None]).clamp_min(min_weight)
        return torch.where(negatives(rows, cols), w, 1.0)

    return block


def soft_infonce_weights(
    prior: Tensor, t: float = 1.0, alpha: float = 1.0, beta: float = 1.0, pairs: Pairs | None = None, min_weight: float = 0.1
) -> Tensor:
    """Negative weights ``[N, M]`` from a similarity ``prior [N, M]`` (formula in the module docstring).

    ``pairs=None`` means diagonal positives. Entries that are not negatives get 1.
    """
    weights = soft_infonce_weight_blocks(prior, t, alpha, beta, pairs, min_weight)
    return weights(slice(0, prior.shape[0]), slice(0, prior.shape[1]))


class SoftInfoNCE(ContrastiveObjective):
    """Soft-InfoNCE; the call takes an optional ``prior [N, M]`` (see the module docstring).

    Args:
        t: temperature of the prior's softmax. Default 1 (official ``--t``).
        alpha: weight of the prior (official ``--weight_kl``). Default 1.
        beta: uniformity weight (official ``--weight_unif``). Default 1.
        temperature: scale of the scores ``x / temperature``. Default 1 (none, as in the official code).
        similarity: ``"dot"`` (default, raw scores as in the official code) or ``"cosine"``.
        min_weight: the weight floor. Default 0.1.
        tile_size: compute the loss in tiles (:func:`~contrasuite.core.objectives.infonce.tiled_weighted_infonce`),
            the prior's weights block by block (:func:`soft_infonce_weight_blocks`); ``None`` (default): dense.
    """

    tiles: ClassVar[bool] = True
    distributed: ClassVar[Distributed] = Distributed.GATHER_CANDIDATES
    takes_prior: ClassVar[bool] = True
    chooses_similarity: ClassVar[bool] = True
    per_anchor_mean: ClassVar[bool] = False  # its terms need the prior, which the rank-split paths do not pass

    def __init__(
        self,
        t: float = 1.0,
        alpha: float = 1.0,
        beta: float = 1.0,
        temperature: float = 1.0,
        similarity: str = "dot",
        min_weight: float = 0.1,
        tile_size: int | None = None,
    ) -> None:
        super().__init__()
        for name, value in (("t", t), ("temperature", temperature)):
            if value <= 0:
                raise ValueError(f"{name} must be > 0, got {value}")
        self.t, self.alpha, self.beta = t, alpha, beta
        self.temperature = temperature
        self.similarity = similarity
        self.min_weight = min_weight
        self._sim, self._factors = get_similarity(similarity), get_factors(similarity)
        self.tile_size = check_tile_size(tile_size)
        self.last_weights: tuple[Tensor, Pairs] | None = None
        """The last dense call's negative weights and its pairs (read by :meth:`log_values` only)."""

    def forward(
        self,
        anchors: Tensor,
        candidates: Tensor | None = None,
        *,
        labels: Tensor | None = None,
        candidate_labels: Tensor | None = None,
        pos_mask: Tensor | None = None,
        neg_weight: Tensor | None = None,
        prior: Tensor | None = None,
    ) -> Tensor:
        if prior is not None:
            if neg_weight is not None:
                raise ValueError("give either prior or neg_weight to SoftInfoNCE, not both")
            candidates, pairs = resolve_pairs(
                anchors, candidates, labels=labels, candidate_labels=candidate_labels, pos_mask=pos_mask
            )
            with full_precision(anchors):
                args = (prior, self.t, self.alpha, self.beta, pairs, self.min_weight)
                weight = soft_infonce_weights(*args) if self.tile_size is None else soft_infonce_weight_blocks(*args, self.tile_size)
            if self.tile_size is None:
                self.last_weights = (weight, pairs)
            return self.loss_of_pairs(anchors, candidates, pairs, weight)
        return super().forward(
            anchors, candidates, labels=labels, candidate_labels=candidate_labels, pos_mask=pos_mask, neg_weight=neg_weight
        )

    def log_values(self) -> dict[str, float]:
        """How the prior treats the last batch's negatives (dense calls with a prior; empty otherwise):
        ``flagged_share``, the share with weight below 0.5 (a negative holding over half its row's prior
        mass when ``alpha = beta = 1``: a likely false negative), ``floor_share`` at the ``min_weight``
        floor, and ``weight_min``."""
        if self.last_weights is None:
            return {}
        weight, pairs = self.last_weights
        pos, valid = pairs.block(slice(0, pairs.shape[0]), slice(0, pairs.shape[1]))
        w = weight[~pos if valid is None else valid & ~pos].float()
        if w.numel() == 0:
            return {}
        flagged, floor, smallest = torch.stack([(w < 0.5).float().mean(), (w <= self.min_weight * (1 + 1e-6)).float().mean(),
                                                w.min()]).tolist()  # one device sync
        return {"flagged_share": flagged, "floor_share": floor, "weight_min": smallest}

    def per_anchor(self, anchors: Tensor, candidates: Tensor, pairs: Pairs, neg_weight: Tensor | None) -> Tensor:
        if self.tile_size is not None:
            x, y = self._factors(anchors, candidates, scale=1.0 / self.temperature)
            return tiled_weighted_infonce(x, y, pairs, neg_weight, self.tile_size)
        logits = self._sim(anchors, candidates, scale=1.0 / self.temperature)
        return weighted_infonce(logits, pairs, neg_weight, positive_in_denominator=True)
