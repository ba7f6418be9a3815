"""WEINCE's gate (Erol et al., ICML 2026, arXiv:2606.00262; official ``tlambda_select``): per anchor, how far
the hardest negatives look like a Weibull tail, from the batch and without gradient.

``lambda_i = lambda_rho,i * lambda_aic,i``:

1. ``K`` = negatives per anchor (the smallest count over rows), ``k_tail = max(min_tail_points,
   round(tail_frac * K))`` clipped to ``[10, K]`` (``K`` wins when ``K < 10``). Take each anchor's
   ``k_tail`` most similar negatives; shortfalls ``delta = max(1 - s, eps)`` in ascending order; drop the
   first ``burn = max(1, k_tail // 20)``; ``n = k_tail - burn`` points remain.
2. Empirical CDF ``F_k = max(k / (k_tail + 1), eps)``. Two OLS fits on ``x = log delta`` (with intercept):
   Weibull ``log F ~ a + beta_hat x`` and Gumbel proxy ``log(-log F) ~ b - kappa x``. SSE clamped at
   ``1e-12``; a wrong-sign slope (``<= 0`` for Weibull, ``>= 0`` for Gumbel) adds ``1e6`` to its SSE.
   ``AIC = n log(SSE / n) + 4``; ``dAIC_i = AIC_G - AIC_W`` (positive favours Weibull).
3. ``rho_i = max(1 - max_j s_ij^-, eps)``; ``rho_0`` = element ``round(q (n_anchors - 1))`` of the
   sorted ``rho`` over all anchors of the (global) batch.
4. ``lambda_rho = sigmoid(kappa_rho (log max(rho_0, eps) - log rho_i))``,
   ``lambda_aic = sigmoid(kappa_aic (dAIC_i - margin))``; ``gate="both"`` multiplies them, ``"rho"`` and
   ``"aic"`` use one. When ``n < 2`` there is no tail evidence and ``lambda = 0`` (plain InfoNCE); the
   official ``tlambda_select`` then still applies the gates with ``dAIC = 0`` and the median ``rho``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable

import torch
from torch import Tensor

from contrasuite.core.negatives.topk import fewest_negatives, largest, negatives_only
from contrasuite.core.pairs import Pairs

StatisticsGather = Callable[[Tensor], Tensor]
GATES = ("both", "rho", "aic")


@dataclass(frozen=True)
class TailStatistics:
    """Per-anchor tail statistics of step 1-3 (module docstring)."""

    rho: Tensor
    """``[N]`` cap proximity ``1 - max negative similarity`` (>= eps)."""
    delta_aic: Tensor
    """``[N]`` ``AIC_Gumbel - AIC_Weibull``."""
    beta_hat: Tensor
    """``[N]`` Weibull slope, clamped at 0 (a diagnostic)."""
    n_eff: int
    """Points per anchor in the fits after the burn-in."""
    hardest: Tensor | None = None
    """``[N, k_tail]`` each anchor's largest negative similarities, descending (``None`` without negatives)."""


def tail_size(k_neg: int, tail_frac: float, min_tail_points: int) -> int:
    """``max(min_tail_points, round(tail_frac * K))`` clipped to ``[10, K]``, ``K`` winning."""
    k_tail = min(int(max(min_tail_points, round(tail_frac * k_neg))), k_neg)
    return min(max(10, k_tail), k_neg)


def ols(x: Tensor, yc: Tensor) -> tuple[Tensor, Tensor]:
    """OLS ``y_k ~ a + b x`` for each row of ``x [..., n]`` and each fixed, centred response ``yc [K, n]``,
    all at once: slopes ``[..., K]`` and SSEs ``[..., K]`` (>= 1e-12, from the residuals ``[..., K, n]``,
    made in one step)."""
    xc = x - x.mean(dim=-1, keepdim=True)
    slope = (xc @ yc.T) / (xc * xc).sum(dim=-1, keepdim=True).clamp_min(1e-12)
    residuals = torch.addcmul(yc, slope.unsqueeze(-1), xc.unsqueeze(-2), value=-1.0)
    return slope, residuals.square_().sum(dim=-1).clamp_min(1e-12)


def centred(y: Tensor) -> Tensor:
    """``y`` minus its mean along the last dimension."""
    return y - y.mean(dim=-1, keepdim=True)


@functools.lru_cache(maxsize=16)
def _tail_fit_constants(k_tail: int, burn: int, eps: float, dtype: torch.dtype, device: torch.device) -> tuple[Tensor, Tensor]:
    """What the per-anchor fits of step 2 share (module docstring), made once per tail size and never
    modified: the centred responses ``[2, n]``, ``log F`` (Weibull) and ``log(-log F)`` (Gumbel) of the
    empirical CDF past the burn-in, and the slope signs ``[2] = (1, -1)`` that make either wrong-sign
    slope ``<= 0``."""
    cdf = (torch.arange(1, k_tail + 1, dtype=dtype, device=device) / (k_tail + 1.0)).clamp_min(eps)[burn:]
    responses = torch.stack([torch.log(cdf), torch.log(-torch.log(cdf))])
    return centred(responses), torch.tensor([1.0, -1.0], dtype=dtype, device=device)


