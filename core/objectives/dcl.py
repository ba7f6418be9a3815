"""Decoupled Contrastive Learning (Yeh et al., ECCV 2022, arXiv:2110.06848): DCL and DCLW.

InfoNCE with the positive removed from the denominator (logits ``l = s / t``)::

    L_i = mean_{p in P_i} [ -w_ip * l_ip + log sum_{j in N_i} w'_ij exp(l_ij) ]

``w_ip = 1`` is DCL. DCLW weights the positive with the negative von Mises-Fisher weight
``w_ip = 2 - exp(s_ip / sigma) / E_{(k,q) positive}[exp(s_kq / sigma)]`` (sigma = 0.5), detached,
the mean taken over every positive pair of the batch (lightly's ``negative_mises_fisher_weights``).
``w'_ij`` are the optional per-negative weights of the contract. The denominator is the shared
kernel :func:`~contrasuite.core.objectives.infonce.weighted_infonce` with ``a = 0``.

With ``two_view`` labels and ``candidates=None`` every row's negatives are both views of the other
images, the paper's ``sum_{l in {1,2}, j != i}`` in one log-sum-exp. lightly's ``DCLLoss`` instead adds
two separate log-sum-exps (same-view and cross-view); we follow the paper.

Distributed: ``DCL`` is row-local (``Distributed.GATHER_CANDIDATES``). ``DCLW``'s normaliser is a
mean over the whole batch (``Distributed.GLOBAL_STATISTICS``): set ``objective.gather_statistics`` to
a callable that concatenates a detached tensor along dim 0 over ranks (same shape on every rank); it
receives ``[1, 2]`` = (log-sum-exp of ``s / sigma`` over local positive pairs, their count).
lightly normalises over the local batch only.
"""

from __future__ import annotations

import math
from typing import Callable, ClassVar

import torch
from torch import Tensor

from contrasuite.core.objectives.base import ContrastiveObjective, Distributed
from contrasuite.core.objectives.infonce import positive_logits, tiled_weighted_infonce, weighted_infonce
from contrasuite.core.pairs import Pairs
from contrasuite.core.similarity import cosine, cosine_factors
from contrasuite.core.tiling import check_tile_size

StatisticsGather = Callable[[Tensor], Tensor]


def decoupled_infonce(
    logits: Tensor, pairs: Pairs, neg_weight: Tensor | None = None, pos_weight: Tensor | None = None
) -> Tensor:
    """Per-anchor DCL loss ``[N]`` on ``logits [N, M]``; ``pos_weight [P]`` scales each positive's logit,
    the positives in row-major order (:meth:`~contrasuite.core.pairs.Pairs.positive_indices`)."""
    loss = weighted_infonce(logits, pairs, neg_weight, positive_in_denominator=False)
    if pos_weight is None:
        return loss
    # weighted_infonce already subtracts l_ip once; subtract the remaining (w_ip - 1) l_ip.
    rows, cols = pairs.positive_indices()
    extra = (pos_weight - 1.0) * logits[rows, cols]
    if pairs.targets is not None:  # one positive per anchor, in row order
        return loss - extra
    n_pos = torch.zeros_like(loss).index_add(0, rows, torch.ones_like(pos_weight))
    return loss - torch.zeros_like(loss).index_add(0, rows, extra) / n_pos.clamp_min(1)


@torch.no_grad()
def vmf_weights(pos_sim: Tensor, sigma: float = 0.5, gather: StatisticsGather | None = None) -> Tensor:
    """DCLW's ``w = 2 - exp(s / sigma) / mean_{positives} exp(s / sigma)`` for the similarities of
    the positive pairs ``pos_sim [P]`` (no gradient); only positives are weighted, so only they are needed.

    ``gather`` (optional) concatenates a ``[1, 2]`` tensor over ranks so the mean is over the global batch.
    """
    return vmf_weight_map(pos_sim, sigma, gather)(pos_sim)


