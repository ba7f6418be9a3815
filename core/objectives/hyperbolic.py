"""Hyperbolic pairwise cross-entropy (Ermolov et al., "Hyperbolic Vision Transformers: Combining
Improvements in Metric Learning", CVPR 2022).

Euclidean features are clipped to norm ``clip_r`` and mapped onto the Poincare ball of curvature
``-c`` (:func:`contrasuite.core.similarity.poincare.to_ball`). Logits are negative geodesic distances
``l_ij = -d_c(z_i, z_j) / t`` and the loss is the InfoNCE cross-entropy on them::

    L_i = mean_{p in P_i} -log( exp(l_ip) / (exp(l_ip) + sum_{j in N_i} exp(l_ij)) )

With two samples per class (``two_view`` of the two slots, ``candidates=None``), this is exactly the
paper's loss: anchor ``z_a^i`` against all slot-``j`` samples and the other slot-``i`` samples. With
more samples per class the paper sums a cross-entropy over each ordered pair of slots, whose
denominator holds only those two slots; here every negative of the batch is in the denominator
(NT-Xent's convention). ``c = 0`` is the paper's sphere variant: ``l_ij = cos(z_i, z_j) / t``.
Defaults ``c = 0.1, temperature = 0.2, clip_r = 2.3`` are the paper's (sphere: ``c = 0, t = 0.1``).
"""

from __future__ import annotations

import torch
from torch import Tensor

from contrasuite.core.objectives.base import ContrastiveObjective
from contrasuite.core.objectives.infonce import weighted_infonce
from contrasuite.core.pairs import Pairs
from contrasuite.core.similarity import cosine
from contrasuite.core.similarity.poincare import pairwise_poincare_distance, to_ball


class HyperbolicPairwiseCE(ContrastiveObjective):
    """Pairwise cross-entropy on Poincare-ball distances; see the module docstring.

    Args:
        c: curvature magnitude (ball radius ``1/sqrt(c)``); 0 switches to the sphere (cosine). Default 0.1.
        temperature: ``t``. Default 0.2.
        clip_r: feature-clipping radius before the exponential map; 0 disables it. Default 2.3.
    """

    def __init__(self, c: float = 0.1, temperature: float = 0.2, clip_r: float = 2.3) -> None:
        super().__init__()
        if c < 0:
            raise ValueError(f"curvature c must be >= 0 (0 = sphere), got {c}")
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        self.c = c
        self.temperature = temperature
        self.clip_r = clip_r

    def logits(self, anchors: Tensor, candidates: Tensor) -> Tensor:
        """``[N, M]`` logits ``-d_c / t`` (or ``cos / t`` when ``c = 0``) of Euclidean features."""
        if self.c == 0:
            return cosine(anchors, candidates, scale=1.0 / self.temperature)
        if candidates is anchors:
            ball_a = ball_c = to_ball(anchors, self.c, self.clip_r)
        else:  # one pass of the row-wise maps over both sets (a few dozen small ops fewer)
            ball_a, ball_c = to_ball(torch.cat([anchors, candidates]), self.c, self.clip_r).split(
                [anchors.shape[0], candidates.shape[0]]
            )
        return pairwise_poincare_distance(ball_a, ball_c, self.c, scale=-1.0 / self.temperature)

    def per_anchor(self, anchors: Tensor, candidates: Tensor, pairs: Pairs, neg_weight: Tensor | None) -> Tensor:
        return weighted_infonce(self.logits(anchors, candidates), pairs, neg_weight)