@torch.no_grad()
def tail_statistics(
    sim: Tensor,
    pairs: Pairs,
    tail_frac: float = 0.1,
    min_tail_points: int = 32,
    eps: float = 1e-6,
    negatives: Tensor | None = None,
    overwrite: bool = False,
) -> TailStatistics:
    """Steps 1-3 of the module docstring on cosine ``sim [N, M]`` with the negatives of ``pairs``
    (``negatives``: :func:`negatives_only` of them, when the caller already has it; ``overwrite``:
    their rows may be reordered in place, see :func:`largest`)."""
    sim = sim.detach()
    n = sim.shape[0]
    k_neg = fewest_negatives(pairs)
    zeros = torch.zeros(n, dtype=sim.dtype, device=sim.device)
    if k_neg == 0:
        return TailStatistics(rho=torch.ones_like(zeros), delta_aic=zeros, beta_hat=zeros, n_eff=0)
    k_tail = tail_size(k_neg, tail_frac, min_tail_points)
    if negatives is None:
        negatives, overwrite = negatives_only(sim, pairs), True  # a copy of its own
    top = largest(negatives, k_tail, overwrite)
    shortfall = torch.rsub(top, 1.0).clamp_min_(eps)  # [N, k_tail], ascending
    rho = shortfall[:, 0]
    burn = max(1, k_tail // 20)
    n_eff = k_tail - burn
    if n_eff < 2:
        return TailStatistics(rho=rho, delta_aic=zeros, beta_hat=zeros, n_eff=n_eff, hardest=top)
    responses, signs = _tail_fit_constants(k_tail, burn, eps, sim.dtype, sim.device)
    slopes, sses = ols(shortfall.log()[:, burn:], responses)  # [N, 2]: Weibull, Gumbel (one contiguous log)
    sses = torch.where(slopes * signs <= 0, sses + 1e6, sses)  # wrong-sign penalty
    aic = sses.div_(n_eff).log_().mul_(n_eff).add_(4.0)
    delta_aic, beta_hat = aic[:, 1] - aic[:, 0], slopes[:, 0].clamp_min(0.0)
    return TailStatistics(rho=rho, delta_aic=delta_aic, beta_hat=beta_hat, n_eff=n_eff, hardest=top)


def rho_pivot(rho: Tensor, q: float) -> Tensor:
    """``rho_0``: element ``round(q (n - 1))`` of the sorted ``rho`` (the official nearest-rank quantile)."""
    q = min(max(q, 0.0), 1.0)
    return torch.sort(rho).values[int(round(q * (rho.numel() - 1)))]


@dataclass(frozen=True)
class Gating:
    """The gate's settings (module docstring): ``lambda_rho = sigmoid(kappa_rho (log rho_0 - log rho_i))``
    with ``rho_0`` the ``q``-quantile of ``rho``, ``lambda_aic = sigmoid(kappa_aic (dAIC_i - aic_margin))``
    on tails of ``max(min_tail_points, round(tail_frac K))`` points; ``gate`` picks ``"both"`` (their
    product), ``"rho"`` or ``"aic"``. Defaults: the official ``tlambda_select``'s."""

    q: float = 0.2
    kappa_rho: float = 10.0
    kappa_aic: float = 1.0
    aic_margin: float = 2.0
    tail_frac: float = 0.1
    min_tail_points: int = 32
    gate: str = "both"

    def __post_init__(self) -> None:
        if self.gate not in GATES:
            raise ValueError(f"gate must be one of {GATES}, got {self.gate!r}")
        if not 0.0 <= self.q <= 1.0:
            raise ValueError(f"q must be in [0, 1], got {self.q}")


@torch.no_grad()
def weince_gate(sim: Tensor, pairs: Pairs, gating: Gating = Gating(), eps: float = 1e-6, *, gather: StatisticsGather | None = None,
                negatives: Tensor | None = None, overwrite: bool = False) -> tuple[Tensor, TailStatistics]:
    """Step 4: the per-anchor gate ``lambda [N]`` (no gradient) and its statistics (steps 1-3); ``gather``
    makes ``rho_0`` global; ``negatives`` and ``overwrite`` as in :func:`tail_statistics`."""
    stats = tail_statistics(sim, pairs, gating.tail_frac, gating.min_tail_points, eps, negatives, overwrite)
    rho_all = stats.rho if gather is None else gather(stats.rho)  # every rank calls gather
    if stats.n_eff < 2:
        return torch.zeros_like(stats.rho), stats
    rho0 = rho_pivot(rho_all, gating.q)
    lam_rho = torch.sigmoid(gating.kappa_rho * (torch.log(rho0.clamp_min(eps)) - torch.log(stats.rho.clamp_min(eps))))
    lam_aic = torch.sigmoid(gating.kappa_aic * (stats.delta_aic - gating.aic_margin))
    return {"both": lam_rho * lam_aic, "rho": lam_rho, "aic": lam_aic}[gating.gate], stats
