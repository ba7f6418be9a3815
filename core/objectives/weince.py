"""WEINCE (Erol, Evren, Ozel, Morgan, Ryu, Zheng, "When Softmax Fails at the Top: Extreme-Value
Corrections for InfoNCE", ICML 2026, arXiv:2606.00262; official code github.com/hsme98/weince,
``simclr/modules/nt_xent_hard_select.py``, policy ``tlambda_select``).

Logits blend the InfoNCE coordinate with the endpoint-shortfall ("Weibit") coordinate per anchor, on
cosine similarities ``s`` clamped to ``s <= 1 - eps``::

    l_ij = (1 - lambda_i) * s_ij / t + lambda_i * ( -beta * log(1 - s_ij) )
    L_i  = cross-entropy of the positive over {positive} + negatives        (shared weighted kernel)

``beta = 1`` as in the shipped code (the README figure writes an estimated shape; pass ``beta``).
The gate ``lambda_i = lambda_rho,i * lambda_aic,i`` is computed without gradient from the batch:

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

:class:`WEINCERepro` (key ``weince_repro``) is what the official CIFAR-100 reproduction script trains:
the blend plus ``0.5 * WeibitTopM + 0.5 * PLTopM``, cross-entropies over [positive | the ``top_m = 50``
most similar negatives] with logits ``-beta_t log(1 - s)`` and ``s / t``. ``beta_t`` is a batch-global
Weibull shape: the same log-log OLS (no wrong-sign penalty) on the pooled smallest
``max(1024, 5%)`` negative shortfalls (``burn`` as above), accepted when ``R^2 >= 0.85`` and
``beta_hat > 0``, clamped to ``[0.5, 16]``, folded into an EMA (momentum 0.9, start 4.0) kept in the
``beta_ema`` buffer so it checkpoints. The EMA moves in training mode only; eval uses it as is.

Numerics: all of it in fp32 (float64 for gradcheck) whatever the autocast; ``-log(1 - s)`` via
:func:`~contrasuite.core.numerics.safe_log1m`. The gate statistics never carry gradient.

Distributed: ``Distributed.GLOBAL_STATISTICS``. Each anchor's row (local anchors against gathered
candidates) holds its own tail statistics; only ``rho_0`` (and the repro's pooled tail) need the whole
batch. Set ``objective.gather_statistics`` to a callable that concatenates a detached tensor along
dim 0 over ranks (same shape on every rank, i.e. equal local batches); it is called, on every rank
and in this order, with the local ``rho [N_local]``, then (repro, training) with the local negative
count ``[1]`` and the local smallest shortfalls ``[min(k_tail, K_local)]``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable, ClassVar

import torch
from torch import Tensor

from contrasuite.core.negatives.topk import (
    columns_at_least, fewest_negatives, largest, largest_indices, largest_overall, negative_count, negatives_only,
)
from contrasuite.core.numerics import exp_shifted_, full_precision, safe_log1m
from contrasuite.core.objectives.base import ContrastiveObjective, Distributed
from contrasuite.core.objectives.infonce import weighted_infonce
from contrasuite.core.pairs import Pairs
from contrasuite.core.similarity import cosine

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


def _ols(x: Tensor, yc: Tensor) -> tuple[Tensor, Tensor]:
    """OLS ``y_k ~ a + b x`` for each row of ``x [..., n]`` and each fixed, centred response ``yc [K, n]``,
    all at once: slopes ``[..., K]`` and SSEs ``[..., K]`` (>= 1e-12, from the residuals ``[..., K, n]``,
    made in one step)."""
    xc = x - x.mean(dim=-1, keepdim=True)
    slope = (xc @ yc.T) / (xc * xc).sum(dim=-1, keepdim=True).clamp_min(1e-12)
    residuals = torch.addcmul(yc, slope.unsqueeze(-1), xc.unsqueeze(-2), value=-1.0)
    return slope, residuals.square_().sum(dim=-1).clamp_min(1e-12)


def _centred(y: Tensor) -> Tensor:
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
    return _centred(responses), torch.tensor([1.0, -1.0], dtype=dtype, device=device)


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
    slopes, sses = _ols(shortfall.log()[:, burn:], responses)  # [N, 2]: Weibull, Gumbel (one contiguous log)
    sses = torch.where(slopes * signs <= 0, sses + 1e6, sses)  # wrong-sign penalty
    aic = sses.div_(n_eff).log_().mul_(n_eff).add_(4.0)
    delta_aic, beta_hat = aic[:, 1] - aic[:, 0], slopes[:, 0].clamp_min(0.0)
    return TailStatistics(rho=rho, delta_aic=delta_aic, beta_hat=beta_hat, n_eff=n_eff, hardest=top)


def rho_pivot(rho: Tensor, q: float) -> Tensor:
    """``rho_0``: element ``round(q (n - 1))`` of the sorted ``rho`` (the official nearest-rank quantile)."""
    q = min(max(q, 0.0), 1.0)
    return torch.sort(rho).values[int(round(q * (rho.numel() - 1)))]


@torch.no_grad()
def gate_from_statistics(
    rho: Tensor,
    delta_aic: Tensor,
    rho0: Tensor,
    kappa_rho: float = 10.0,
    kappa_aic: float = 1.0,
    aic_margin: float = 2.0,
    gate: str = "both",
    eps: float = 1e-6,
) -> Tensor:
    """Step 4: ``lambda [N]`` from the statistics and the pivot ``rho0``."""
    lam_rho = torch.sigmoid(kappa_rho * (torch.log(rho0.clamp_min(eps)) - torch.log(rho.clamp_min(eps))))
    lam_aic = torch.sigmoid(kappa_aic * (delta_aic - aic_margin))
    return {"both": lam_rho * lam_aic, "rho": lam_rho, "aic": lam_aic}[gate]


@torch.no_grad()
def weince_gate(
    sim: Tensor,
    pairs: Pairs,
    *,
    q: float = 0.2,
    kappa_rho: float = 10.0,
    kappa_aic: float = 1.0,
    aic_margin: float = 2.0,
    tail_frac: float = 0.1,
    min_tail_points: int = 32,
    gate: str = "both",
    eps: float = 1e-6,
    gather: StatisticsGather | None = None,
    negatives: Tensor | None = None,
    overwrite: bool = False,
) -> tuple[Tensor, TailStatistics]:
    """The per-anchor gate ``lambda [N]`` (no gradient) and its statistics; ``gather`` makes ``rho_0``
    global; ``negatives`` and ``overwrite`` as in :func:`tail_statistics`."""
    stats = tail_statistics(sim, pairs, tail_frac, min_tail_points, eps, negatives, overwrite)
    rho_all = stats.rho if gather is None else gather(stats.rho)  # every rank calls gather
    if stats.n_eff < 2:
        return torch.zeros_like(stats.rho), stats
    rho0 = rho_pivot(rho_all, q)
    return gate_from_statistics(stats.rho, stats.delta_aic, rho0, kappa_rho, kappa_aic, aic_margin, gate, eps), stats


def _blend_with_slope(
    sim: Tensor,
    alpha: Tensor,
    gamma: Tensor,
    eps: float,
    out: tuple[Tensor, Tensor] | None = None,
    clamped: bool | None = None,
) -> tuple[Tensor, Tensor]:
    """Two fresh ``[N, M]`` buffers (or the two of ``out``): the logits ``alpha_i s_ij - gamma_i
    log(1 - min(s_ij, 1 - eps))`` (constant ``alpha, gamma [N, 1]``) and their slope ``d/ds = alpha +
    gamma / (1 - s)`` where ``s <= 1 - eps``, ``alpha`` where the clamp is active (it passes no gradient
    above ``1 - eps``). ``clamped``: whether any ``s > 1 - eps`` (found here when ``None``).

    ``log(1 - s)`` rather than ``log1p(-s)``: with ``s <= 1 - eps`` they differ by about one unit in
    the last place of the logit, and torch's CPU ``log1p`` is not vectorised (measured 30x slower).
    """
    if out is None:
        shortfall = sim.clamp(max=1.0 - eps).neg_().add_(1.0)
        slope = shortfall.reciprocal().mul_(gamma)
    else:
        shortfall = torch.clamp(sim, max=1.0 - eps, out=out[0]).neg_().add_(1.0)
        slope = torch.reciprocal(shortfall, out=out[1]).mul_(gamma)
    if clamped is None:
        clamped = bool(sim.numel() and sim.amax() > 1.0 - eps)
    if clamped:
        slope.masked_fill_(sim > 1.0 - eps, 0.0)
    logits = shortfall.log_().mul_(-gamma).addcmul_(sim, alpha)
    return logits, slope.add_(alpha)


BLEND_BLOCK_ELEMENTS = 1 << 18
"""Elements (1 MiB of fp32) per block of rows in which :class:`_BlendCrossEntropy` forms its logits."""


def _blend_cross_entropy_rows(
    sim: Tensor, alpha: Tensor, gamma: Tensor, eps: float, targets: Tensor, exclude_self: bool, out: Tensor | None = None
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The forward of :class:`_BlendCrossEntropy` one block of rows at a time: ``(P, s, slope at the
    targets, loss)``. A block's logits and slope live in two buffers of :data:`BLEND_BLOCK_ELEMENTS`
    reused by every block (they stay in cache); ``P = slope * exp(l - max)`` goes into ``out`` (a
    fresh ``[N, M]`` buffer when ``None``), the only ``N x M`` buffer written. Row by row the same
    operations as on the whole matrix, so the same values."""
    n, m = sim.shape
    product = torch.empty_like(sim) if out is None else out
    totals, lse, positive, positive_slope = sim.new_empty((4, n)).unbind(0)
    rows = max(1, min(n, BLEND_BLOCK_ELEMENTS // max(m, 1)))
    buffers = sim.new_empty((2, rows, m)).unbind(0)
    clamped = bool(sim.numel() and sim.amax() > 1.0 - eps)
    lowest = torch.finfo(sim.dtype).min
    for start in range(0, n, rows):
        stop = min(n, start + rows)
        block = (buffers[0][: stop - start], buffers[1][: stop - start])
        logits, slope = _blend_with_slope(sim[start:stop], alpha[start:stop], gamma[start:stop], eps, block, clamped)
        column = targets[start:stop, None]
        positive[start:stop] = logits.gather(1, column).squeeze(1)
        positive_slope[start:stop] = slope.gather(1, column).squeeze(1)
        if exclude_self:  # the lowest value: E = 0 there exactly, so P = 0
            logits.diagonal(offset=start).fill_(lowest)
        e, totals[start:stop], lse[start:stop] = exp_shifted_(logits)
        torch.mul(slope, e, out=product[start:stop])
    return product, totals, positive_slope, lse - positive


class _BlendLogits(torch.autograd.Function):
    """The blend logits of :func:`_blend_with_slope`, whose slope the backward multiplies by the gradient.

    Autograd through the plain expression allocates about seven ``N x M`` temporaries forward and as
    many backward; here the forward fills two buffers in place and the backward one more.
    """

    @staticmethod
    def forward(ctx, sim: Tensor, alpha: Tensor, gamma: Tensor, eps: float) -> Tensor:  # type: ignore[override]
        logits, slope = _blend_with_slope(sim, alpha, gamma, eps)
        ctx.save_for_backward(slope)
        return logits

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None, None, None]:  # type: ignore[override]
        (slope,) = ctx.saved_tensors
        return grad * slope, None, None, None


GatheredTerms = Callable[[Tensor], "tuple[Tensor, ...]"]
"""Per-anchor loss terms ``[N]`` each, of the similarities gathered at some columns ``[N, C]`` (autograd ops)."""


class _BlendCrossEntropy(torch.autograd.Function):
    """Per-anchor cross-entropy ``log sum_j exp(l_ij) - l_{i, t_i}`` of the blend logits ``l``
    (:func:`_blend_with_slope`) for single positives ``targets [N]``; with ``exclude_self`` the
    self-pairs ``(i, i)`` are left out of the sum.

    Forward: the logits become ``E = exp(l - max)`` in place (row sums ``s``;
    :func:`~contrasuite.core.numerics.exp_shifted_`) and the slope ``P = slope * E``. Backward, with
    ``dL/dl_ij = g_i (E_ij / s_i - [j = t_i])``: ``dL/ds_ij = (g_i / s_i) P_ij - g_i slope_{i, t_i} [j = t_i]``,
    one ``N x M`` step. :class:`_BlendLogits` and ``F.cross_entropy`` take about ten.

    The forward works in blocks of rows (:func:`_blend_cross_entropy_rows`) and writes ``P`` into
    ``scratch`` (an ``[N, M]`` buffer like ``sim`` that may be overwritten) when given.

    ``columns [N, C]`` and ``terms``: each term of ``terms(sim.gather(1, columns))`` is added to the
    loss, in order, and its gradient (autograd on the ``[N, C]`` block, recomputed in the backward) is
    scatter-added into the same ``N x M`` gradient, which spares autograd the gather's zero-filled
    ``N x M`` gradient and its sum with this one (WEINCE-repro's top-M terms; the values are those of
    the separate gather and terms).
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx,
        sim: Tensor,
        alpha: Tensor,
        gamma: Tensor,
        eps: float,
        targets: Tensor,
        exclude_self: bool,
        columns: Tensor | None = None,
        terms: GatheredTerms | None = None,
        scratch: Tensor | None = None,
    ) -> Tensor:
        gathered = None if terms is None else sim.gather(1, columns)
        product, total, positive_slope, loss = _blend_cross_entropy_rows(sim, alpha, gamma, eps, targets, exclude_self, scratch)
        ctx.save_for_backward(product, total, positive_slope, targets, columns, gathered)
        ctx.terms = terms
        if terms is not None:
            for term in terms(gathered):
                loss = loss + term
        return loss

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        weighted_slope, total, positive_slope, targets, columns, gathered = ctx.saved_tensors
        out = weighted_slope * (grad / total)[:, None]
        out.scatter_add_(1, targets[:, None], (-grad * positive_slope)[:, None])
        if ctx.terms is not None:
            with torch.enable_grad(), full_precision(gathered):
                block = gathered.detach().requires_grad_()
                found = ctx.terms(block)
                (block_grad,) = torch.autograd.grad(found, block, [grad] * len(found))
            out.scatter_add_(1, columns, block_grad)
        return out, None, None, None, None, None, None, None, None


def _blend_coefficients(sim: Tensor, lam: Tensor, temperature: float, beta: float, eps: float) -> tuple[Tensor, Tensor, float]:
    """``alpha = (1 - lambda) / t`` and ``gamma = lambda beta`` ``[N, 1]`` of a detached gate ``lam [N]``,
    and ``eps`` raised to ``sim``'s resolution, as in :func:`~contrasuite.core.numerics.safe_log1m`."""
    lam = lam.detach().to(sim.dtype).unsqueeze(1)
    return (1.0 - lam) / temperature, lam * beta, max(eps, float(torch.finfo(sim.dtype).eps))


def weince_logits(sim: Tensor, lam: Tensor, temperature: float, beta: float = 1.0, eps: float = 1e-6) -> Tensor:
    """``(1 - lambda_i) s / t + lambda_i (-beta log(1 - s))`` for cosine ``sim [N, M]`` and a
    constant (detached) gate ``lam [N]``; ``s`` is clamped to ``1 - eps``, ``eps`` raised to the
    dtype's resolution, as in :func:`~contrasuite.core.numerics.safe_log1m`."""
    return _BlendLogits.apply(sim, *_blend_coefficients(sim, lam, temperature, beta, eps))


def weince(
    sim: Tensor,
    pairs: Pairs,
    lam: Tensor,
    temperature: float,
    beta: float = 1.0,
    eps: float = 1e-6,
    neg_weight: Tensor | None = None,
    *,
    scratch: Tensor | None = None,
) -> Tensor:
    """Per-anchor WEINCE ``[N]`` for a given gate ``lam [N]`` (the kernel with the positive in the
    denominator); unweighted single-positive pairs take the fused :class:`_BlendCrossEntropy`, which
    may overwrite ``scratch`` (an ``[N, M]`` tensor like ``sim``) instead of allocating a buffer."""
    if neg_weight is None and pairs.targets is not None:
        alpha, gamma, eps = _blend_coefficients(sim, lam, temperature, beta, eps)
        return _BlendCrossEntropy.apply(sim, alpha, gamma, eps, pairs.targets, pairs.exclude_self, None, None, scratch)
    return weighted_infonce(weince_logits(sim, lam, temperature, beta, eps), pairs, neg_weight)


def weince_with_gathered_terms(
    sim: Tensor,
    pairs: Pairs,
    lam: Tensor,
    temperature: float,
    columns: Tensor,
    terms: GatheredTerms,
    beta: float = 1.0,
    eps: float = 1e-6,
    scratch: Tensor | None = None,
) -> Tensor:
    """:func:`weince` of unweighted single-positive ``pairs`` plus each term of
    ``terms(sim.gather(1, columns))`` (in order), in one autograd function (:class:`_BlendCrossEntropy`;
    ``scratch`` as in :func:`weince`)."""
    alpha, gamma, eps = _blend_coefficients(sim, lam, temperature, beta, eps)
    return _BlendCrossEntropy.apply(sim, alpha, gamma, eps, pairs.targets, pairs.exclude_self, columns, terms, scratch)


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
    yc = _centred(torch.log(cdf)[None, burn:])
    slope, sse = _ols(torch.log(tail)[burn:], yc)
    r2 = (1.0 - sse / (yc * yc).sum().clamp_min(1e-12)).clamp(0.0, 1.0)
    return float(slope.clamp_min(0.0)), float(r2)


class WEINCE(ContrastiveObjective):
    """WEINCE (the paper's blend, official ``tlambda_select``); see the module docstring.

    Args:
        temperature: ``t``. Default 0.5 (the paper's SimCLR runs).
        beta: shape in the shortfall coordinate. Default 1 (official code).
        q: quantile level of ``rho_0``. Default 0.2.
        kappa_rho, kappa_aic: gate sharpness. Defaults 10 and 1.
        aic_margin: ``dAIC`` margin. Default 2.
        tail_frac, min_tail_points: per-anchor tail size. Defaults 0.1 and 32.
        gate: ``"both"`` (default), ``"rho"`` or ``"aic"``.
        eps: shortfall clamp ``s <= 1 - eps`` (raised to the dtype's resolution). Default 1e-6.

    After each call ``last_lambda`` holds the detached gate ``[N]``; :meth:`log_values` summarises it.
    """

    distributed: ClassVar[Distributed] = Distributed.GLOBAL_STATISTICS

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
    ) -> None:
        super().__init__()
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        if gate not in GATES:
            raise ValueError(f"gate must be one of {GATES}, got {gate!r}")
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"q must be in [0, 1], got {q}")
        if not 0.0 < eps < 1.0:
            raise ValueError(f"eps must be in (0, 1), got {eps}")
        self.temperature, self.beta = temperature, beta
        self.q, self.kappa_rho, self.kappa_aic, self.aic_margin = q, kappa_rho, kappa_aic, aic_margin
        self.tail_frac, self.min_tail_points, self.gate, self.eps = tail_frac, min_tail_points, gate, eps
        self.gather_statistics: StatisticsGather | None = None
        self.last_lambda: Tensor | None = None

    def compute_gate(
        self, sim: Tensor, pairs: Pairs, negatives: Tensor | None = None, overwrite: bool = False
    ) -> tuple[Tensor, TailStatistics]:
        """The no-gradient gate ``lambda [N]`` for cosine ``sim [N, M]`` and its statistics (``negatives``,
        ``overwrite``: see :func:`tail_statistics`)."""
        lam, stats = weince_gate(
            sim,
            pairs,
            q=self.q,
            kappa_rho=self.kappa_rho,
            kappa_aic=self.kappa_aic,
            aic_margin=self.aic_margin,
            tail_frac=self.tail_frac,
            min_tail_points=self.min_tail_points,
            gate=self.gate,
            eps=self.eps,
            gather=self.gather_statistics,
            negatives=negatives,
            overwrite=overwrite,
        )
        self.last_lambda = lam
        return lam, stats

    def log_values(self) -> dict[str, float]:
        """The last gate's mean, spread and share of anchors with ``lambda > 0.5`` (empty before a call)."""
        if self.last_lambda is None:
            return {}
        lam = self.last_lambda.float()
        return {"lambda_mean": float(lam.mean()), "lambda_std": float(lam.std(correction=0)),
                "lambda_active": float((lam > 0.5).float().mean())}

    def per_anchor(self, anchors: Tensor, candidates: Tensor, pairs: Pairs, neg_weight: Tensor | None) -> Tensor:
        sim = cosine(anchors, candidates)
        if neg_weight is None and pairs.targets is not None:
            # The gate partitions its copy of the negatives in place, and the fused loss reuses it.
            negatives = negatives_only(sim, pairs)
            lam, _ = self.compute_gate(sim, pairs, negatives, overwrite=True)
            return weince(sim, pairs, lam, self.temperature, self.beta, self.eps, scratch=negatives)
        lam, _ = self.compute_gate(sim, pairs)
        return weince(sim, pairs, lam, self.temperature, self.beta, self.eps, neg_weight)


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
