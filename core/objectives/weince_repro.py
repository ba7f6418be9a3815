"""The parts that make :class:`~contrasuite.core.objectives.weince.WEINCERepro` (key ``weince_repro``;
WEINCE of Erol et al., ICML 2026) what the official CIFAR-100 reproduction script trains: the blend plus

    weibit_weight * WeibitTopM + pl_weight * PLTopM          (0.5 and 0.5)

cross-entropies over [positive | the ``top_m = 50`` most similar negatives] with logits
``-beta_t log(1 - s)`` and ``s / t`` (:class:`TopMTerms`). ``beta_t`` is a batch-global Weibull shape
(:class:`BetaEMA`): the gate's log-log OLS (:mod:`~contrasuite.core.objectives.weince_gate`, no
wrong-sign penalty) on the pooled smallest ``max(1024, 5%)`` negative shortfalls (the gate's ``burn``),
accepted when ``R^2 >= 0.85`` and ``beta_hat > 0``, clamped to ``[0.5, 16]``, folded into an EMA
(momentum 0.9, start 4.0) that the objective keeps in its ``beta_ema`` buffer so it checkpoints. The EMA
moves in training mode only; eval uses it as is.

Numerics and the distributed behaviour: :mod:`contrasuite.core.objectives.weince`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from contrasuite.core.negatives.topk import (
    columns_at_least, fewest_negatives, largest, largest_indices, largest_overall, negative_count, negatives_only,
)
from contrasuite.core.numerics import safe_log1m
from contrasuite.core.objectives.infonce import weighted_infonce
from contrasuite.core.objectives.weince_gate import StatisticsGather, centred, ols
from contrasuite.core.pairs import Pairs


def top_m_pairs(sim: Tensor, pairs: Pairs, top_m: int) -> Pairs:
    """Keep the positives and each anchor's ``top_m`` most similar negatives (``min`` with the negative count)."""
    k = min(top_m, fewest_negatives(pairs))
    keep = torch.zeros(pairs.shape, dtype=torch.bool, device=sim.device)
    if k > 0:
        keep.scatter_(1, largest_indices(negatives_only(sim, pairs), k), True)
    return Pairs(pos=pairs.pos, valid=pairs.pos | (keep & pairs.neg))


def restrict_to_top_m(
    sim: Tensor,
    pairs: Pairs,
    top_m: int,
    neg_weight: Tensor | None = None,
    negatives: Tensor | None = None,
    hardest: Tensor | None = None,
) -> tuple[Tensor, Pairs, Tensor | None]:
    """``(sim, pairs, neg_weight)`` restricted to the positives and each anchor's ``top_m`` most
    similar negatives, for the kernel.

    Single-positive pairs gather those ``1 + k`` columns into ``[N, 1 + k]`` (positive first), so the
    top-M logits are computed on them only; other pairs keep ``[N, M]`` with the rest masked out
    (:func:`top_m_pairs`). ``negatives`` as in :func:`tail_statistics`; ``hardest`` (at least ``k``
    of each row's largest negatives, descending: :attr:`TailStatistics.hardest`) finds the columns
    by comparing with each row's ``k``-th value (:func:`columns_at_least`).
    """
    if pairs.targets is None:
        return sim, top_m_pairs(sim, pairs, top_m), neg_weight
    cols = top_m_columns(sim, pairs, top_m, negatives, hardest)
    weight = None if neg_weight is None else neg_weight.gather(1, cols)
    return sim.gather(1, cols), top_m_block_pairs(cols), weight


def top_m_columns(
    sim: Tensor, pairs: Pairs, top_m: int, negatives: Tensor | None = None, hardest: Tensor | None = None
) -> Tensor:
    """For single-positive ``pairs``: columns ``[N, 1 + k]``, each anchor's positive and then its
    ``k = min(top_m, K)`` most similar negatives (``negatives``, ``hardest``: see :func:`restrict_to_top_m`)."""
    k = min(top_m, fewest_negatives(pairs))
    cols = pairs.targets[:, None]
    if k > 0:
        found = None
        if hardest is not None and hardest.shape[1] >= k:
            rows = torch.arange(sim.shape[0], device=sim.device)
            excluded = (torch.cat([rows, rows]), torch.cat([pairs.targets, rows])) if pairs.exclude_self else (rows, pairs.targets)
            found = columns_at_least(sim, hardest[:, k - 1], k, excluded)
        if found is None:
            found = largest_indices(negatives_only(sim, pairs) if negatives is None else negatives, k)
        cols = torch.cat([cols, found], dim=1)
    return cols


def top_m_block_pairs(cols: Tensor) -> Pairs:
    """The pairs of the block ``sim.gather(1, cols)`` of :func:`top_m_columns`: the positive in column 0."""
    first = torch.zeros(cols.shape[0], dtype=torch.long, device=cols.device)
    return Pairs.single_positive(first, cols.shape[1])