@torch.no_grad()
def vmf_weight_map(pos_sim: Tensor, sigma: float = 0.5, gather: StatisticsGather | None = None) -> Callable[[Tensor], Tensor]:
    """:func:`vmf_weights` as a map from any positives' similarities to their weights, the mean taken
    over ``pos_sim [P]`` (the batch's positives): what a tiled DCLW applies block by block."""
    scaled = pos_sim.detach() / sigma
    lse = torch.logsumexp(scaled, dim=0) if scaled.numel() else scaled.new_tensor(math.log(torch.finfo(scaled.dtype).tiny))
    if gather is None:
        log_mean = lse - math.log(max(scaled.numel(), 1))
    else:
        stats = gather(torch.stack([lse, scaled.new_tensor(float(scaled.numel()))]).unsqueeze(0))
        log_mean = torch.logsumexp(stats[:, 0], dim=0) - torch.log(stats[:, 1].sum().clamp_min(1.0))
    return lambda sim: torch.rsub((sim.detach() / sigma).sub_(log_mean).exp_(), 2.0)


class DCL(ContrastiveObjective):
    """Decoupled contrastive loss (positive not in the denominator); see the module docstring.

    Args:
        temperature: ``t`` in ``s / t``. Default 0.1 (lightly's ``DCLLoss`` default).
        tile_size: compute the loss in tiles (:func:`~contrasuite.core.objectives.infonce.tiled_weighted_infonce`);
            ``None`` (default): dense.
    """

    tiles: ClassVar[bool] = True
    distributed: ClassVar[Distributed] = Distributed.GATHER_CANDIDATES

    def __init__(self, temperature: float = 0.1, tile_size: int | None = None) -> None:
        super().__init__()
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        self.temperature = temperature
        self.tile_size = check_tile_size(tile_size)

    def positive_weight(self, pos_logits: Tensor) -> Callable[[Tensor], Tensor] | None:
        """The map from positive logits ``s / t`` to the weights of those logits, its batch statistics
        taken from all positive logits ``pos_logits [P]``; ``None`` (all ones) for plain DCL."""
        return None

    def per_anchor(self, anchors: Tensor, candidates: Tensor, pairs: Pairs, neg_weight: Tensor | None) -> Tensor:
        scale = 1.0 / self.temperature
        rows, cols = pairs.positive_indices()
        if self.tile_size is not None:
            x, y = cosine_factors(anchors, candidates, scale)
            with torch.no_grad():
                weight = self.positive_weight(positive_logits(x, y, rows, cols))
            return tiled_weighted_infonce(
                x, y, pairs, neg_weight, self.tile_size, positive_in_denominator=False, positive_weight=weight
            )
        logits = cosine(anchors, candidates, scale=scale)
        pos_logits = logits[rows, cols]
        weight = self.positive_weight(pos_logits)
        return decoupled_infonce(logits, pairs, neg_weight, None if weight is None else weight(pos_logits))


class DCLW(DCL):
    """DCL with the negative von Mises-Fisher weight on the positive (paper Eq. 6; lightly ``DCLWLoss``).

    Args:
        temperature: ``t``. Default 0.1.
        sigma: vMF concentration scale. Default 0.5 (paper and lightly).
        tile_size: as :class:`DCL` (the weights need only the positives' similarities).
    """

    distributed: ClassVar[Distributed] = Distributed.GLOBAL_STATISTICS

    def __init__(self, temperature: float = 0.1, sigma: float = 0.5, tile_size: int | None = None) -> None:
        super().__init__(temperature, tile_size)
        if sigma <= 0 or not math.isfinite(sigma):
            raise ValueError(f"sigma must be > 0, got {sigma}")
        self.sigma = sigma
        self.gather_statistics: StatisticsGather | None = None

    def positive_weight(self, pos_logits: Tensor) -> Callable[[Tensor], Tensor]:
        weights = vmf_weight_map(pos_logits * self.temperature, self.sigma, self.gather_statistics)
        return lambda logits: weights(logits * self.temperature)
