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

from contrasuite.core.numerics import full_precision, upcast
from contrasuite.core.objectives.base import ContrastiveObjective, Distributed
from contrasuite.core.objectives.infonce import weighted_infonce
from contrasuite.core.pairs import Pairs, resolve_pairs
from contrasuite.core.similarity import get_similarity


@torch.no_grad()
def soft_infonce_weights(
    prior: Tensor, t: float = 1.0, alpha: float = 1.0, beta: float = 1.0, pairs: Pairs | None = None, min_weight: float = 0.1
) -> Tensor:
    """Negative weights ``[N, M]`` from a similarity ``prior [N, M]`` (formula in the module docstring).

    ``pairs=None`` means square ``prior`` with diagonal positives. Entries that are not negatives get 1.
    """
    if prior.dim() != 2:
        raise ValueError(f"prior must be [N, M], got shape {tuple(prior.shape)}")
    if pairs is None:
        n, m = prior.shape
        eye = torch.eye(n, m, dtype=torch.bool, device=prior.device)
        pairs = Pairs(pos=eye, valid=torch.ones_like(eye))
    if prior.shape != pairs.pos.shape:
        raise ValueError(f"prior must be [N, M] = {list(pairs.pos.shape)}, got {list(prior.shape)}")
    if t <= 0:
        raise ValueError(f"t must be > 0, got {t}")
    neg = pairs.neg
    n_neg = neg.sum(dim=1, keepdim=True)
    scaled = upcast(prior.detach()) / t
    # Masked softmax over each row's negatives, with finite masking.
    row_max = torch.where(neg, scaled, torch.full_like(scaled, torch.finfo(scaled.dtype).min)).amax(1, keepdim=True)
    row_max = torch.where(n_neg > 0, row_max, torch.zeros_like(row_max))
    e = torch.where(neg, torch.exp(scaled - row_max), torch.zeros_like(scaled))
    p = e / e.sum(dim=1, keepdim=True).clamp_min(torch.finfo(e.dtype).tiny)
    norm = beta - alpha / n_neg.clamp_min(1).to(p.dtype)
    if bool(((norm <= 0) & (n_neg > 0)).any()):
        raise ValueError(
            f"soft_infonce_weights: beta - alpha / K must be > 0 for every anchor (alpha={alpha}, beta={beta}, "
            f"smallest negative count K={int(n_neg[n_neg > 0].min())})"
        )
    w = ((beta - alpha * p) / norm).clamp_min(min_weight)
    return torch.where(neg, w, torch.ones_like(w))


class SoftInfoNCE(ContrastiveObjective):
    """Soft-InfoNCE; the call takes an optional ``prior [N, M]`` (see the module docstring).

    Args:
        t: temperature of the prior's softmax. Default 1 (official ``--t``).
        alpha: weight of the prior (official ``--weight_kl``). Default 1.
        beta: uniformity weight (official ``--weight_unif``). Default 1.
        temperature: scale of the scores ``x / temperature``. Default 1 (none, as in the official code).
        similarity: ``"dot"`` (default, raw scores as in the official code) or ``"cosine"``.
        min_weight: the weight floor. Default 0.1.
    """

    distributed: ClassVar[Distributed] = Distributed.GATHER_CANDIDATES

    def __init__(
        self,
        t: float = 1.0,
        alpha: float = 1.0,
        beta: float = 1.0,
        temperature: float = 1.0,
        similarity: str = "dot",
        min_weight: float = 0.1,
    ) -> None:
        super().__init__()
        for name, value in (("t", t), ("temperature", temperature)):
            if value <= 0:
                raise ValueError(f"{name} must be > 0, got {value}")
        self.t, self.alpha, self.beta = t, alpha, beta
        self.temperature = temperature
        self.similarity = similarity
        self.min_weight = min_weight
        self._sim = get_similarity(similarity)

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
                neg_weight = soft_infonce_weights(prior, self.t, self.alpha, self.beta, pairs, self.min_weight)
            return self.loss_of_pairs(anchors, candidates, pairs, neg_weight)
        return super().forward(
            anchors, candidates, labels=labels, candidate_labels=candidate_labels, pos_mask=pos_mask, neg_weight=neg_weight
        )

    def per_anchor(self, anchors: Tensor, candidates: Tensor, pairs: Pairs, neg_weight: Tensor | None) -> Tensor:
        logits = self._sim(anchors, candidates, scale=1.0 / self.temperature)
        return weighted_infonce(logits, pairs, neg_weight, positive_in_denominator=True)