@torch.no_grad()
def pooled_tail_beta(
    sim: Tensor,
    pairs: Pairs,
    tail_frac: float = 0.05,
    min_tail_points: int = 1024,
    eps: float = 1e-6,
    gather: StatisticsGather | None = None,
    negatives: Tensor | None = None,
    hardest: Tensor | None = None,
) -> tuple[float, float] | None:
    """Batch-global Weibull shape ``(beta_hat >= 0, R^2)`` from the pooled smallest negative shortfalls.

    ``None`` when there are fewer than 10 tail points or fewer than 2 after the burn-in. ``negatives``
    as in :func:`tail_statistics`; ``hardest`` (:attr:`TailStatistics.hardest` of the same negatives)
    lets the pooled tail be selected from each row's tail values where they hold it
    (:func:`largest_overall`).
    """
    count = local_count = negative_count(pairs)
    if gather is not None:
        count = int(gather(torch.tensor([count], device=sim.device)).sum())
    k_tail = min(int(max(min_tail_points, tail_frac * count)), count)
    if k_tail < 10:
        return None
    # The smallest shortfalls 1 - s are the largest negative similarities (clamping keeps the order).
    pooled = negatives_only(sim, pairs) if negatives is None else negatives
    if gather is None:
        tail = (1.0 - largest_overall(pooled, k_tail, hardest)).clamp_min(eps)
    else:
        local = min(k_tail, local_count)
        shortfalls = (1.0 - largest_overall(pooled, local, hardest)).clamp_min(eps) if local else pooled.flatten()[:0]
        tail = -largest(-gather(shortfalls), k_tail)
    cdf = torch.arange(1, k_tail + 1, dtype=tail.dtype, device=tail.device) / (k_tail + 1.0)
    burn = max(1, k_tail // 20)
    if k_tail - burn < 2:
        return None
    yc = centred(torch.log(cdf)[None, burn:])
    slope, sse = ols(torch.log(tail)[burn:], yc)
    r2 = (1.0 - sse / (yc * yc).sum().clamp_min(1e-12)).clamp(0.0, 1.0)
    return float(slope.clamp_min(0.0)), float(r2)


@dataclass(frozen=True)
class TopMTerms:
    """The repro's auxiliary terms on the top-M block (module docstring):
    ``weibit_weight * CE(-beta_t log(1 - s)) + pl_weight * CE(s / t)`` over [positive | ``top_m`` hardest negatives]."""

    top_m: int = 50
    weibit_weight: float = 0.5
    pl_weight: float = 0.5

    def __post_init__(self) -> None:
        if self.top_m < 1:
            raise ValueError(f"top_m must be >= 1, got {self.top_m}")

    def __call__(
        self, hard: Tensor, hard_pairs: Pairs, beta_t: float, temperature: float, eps: float, hard_weight: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """The weighted WeibitTopM and PLTopM terms ``[N]`` on the top-M block ``hard`` (``s`` clamped to ``1 - eps``)."""
        weibit = weighted_infonce(-beta_t * safe_log1m(hard, eps), hard_pairs, hard_weight)
        plackett_luce = weighted_infonce(hard / temperature, hard_pairs, hard_weight)
        return self.weibit_weight * weibit, self.pl_weight * plackett_luce


@dataclass(frozen=True)
class BetaEMA:
    """``beta_t``, the Weibit term's shape (module docstring): from ``beta_init``,
    ``beta_t <- beta_momentum beta_t + (1 - beta_momentum) clamp(beta_hat, beta_min, beta_max)`` for each
    pooled-tail fit (``max(beta_min_tail_points, beta_tail_frac * count)`` points) with ``R^2 >= r2_min``
    and ``beta_hat > 0``."""

    beta_init: float = 4.0
    beta_min: float = 0.5
    beta_max: float = 16.0
    beta_tail_frac: float = 0.05
    beta_min_tail_points: int = 1024
    beta_momentum: float = 0.9
    r2_min: float = 0.85

    def __post_init__(self) -> None:
        if not 0.0 < self.beta_min <= self.beta_max:
            raise ValueError(f"need 0 < beta_min <= beta_max, got {self.beta_min}, {self.beta_max}")

    @torch.no_grad()
    def update(self, beta_t: float, sim: Tensor, pairs: Pairs, eps: float, gather: StatisticsGather | None = None,
               negatives: Tensor | None = None, hardest: Tensor | None = None) -> float:
        """The next ``beta_t``: ``beta_t`` with this batch's accepted fit folded in (``gather``, ``negatives``,
        ``hardest``: see :func:`pooled_tail_beta`)."""
        fit = pooled_tail_beta(sim, pairs, self.beta_tail_frac, self.beta_min_tail_points, eps, gather, negatives, hardest)
        if fit is not None and fit[1] >= self.r2_min and fit[0] > 0.0:
            clamped = min(max(fit[0], self.beta_min), self.beta_max)
            return self.beta_momentum * beta_t + (1.0 - self.beta_momentum) * clamped
        return beta_t
