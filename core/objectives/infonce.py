"""InfoNCE / NT-Xent with the weighted denominator that most of the softmax family reuses.

For anchor ``i`` and each positive ``p`` (logits ``l = s / t``)::

    L_ip = -l_ip + log( a * exp(l_ip) + b * sum_{p' in P_i, p' != p} exp(l_ip')
                        + sum_{j in N_i} w_ij * exp(l_ij) )
    L_i  = mean_{p in P_i} L_ip

``a = 1, b = 0``: NT-Xent (SimCLR, Chen et al. 2020; pytorch-metric-learning's ``NTXentLoss``).
``a = 1, b = 1``: SupCon (Khosla et al. 2020, the ``L_out`` form). ``a = 0``: DCL (Yeh et al. 2022);
MEOW with cluster-count weights (Yu et al. 2023). ``w_ij`` defaults to 1; a zero weight removes
the negative. Everything is computed in log space with masked, max-shifted ``logsumexp``.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Callable, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import once_differentiable

from contrasuite.core.numerics import exp_shifted_, logsumexp_backward, logsumexp_rows, masked_logsumexp
from contrasuite.core.objectives.base import ContrastiveObjective
from contrasuite.core.pairs import Pairs
from contrasuite.core.similarity import get_factors, get_similarity
from contrasuite.core.tiling import LogitMap, Tiling, Weight, check_tile_size, tiled_rows


def weighted_infonce(
    logits: Tensor,
    pairs: Pairs,
    neg_weight: Tensor | None = None,
    *,
    positive_in_denominator: bool = True,
    other_positives_in_denominator: bool = False,
) -> Tensor:
    """Per-anchor loss ``[N]`` of the weighted-denominator kernel (module docstring) on ``logits [N, M]``.

    Only the ``P`` positive entries are gathered (``[P]`` tensors); the ``N x M`` work is one
    masked ``logsumexp``. Unweighted single-positive pairs (two views, diagonal pairing) take
    :func:`single_positive_infonce`, which needs no mask. Otherwise, without weights, when the
    denominator is every valid column (SupCon, or at most one positive per anchor with ``a = 1``),
    that logsumexp is a plain ``torch.logsumexp`` whenever all pairs are valid.
    """
    if other_positives_in_denominator and not positive_in_denominator:
        raise ValueError("other_positives_in_denominator=True needs positive_in_denominator=True")
    if neg_weight is None and pairs.negatives_per_anchor():
        return single_positive_infonce(logits, pairs, positive_in_denominator)
    if (neg_weight is not None and pairs.targets is not None and not positive_in_denominator
            and not neg_weight.requires_grad and neg_weight.shape == logits.shape and neg_weight.dtype == logits.dtype):
        return weighted_single_positive_infonce(logits, pairs, neg_weight)
    pos = pairs.pos
    rows, cols = pairs.positive_indices()
    pos_logits = logits[rows, cols]
    n_pos = pos.sum(dim=1)
    shared = positive_in_denominator and (other_positives_in_denominator or bool((n_pos <= 1).all()))
    if neg_weight is None and shared:
        # Denominator = all valid columns (the positive(s) and every negative).
        valid = pairs.valid
        all_valid = bool(valid.all())
        if all_valid and rows.numel() == logits.shape[0]:
            # Exactly one positive per anchor, every pair valid: plain cross-entropy (one fused op).
            return F.cross_entropy(logits, cols, reduction="none")
        denom = torch.logsumexp(logits, dim=1) if all_valid else masked_logsumexp(logits, valid, dim=1)
        per_pair = denom[rows] - pos_logits
    else:
        neg = pairs.neg
        neg_logits = logits
        if neg_weight is not None:
            neg = neg & (neg_weight > 0)
            neg_logits = logits + torch.log(neg_weight.clamp_min(torch.finfo(logits.dtype).tiny))
        if other_positives_in_denominator:
            # log(sum_{P_i} exp(l) + sum_{N_i} w exp(l)), shared by all positives of the row.
            denom = masked_logsumexp(torch.where(pos, logits, neg_logits), pos | neg, dim=1)
            per_pair = denom[rows] - pos_logits
        else:
            neg_lse = masked_logsumexp(neg_logits, neg, dim=1)[rows]
            per_pair = (torch.logaddexp(pos_logits, neg_lse) if positive_in_denominator else neg_lse) - pos_logits
    total = torch.zeros(logits.shape[0], dtype=logits.dtype, device=logits.device).index_add(0, rows, per_pair)
    return total / n_pos.clamp_min(1)


class _WeightedNegativesLoss(torch.autograd.Function):
    """``L_i = log sum_j exp(l_ij + log w_ij) - l_it_i`` per anchor: the log-sum-exp over the entries with
    ``w_ij > 0`` outside ``excluded`` (the dtype's ``log(tiny)`` for a row without any) minus the positive logit
    ``l_it_i``. The same values and gradients, to the bit, as :func:`masked_logsumexp` of
    ``l + log(w.clamp_min(tiny))`` under the mask ``neg & (w > 0)`` minus ``l[rows, targets]`` (the same
    operations on the same values), with the weights ``w`` held constant.

    Autograd through that form keeps ``N x M`` masks of the pairs (built twice), the log-weights, the sum, the
    ``where`` and its backward's zeros, ``logsumexp``'s own buffers and the dense zeros of the positives'
    gather: about three times the passes over ``N x M`` memory of this one, which fills one buffer in place
    (its log-sum-exp by :func:`logsumexp_rows`, without ``torch.logsumexp``'s temporary), saves it for the backward
    ``g_i exp(x_ij - lse_i)`` (``logsumexp``'s own backward formula; exactly 0 at the excluded entries, the
    positives among them) and subtracts ``g_i`` at the positives in place: one fresh ``N x M`` buffer forward and
    one backward, each of which costs page faults besides its passes (:func:`logsumexp_rows`).
    """

    @staticmethod
    def forward(ctx, logits: Tensor, weight: Tensor, anchors: Tensor, targets: Tensor,  # type: ignore[override]
                excluded_rows: Tensor, excluded_cols: Tensor) -> Tensor:
        keep = weight > 0
        keep[excluded_rows, excluded_cols] = False
        has = keep.any(dim=1)
        x = weight.clamp_min(torch.finfo(logits.dtype).tiny).log_().add_(logits.detach())
        x.masked_fill_(keep.logical_not_(), torch.finfo(x.dtype).min)
        lse = logsumexp_rows(x)
        ctx.save_for_backward(x, lse, has, anchors, targets)
        return torch.where(has, lse, math.log(torch.finfo(x.dtype).tiny)) - logits.detach()[anchors, targets]

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None, None, None, None, None]:  # type: ignore[override]
        x, lse, has, anchors, targets = ctx.saved_tensors
        out = logsumexp_backward(x, lse, torch.where(has, grad, torch.zeros_like(grad)))
        out[anchors, targets] -= grad  # 0 there before (an excluded entry): -g_i, as the gather's backward adds
        return out, None, None, None, None, None


def weighted_single_positive_infonce(logits: Tensor, pairs: Pairs, neg_weight: Tensor) -> Tensor:
    """:func:`weighted_infonce` for single-positive pairs (``pairs.targets``), the positive out of the
    denominator (``a = 0``: DCL, MEOW) and constant ``neg_weight [N, M]`` of the logits' dtype: the same
    values and gradients, to the bit, in fewer passes over ``N x M`` memory (:class:`_WeightedNegativesLoss`)."""
    targets = pairs.targets
    rows = torch.arange(targets.shape[0], device=targets.device)
    # excluded from the negatives: the positives, and the self-pairs when the candidates are the anchors
    excluded = (torch.cat([rows, rows]), torch.cat([targets, rows])) if pairs.exclude_self else (rows, targets)
    per_pair = _WeightedNegativesLoss.apply(logits, neg_weight, rows, targets, *excluded)
    return torch.zeros(logits.shape[0], dtype=logits.dtype, device=logits.device).index_add(0, rows, per_pair)


def tiled_weighted_infonce(
    x: Tensor,
    y: Tensor,
    pairs: Pairs,
    neg_weight: Weight | None,
    tile_size: int,
    *,
    positive_in_denominator: bool = True,
    other_positives_in_denominator: bool = False,
    logit_map: LogitMap | None = None,
    positive_weight: Callable[[Tensor], Tensor] | None = None,
) -> Tensor:
    """:func:`weighted_infonce` of the logits ``l = f(x @ y.T)`` in tiles, never forming them.

    ``f`` is ``logit_map`` (identity by default). When every positive of a row shares its
    denominator (``a = 0``; SupCon's ``b = 1``; one positive per anchor) the whole loss is one
    :func:`~contrasuite.core.tiling.tiled_rows` pass, ``L_i = log(den_i) - (1 / |P_i|) sum_p c_ip l_ip``;
    otherwise (``a = 1, b = 0`` with several positives) the pass gives the negatives' log-sum-exp
    and each positive adds itself with ``logaddexp`` (its logit from a row-wise dot). ``positive_weight``
    maps positive logits to the coefficients ``c_ip`` (DCLW; no gradient; 1 by default).
    """
    if other_positives_in_denominator and not positive_in_denominator:
        raise ValueError("other_positives_in_denominator=True needs positive_in_denominator=True")
    scale = 1.0 / pairs.positive_counts().to(x.dtype).clamp_min(1)
    shared = positive_in_denominator and (other_positives_in_denominator or pairs.targets is not None)
    spec = Tiling(pairs, tile_size, include_positives=shared, logit_map=logit_map, weight_columns=pairs.paired_columns)
    if shared or not positive_in_denominator:
        return tiled_rows(x, y, replace(spec, positive_scale=scale, positive_weight=positive_weight), neg_weight)
    if positive_weight is not None:
        raise ValueError("positive_weight needs a shared denominator (a = 0, b = 1 or one positive per anchor)")
    rows, cols = pairs.positive_indices()
    pos_logits = positive_logits(x, y, rows, cols, logit_map)
    per_pair = torch.logaddexp(pos_logits, tiled_rows(x, y, spec, neg_weight)[rows]) - pos_logits
    return torch.zeros(x.shape[0], dtype=x.dtype, device=x.device).index_add(0, rows, per_pair) * scale


def positive_logits(x: Tensor, y: Tensor, rows: Tensor, cols: Tensor, logit_map: LogitMap | None = None) -> Tensor:
    """``f(x_r . y_c)`` for the pairs ``(rows, cols)`` ``[P]``: one row-wise dot each, ``f`` the logit map at positives."""
    sim = (x[rows] * y[cols]).sum(dim=1)
    if logit_map is None:
        return sim
    every = torch.arange(sim.shape[0], device=sim.device)
    return logit_map(sim[:, None], (every, torch.zeros_like(every)))[0].squeeze(1)


def single_positive_infonce(logits: Tensor, pairs: Pairs, positive_in_denominator: bool = True) -> Tensor:
    """The kernel for single-positive pairs (``pairs.targets``), unweighted, at least one negative each.

    ``a = 1`` is ``F.cross_entropy`` with index targets, the self-pairs (if excluded) set to the
    dtype's lowest finite value in a copy of ``logits`` (:func:`exclude_`); ``a = 0`` is
    :func:`logsumexp_excluding` over the negatives minus the positive logit. Either way one copy of
    ``logits`` instead of ``N x M`` masks and a masked select.
    """
    targets = pairs.targets
    rows = torch.arange(targets.shape[0], device=targets.device)
    if not positive_in_denominator:
        # Excluded: the positives, and the self-pairs when the candidates are the anchors.
        excluded = (torch.cat([rows, rows]), torch.cat([rows, targets])) if pairs.exclude_self else (rows, targets)
        return logsumexp_excluding(logits, excluded, targets)
    if not pairs.exclude_self:
        return F.cross_entropy(logits, targets, reduction="none")
    return F.cross_entropy(exclude_(logits.clone(), rows, rows), targets, reduction="none")


def exclude_(logits: Tensor, rows: Tensor, cols: Tensor) -> Tensor:
    """Set ``logits[rows, cols]`` to the dtype's lowest finite value in place and return ``logits``.

    For a fresh tensor that goes *only* into a softmax-type reduction (``logsumexp``, cross-entropy
    with targets elsewhere): an entry at the lowest value gets softmax weight exactly 0, so its
    gradient there is exactly 0 whether or not the fill is recorded. It is done under ``no_grad``,
    which spares autograd a copy of the ``N x M`` gradient to zero those entries again.
    """
    with torch.no_grad():
        logits[rows, cols] = torch.finfo(logits.dtype).min
    return logits


class _LogSumExpExcluding(torch.autograd.Function):
    """``log sum_{j not excluded} exp(l_ij)`` per row, minus ``l_{i, t_i}`` when targets are given.

    Forward: one copy of ``logits`` with the excluded entries at the lowest finite value, overwritten
    with ``E = exp(l - max)`` (exactly 0 at the excluded entries; :func:`exp_shifted_`). Backward:
    ``g_i E_ij / s_i`` in one buffer, no exponential recomputed, then ``-g_i`` added at the targets.
    Autograd through ``logsumexp`` and a gather would allocate about five ``N x M`` tensors backward.
    """

    @staticmethod
    def forward(ctx, logits: Tensor, rows: Tensor, cols: Tensor, targets: Tensor | None) -> Tensor:  # type: ignore[override]
        e, total, lse = exp_shifted_(exclude_(logits.detach().clone(), rows, cols))
        ctx.save_for_backward(e, total, targets)
        if targets is None:
            return lse
        return lse - logits.gather(1, targets[:, None]).squeeze(1)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None, None, None]:  # type: ignore[override]
        e, total, targets = ctx.saved_tensors
        out = e * (grad / total)[:, None]
        if targets is not None:
            out.scatter_add_(1, targets[:, None], -grad[:, None])
        return out, None, None, None


def logsumexp_excluding(logits: Tensor, excluded: tuple[Tensor, Tensor], targets: Tensor | None = None) -> Tensor:
    """``[N]`` ``log sum_j exp(l_ij)`` over each row of ``logits [N, M]`` without the entries
    ``excluded = (rows, cols)`` (each row must keep at least one), minus ``l_{i, targets_i}`` when
    ``targets [N]`` are given; see :class:`_LogSumExpExcluding`."""
    return _LogSumExpExcluding.apply(logits, excluded[0], excluded[1], targets)


class InfoNCE(ContrastiveObjective):
    """InfoNCE / NT-Xent (Oord et al. 2018; Chen et al. 2020), multi-positive, weighted negatives.

    Args:
        temperature: ``t`` in ``s / t``. Default 0.1 (SimCLR's ImageNet setting; CIFAR runs use 0.5).
        positive_in_denominator: ``a = 1`` (True, InfoNCE) or ``a = 0`` (False, DCL/MEOW form).
        other_positives_in_denominator: SupCon's ``L_out`` (all positives in every denominator).
        similarity: ``"cosine"`` (normalise, the default) or ``"dot"``.
        tile_size: compute the loss in ``tile_size x tile_size`` blocks (:func:`tiled_weighted_infonce`);
            ``None`` (default): the dense ``N x M`` logits.
    """

    tiles: ClassVar[bool] = True
    chooses_similarity: ClassVar[bool] = True

    def __init__(
        self,
        temperature: float = 0.1,
        positive_in_denominator: bool = True,
        other_positives_in_denominator: bool = False,
        similarity: str = "cosine",
        tile_size: int | None = None,
    ) -> None:
        super().__init__()
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        self.temperature = temperature
        self.positive_in_denominator = positive_in_denominator
        self.other_positives_in_denominator = other_positives_in_denominator
        self.similarity = similarity
        self._sim, self._factors = get_similarity(similarity), get_factors(similarity)
        self.tile_size = check_tile_size(tile_size)

    def per_anchor(self, anchors: Tensor, candidates: Tensor, pairs: Pairs, neg_weight: Tensor | None) -> Tensor:
        flags = {
            "positive_in_denominator": self.positive_in_denominator,
            "other_positives_in_denominator": self.other_positives_in_denominator,
        }
        if self.tile_size is not None:
            x, y = self._factors(anchors, candidates, scale=1.0 / self.temperature)
            return tiled_weighted_infonce(x, y, pairs, neg_weight, self.tile_size, **flags)
        return weighted_infonce(self._sim(anchors, candidates, scale=1.0 / self.temperature), pairs, neg_weight, **flags)
