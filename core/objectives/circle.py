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

import torch
import torch.nn.functional as F
from torch import Tensor

from contrasuite.core.numerics import masked_logsumexp
from contrasuite.core.objectives.base import ContrastiveObjective
from contrasuite.core.pairs import Pairs
from contrasuite.core.similarity import cosine


def circle_loss(
    sim: Tensor, pairs: Pairs, *, m: float = 0.4, gamma: float = 80.0, detach_weights: bool = True
) -> Tensor:
    """Per-anchor circle loss ``[N]`` on cosine similarities ``sim [N, M]`` (module docstring).

    An anchor without positives or without negatives gets 0 (``log(1 + 0)``).
    """
    detached = sim.detach() if detach_weights else sim
    pos_logits = -gamma * torch.relu(1 + m - detached) * (sim - (1 - m))
    neg_logits = gamma * torch.relu(detached + m) * (sim - m)
    neg = pairs.neg
    lse_pos = masked_logsumexp(pos_logits, pairs.pos, dim=1)
    lse_neg = masked_logsumexp(neg_logits, neg, dim=1)
    losses = F.softplus(lse_pos + lse_neg)
    both = pairs.has_pos & neg.any(dim=1)
    return torch.where(both, losses, torch.zeros_like(losses))


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
