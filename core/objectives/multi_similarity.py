"""Multi-Similarity loss with its mining step (Wang et al., "Multi-Similarity Loss with General Pair
Weighting for Deep Metric Learning", CVPR 2019).

1. Mining (margin ``epsilon``), without gradient, for anchor ``i``:
   keep a negative ``k`` if ``s_ik > min_{p in P_i} s_ip - epsilon``;
   keep a positive ``j`` if ``s_ij < max_{n in N_i} s_in + epsilon``.
2. Weighting, over the kept pairs::

       L_i = 1/alpha log(1 + sum_{P_i} exp(-alpha (s_ij - base)))
           + 1/beta  log(1 + sum_{N_i} exp( beta (s_ik - base)))

Defaults ``alpha = 2, beta = 50, epsilon = 0.1`` as in the paper; ``base = 0.5`` (the paper's
``lambda``) follows the official code's ``thresh = 0.5`` and pytorch-metric-learning's ``base``.
Both inequalities are strict, as in PML's ``MultiSimilarityMiner``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from contrasuite.core.numerics import masked_logsumexp
from contrasuite.core.objectives.base import ContrastiveObjective
from contrasuite.core.pairs import Pairs
from contrasuite.core.similarity import cosine


def multi_similarity_mine(sim: Tensor, pairs: Pairs, epsilon: float = 0.1) -> Pairs:
    """Keep the informative pairs (step 1 of the module docstring); an anchor may keep none."""
    with torch.no_grad():
        neg = pairs.neg
        big = torch.finfo(sim.dtype).max
        hardest_pos = torch.where(pairs.pos, sim, big).amin(dim=1, keepdim=True)
        hardest_neg = torch.where(neg, sim, -big).amax(dim=1, keepdim=True)
        keep_pos = pairs.pos & (sim - epsilon < hardest_neg)
        keep_neg = neg & (sim + epsilon > hardest_pos)
    return Pairs(pos=keep_pos, valid=keep_pos | keep_neg)


def multi_similarity_loss(sim: Tensor, pairs: Pairs, *, alpha: float = 2.0, beta: float = 50.0, base: float = 0.5) -> Tensor:
    """Per-anchor loss ``[N]`` (step 2 of the module docstring) over ``pairs``; 0 for an anchor with no pairs."""
    # log(1 + sum exp(x)) = softplus(logsumexp(x)); an empty set gives softplus(log(tiny)) ~ 0.
    shifted = sim - base
    pos_term = F.softplus(masked_logsumexp(shifted * -alpha, pairs.pos, dim=1))
    neg_term = F.softplus(masked_logsumexp(shifted * beta, pairs.neg, dim=1))
    return pos_term / alpha + neg_term / beta


class MultiSimilarityLoss(ContrastiveObjective):
    """Multi-Similarity loss on cosine similarities, with the MS miner; see the module docstring.

    Args:
        alpha: positive scale. Default 2.
        beta: negative scale. Default 50 (the official code's config uses 40).
        base: similarity threshold ``lambda``. Default 0.5 (official code, PML; the paper states 1).
        epsilon: mining margin. Default 0.1.
        mine: apply the mining step (True, as in the paper) or weight every pair.
    """

    def __init__(
        self, alpha: float = 2.0, beta: float = 50.0, base: float = 0.5, epsilon: float = 0.1, mine: bool = True
    ) -> None:
        super().__init__()
        if alpha <= 0 or beta <= 0:
            raise ValueError(f"alpha and beta must be > 0, got alpha={alpha}, beta={beta}")
        self.alpha = alpha
        self.beta = beta
        self.base = base
        self.epsilon = epsilon
        self.mine = mine

    def per_anchor(self, anchors: Tensor, candidates: Tensor, pairs: Pairs, neg_weight: Tensor | None) -> Tensor:
        if neg_weight is not None:
            raise ValueError("MultiSimilarityLoss weights every pair itself; neg_weight is not supported")
        sim = cosine(anchors, candidates)
        if self.mine:
            pairs = multi_similarity_mine(sim, pairs, self.epsilon)
        return multi_similarity_loss(sim, pairs, alpha=self.alpha, beta=self.beta, base=self.base)
