""":class:`WEINCERepro` (key ``weince_repro``; WEINCE of Erol et al., ICML 2026) is what the official
CIFAR-100 reproduction script trains: the blend plus ``0.5 * WeibitTopM + 0.5 * PLTopM``,
cross-entropies over [positive | the ``top_m = 50`` most similar negatives] with logits
``-beta_t log(1 - s)`` and ``s / t``. ``beta_t`` is a batch-global Weibull shape: the gate's log-log
OLS (:mod:`~contrasuite.core.objectives.weince_gate`, no wrong-sign penalty) on the pooled smallest
``max(1024, 5%)`` negative shortfalls (the gate's ``burn``), accepted when ``R^2 >= 0.85`` and
``beta_hat > 0``, clamped to ``[0.5, 16]``, folded into an EMA (momentum 0.9, start 4.0) kept in the
``beta_ema`` buffer so it checkpoints. The EMA moves in training mode only; eval uses it as is.

The gate and the blend are :class:`~contrasuite.core.objectives.weince.WEINCE`'s; numerics and the
distributed behaviour too (:mod:`contrasuite.core.objectives.weince`).
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor

from contrasuite.core.negatives.topk import (
    columns_at_least, fewest_negatives, largest, largest_indices, largest_overall, negative_count, negatives_only,
)
from contrasuite.core.numerics import safe_log1m
from contrasuite.core.objectives.infonce import weighted_infonce
from contrasuite.core.objectives.weince import WEINCE, weince, weince_with_gathered_terms
from contrasuite.core.objectives.weince_gate import StatisticsGather, centred, ols
from contrasuite.core.pairs import Pairs
from contrasuite.core.similarity import cosine


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


class WEINCERepro(WEINCE):
    """WEINCE as the official reproduction script trains it: blend + two top-M terms (module docstring).

    Args (besides :class:`WEINCE`'s):
        top_m: hardest negatives per anchor in the auxiliary terms. Default 50.
        weibit_weight, pl_weight: weights of WeibitTopM and PLTopM. Defaults 0.5 and 0.5.
        beta_init: start of the ``beta_t`` EMA. Default 4.0.
        beta_min, beta_max: clamp of an accepted ``beta_hat``. Defaults 0.5 and 16.
        beta_tail_frac, beta_min_tail_points: pooled tail size. Defaults 0.05 and 1024.
        beta_momentum: EMA momentum. Default 0.9.
        r2_min: smallest ``R^2`` to accept ``beta_hat``. Default 0.85.
    """

    def __init__(
        self,
        temperature: float = 0.5,
        beta: float = 1.0,
        q: float = 0.2,
        kappa_rho: float = 10.0,
        kappa_aic: float = 1.0,
        aic_margin: float = 2.0,
        tail_frac: float = 0.1,
        min_tail_points: int = 32,
        gate: str = "both",
        eps: float = 1e-6,
        top_m: int = 50,
        weibit_weight: float = 0.5,
        pl_weight: float = 0.5,
        beta_init: float = 4.0,
        beta_min: float = 0.5,
        beta_max: float = 16.0,
        beta_tail_frac: float = 0.05,
        beta_min_tail_points: int = 1024,
        beta_momentum: float = 0.9,
        r2_min: float = 0.85,
    ) -> None:
        super().__init__(temperature, beta, q, kappa_rho, kappa_aic, aic_margin, tail_frac, min_tail_points, gate, eps)
        if top_m < 1:
            raise ValueError(f"top_m must be >= 1, got {top_m}")
        if not 0.0 < beta_min <= beta_max:
            raise ValueError(f"need 0 < beta_min <= beta_max, got {beta_min}, {beta_max}")
        self.top_m, self.weibit_weight, self.pl_weight = top_m, weibit_weight, pl_weight
        self.beta_min, self.beta_max = beta_min, beta_max
        self.beta_tail_frac, self.beta_min_tail_points = beta_tail_frac, beta_min_tail_points
        self.beta_momentum, self.r2_min = beta_momentum, r2_min
        self.register_buffer("beta_ema", torch.tensor(float(beta_init)))

    @torch.no_grad()
    def batch_beta(self, sim: Tensor, pairs: Pairs, negatives: Tensor | None = None, hardest: Tensor | None = None) -> float:
        """``beta_t``: in training, fold an accepted pooled-tail estimate into the EMA first (``negatives``,
        ``hardest``: see :func:`pooled_tail_beta`)."""
        if self.training:
            fit = pooled_tail_beta(
                sim, pairs, self.beta_tail_frac, self.beta_min_tail_points, self.eps, self.gather_statistics, negatives,
                hardest,
            )
            if fit is not None and fit[1] >= self.r2_min and fit[0] > 0.0:
                clamped = min(max(fit[0], self.beta_min), self.beta_max)
                m = self.beta_momentum
                self.beta_ema.fill_(m * float(self.beta_ema) + (1.0 - m) * clamped)
        return float(self.beta_ema)

    def log_values(self) -> dict[str, float]:
        """:meth:`WEINCE.log_values` and the auxiliary terms' ``beta_t`` EMA."""
        return super().log_values() | {"beta_ema": float(self.beta_ema)}

    def top_m_terms(self, hard: Tensor, hard_pairs: Pairs, beta_t: float, hard_weight: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """The weighted WeibitTopM and PLTopM terms ``[N]`` on the top-M block ``hard``."""
        weibit = weighted_infonce(-beta_t * safe_log1m(hard, self.eps), hard_pairs, hard_weight)
        plackett_luce = weighted_infonce(hard / self.temperature, hard_pairs, hard_weight)
        return self.weibit_weight * weibit, self.pl_weight * plackett_luce

    def per_anchor(self, anchors: Tensor, candidates: Tensor, pairs: Pairs, neg_weight: Tensor | None) -> Tensor:
        sim = cosine(anchors, candidates)
        negatives = negatives_only(sim, pairs)  # one copy for the gate, the pooled tail and the top-M
        if neg_weight is None and pairs.targets is not None:
            # The gate partitions the copy in place (the pooled tail needs only its values, the top-M
            # columns come from sim), and the fused loss reuses it; one autograd function for the
            # blend and both top-M terms (one N x M gradient).
            lam, stats = self.compute_gate(sim, pairs, negatives, overwrite=True)
            beta_t = self.batch_beta(sim, pairs, negatives, stats.hardest)
            cols = top_m_columns(sim, pairs, self.top_m, hardest=stats.hardest)
            terms = functools.partial(self.top_m_terms, hard_pairs=top_m_block_pairs(cols), beta_t=beta_t)
            return weince_with_gathered_terms(
                sim, pairs, lam, self.temperature, cols, terms, self.beta, self.eps, scratch=negatives
            )
        lam, stats = self.compute_gate(sim, pairs, negatives)
        loss = weince(sim, pairs, lam, self.temperature, self.beta, self.eps, neg_weight)
        beta_t = self.batch_beta(sim, pairs, negatives, stats.hardest)
        hard, hard_pairs, hard_weight = restrict_to_top_m(sim, pairs, self.top_m, neg_weight, negatives, stats.hardest)
        weibit, plackett_luce = self.top_m_terms(hard, hard_pairs, beta_t, hard_weight)
        return loss + weibit + plackett_luce
