"""WEINCE (Erol, Evren, Ozel, Morgan, Ryu, Zheng, "When Softmax Fails at the Top: Extreme-Value
Corrections for InfoNCE", ICML 2026, arXiv:2606.00262; official code github.com/hsme98/weince,
``simclr/modules/nt_xent_hard_select.py``, policy ``tlambda_select``).

Logits blend the InfoNCE coordinate with the endpoint-shortfall ("Weibit") coordinate per anchor, on
cosine similarities ``s`` clamped to ``s <= 1 - eps``::

    l_ij = (1 - lambda_i) * s_ij / t + lambda_i * ( -beta * log(1 - s_ij) )
    L_i  = cross-entropy of the positive over {positive} + negatives        (shared weighted kernel)

``beta = 1`` as in the shipped code (the README figure writes an estimated shape; pass ``beta``).
The gate ``lambda_i`` (:mod:`contrasuite.core.objectives.weince_gate`) is computed without gradient from
the batch: large when an anchor's hardest negatives look like a Weibull tail and sit close to 1.

:class:`WEINCE` is this blend and this gate; :class:`WEINCERepro` (key ``weince_repro``) adds the
official reproduction script's two top-M terms and their ``beta_t`` EMA
(:mod:`contrasuite.core.objectives.weince_repro`). Each part's settings are a small frozen dataclass
(:class:`Blend`, :class:`~contrasuite.core.objectives.weince_gate.Gating`, ``TopMTerms``, ``BetaEMA``),
grouped in one :class:`WEINCEConfig`; a config's term gives their fields flat.

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
from dataclasses import dataclass, fields
from typing import Any, Callable, ClassVar, Mapping

import torch
from torch import Tensor

from contrasuite.core.negatives.topk import negatives_only
from contrasuite.core.numerics import exp_shifted_, full_precision
from contrasuite.core.objectives.base import ContrastiveObjective, Distributed
from contrasuite.core.objectives.infonce import weighted_infonce
from contrasuite.core.objectives.weince_gate import Gating, StatisticsGather, weince_gate
from contrasuite.core.objectives.weince_repro import (
    BetaEMA, TopMTerms, restrict_to_top_m, top_m_block_pairs, top_m_columns,
)
from contrasuite.core.pairs import Pairs
from contrasuite.core.similarity import cosine


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


def weince(sim: Tensor, pairs: Pairs, lam: Tensor, temperature: float, beta: float = 1.0, eps: float = 1e-6,
           neg_weight: Tensor | None = None, *, scratch: Tensor | None = None) -> Tensor:
    """Per-anchor WEINCE ``[N]`` for a given gate ``lam [N]``: the kernel (positive in the denominator) on
    the logits of :func:`weince_logits`; unweighted single-positive pairs take :func:`fused_weince`
    (``scratch`` as there)."""
    if neg_weight is None and pairs.targets is not None:
        return fused_weince(sim, pairs, lam, temperature, beta, eps, scratch=scratch)
    return weighted_infonce(weince_logits(sim, lam, temperature, beta, eps), pairs, neg_weight)


def fused_weince(sim: Tensor, pairs: Pairs, lam: Tensor, temperature: float, beta: float = 1.0, eps: float = 1e-6,
                 gathered: tuple[Tensor, GatheredTerms] | None = None, scratch: Tensor | None = None) -> Tensor:
    """:func:`weince` of unweighted single-positive ``pairs`` in one autograd function
    (:class:`_BlendCrossEntropy`), plus, with ``gathered = (columns [N, C], terms)``, each term of
    ``terms(sim.gather(1, columns))`` in order; it may overwrite ``scratch`` (an ``[N, M]`` tensor like
    ``sim``) instead of allocating a buffer."""
    alpha, gamma, eps = _blend_coefficients(sim, lam, temperature, beta, eps)
    columns, terms = gathered if gathered is not None else (None, None)
    return _BlendCrossEntropy.apply(sim, alpha, gamma, eps, pairs.targets, pairs.exclude_self, columns, terms, scratch)


@dataclass(frozen=True)
class Blend:
    """The blend's settings: ``l_ij = (1 - lambda_i) s_ij / temperature + lambda_i (-beta log(1 - s_ij))``,
    ``s`` clamped to ``1 - eps`` (raised to the dtype's resolution). Defaults: ``t = 0.5`` (the paper's
    SimCLR runs), ``beta = 1`` and ``eps = 1e-6`` (official code)."""

    temperature: float = 0.5
    beta: float = 1.0
    eps: float = 1e-6

    def __post_init__(self) -> None:
        if self.temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature}")
        if not 0.0 < self.eps < 1.0:
            raise ValueError(f"eps must be in (0, 1), got {self.eps}")


@dataclass(frozen=True)
class WEINCEConfig:
    """A WEINCE objective's settings, one dataclass per part: the blend, the gate and, in the repro
    variant only, the top-M terms (``aux``) and their ``beta_t`` EMA. A config's term gives the parts'
    fields flat: :meth:`from_keys`."""

    blend: Blend = Blend()
    gating: Gating = Gating()
    aux: TopMTerms | None = None
    ema: BetaEMA | None = None

    @classmethod
    def from_keys(cls, keys: Mapping[str, Any], parts: Mapping[str, type]) -> WEINCEConfig:
        """The config of ``parts`` (``{field of this class: its dataclass}``) from flat keys such as
        ``{temperature: 0.5, q: 0.2, top_m: 50}``, each to the part with that field; a key that no part
        has is a ``TypeError`` naming it."""
        known = [f.name for part in parts.values() for f in fields(part)]
        unknown = sorted(set(keys) - set(known))
        if unknown:
            raise TypeError(f"unexpected key {unknown[0]!r}; known: {known}")
        return cls(**{name: part(**{f.name: keys[f.name] for f in fields(part) if f.name in keys})
                      for name, part in parts.items()})


class WEINCE(ContrastiveObjective):
    """WEINCE (the paper's blend, official ``tlambda_select``; module docstring), composed of its parts:
    each call, :func:`weince_gate` (settings :class:`Gating`) gives ``lambda [N]`` and :func:`weince`
    the loss of the blend (:class:`Blend`).

    Keys: the parts' fields, flat as a config's term gives them (``WEINCE(temperature=0.5, q=0.2)``;
    :meth:`config_defaults`), gathered in ``config`` (:class:`WEINCEConfig`). After each call
    ``last_lambda`` holds the detached gate ``[N]``; :meth:`log_values` summarises it.
    """

    distributed: ClassVar[Distributed] = Distributed.GLOBAL_STATISTICS
    parts: ClassVar[dict[str, type]] = {"blend": Blend, "gating": Gating}
    """The :class:`WEINCEConfig` fields this objective sets, and their dataclasses."""

    def __init__(self, **keys: Any) -> None:
        super().__init__()
        self.config = WEINCEConfig.from_keys(keys, self.parts)
        self.gather_statistics: StatisticsGather | None = None
        self.last_lambda: Tensor | None = None
        if self.config.ema is not None:
            self.register_buffer("beta_ema", torch.tensor(float(self.config.ema.beta_init)))

    @classmethod
    def config_defaults(cls) -> dict[str, Any]:
        """The keys a config's term gives this objective, with their defaults (``contrasuite list``)."""
        return {f.name: f.default for part in cls.parts.values() for f in fields(part)}

    def log_values(self) -> dict[str, float]:
        """The last gate's mean, spread and share of anchors with ``lambda > 0.5`` (none before a call),
        and the ``beta_t`` EMA where there is one."""
        out = {}
        if self.last_lambda is not None:
            lam = self.last_lambda.float()
            out = {"lambda_mean": float(lam.mean()), "lambda_std": float(lam.std(correction=0)),
                   "lambda_active": float((lam > 0.5).float().mean())}
        if self.config.ema is not None:
            out["beta_ema"] = float(self.beta_ema)
        return out

    def per_anchor(self, anchors: Tensor, candidates: Tensor, pairs: Pairs, neg_weight: Tensor | None) -> Tensor:
        blend, aux = self.config.blend, self.config.aux
        sim = cosine(anchors, candidates)
        # One copy of the negatives: the gate partitions it in place (the pooled tail needs only its
        # values, the top-M columns come from sim), then the fused loss may overwrite it.
        negatives = negatives_only(sim, pairs)
        lam, stats = weince_gate(sim, pairs, self.config.gating, blend.eps, gather=self.gather_statistics,
                                 negatives=negatives, overwrite=True)
        self.last_lambda = lam
        blended = (sim, pairs, lam, blend.temperature, blend.beta, blend.eps)
        if aux is None:
            return weince(*blended, neg_weight, scratch=negatives)
        if self.training:  # fold this batch's accepted pooled-tail fit into the beta_t EMA first
            self.beta_ema.fill_(self.config.ema.update(
                float(self.beta_ema), sim, pairs, blend.eps, self.gather_statistics, negatives, stats.hardest))
        beta_t = float(self.beta_ema)
        if neg_weight is None and pairs.targets is not None:  # the blend and both top-M terms in one function
            cols = top_m_columns(sim, pairs, aux.top_m, hardest=stats.hardest)
            terms = functools.partial(aux, hard_pairs=top_m_block_pairs(cols), beta_t=beta_t,
                                      temperature=blend.temperature, eps=blend.eps)
            return fused_weince(*blended, gathered=(cols, terms), scratch=negatives)
        loss = weince(*blended, neg_weight)
        hard, hard_pairs, hard_weight = restrict_to_top_m(sim, pairs, aux.top_m, neg_weight, hardest=stats.hardest)
        weibit, plackett_luce = aux(hard, hard_pairs, beta_t, blend.temperature, blend.eps, hard_weight)
        return loss + weibit + plackett_luce


class WEINCERepro(WEINCE):
    """WEINCE as the official reproduction script trains it: the blend plus :class:`TopMTerms`, whose
    ``beta_t`` is a :class:`BetaEMA` kept in the ``beta_ema`` buffer
    (:mod:`~contrasuite.core.objectives.weince_repro`). Keys: WEINCE's and those two parts' fields."""

    parts: ClassVar[dict[str, type]] = {**WEINCE.parts, "aux": TopMTerms, "ema": BetaEMA}
