"""Top-k hard negative mining: keep, for each anchor, only its ``k`` most similar negatives.

Hardness is the similarity ``s_ij`` (cosine by default), computed without gradient. The result comes
in two forms: the indices ``[N, k]`` of each anchor's hardest negatives (with a validity mask for
rows that have fewer than ``k`` negatives), and a ``neg_weight [N, M]`` that is 1 on the mined
negatives and 0 on every other negative, so any objective honouring ``neg_weight`` (the weighted
InfoNCE family) uses only those. Positives keep weight 1; ``neg_weight`` never touches them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from contrasuite.core.pairs import resolve_pairs
from contrasuite.core.similarity import get_similarity


@dataclass(frozen=True)
class HardNegatives:
    """Each anchor's ``k`` hardest negatives."""

    indices: Tensor
    """``[N, k]`` candidate indices, hardest first."""
    valid: Tensor
    """``[N, k]`` False where the anchor has fewer than ``k`` negatives (index is then meaningless)."""
    neg_weight: Tensor
    """``[N, M]`` float: 1 on mined negatives and on positives, 0 on other negatives."""


@torch.no_grad()
def hardest_negatives(sim: Tensor, neg_mask: Tensor, k: int) -> HardNegatives:
    """Mine the ``k`` negatives with the highest ``sim [N, M]`` among ``neg_mask [N, M]`` per row."""
    if sim.shape != neg_mask.shape:
        raise ValueError(f"sim {tuple(sim.shape)} and neg_mask {tuple(neg_mask.shape)} must match")
    if not 0 < k <= sim.shape[1]:
        raise ValueError(f"k must be in [1, M={sim.shape[1]}], got {k}")
    lowest = torch.finfo(sim.dtype).min
    scores = torch.where(neg_mask, sim, torch.full_like(sim, lowest))
    top, idx = scores.topk(k, dim=1)
    valid = torch.gather(neg_mask, 1, idx)
    weight = (~neg_mask).to(sim.dtype)
    weight.scatter_(1, idx, valid.to(sim.dtype).maximum(torch.gather(weight, 1, idx)))
    return HardNegatives(indices=idx, valid=valid, neg_weight=weight)


def mine_hard_negatives(
    anchors: Tensor,
    candidates: Tensor | None = None,
    *,
    k: int,
    labels: Tensor | None = None,
    candidate_labels: Tensor | None = None,
    pos_mask: Tensor | None = None,
    similarity: str = "cosine",
) -> HardNegatives:
    """Top-``k`` hard negatives under the core contract (same arguments as an objective)."""
    candidates, pairs = resolve_pairs(anchors, candidates, labels=labels, candidate_labels=candidate_labels, pos_mask=pos_mask)
    with torch.no_grad():
        sim = get_similarity(similarity)(anchors.detach(), candidates.detach())
    return hardest_negatives(sim, pairs.neg, k)
