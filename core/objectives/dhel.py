"""Decoupled Hyperspherical Energy Loss (Koromilas et al., ICML 2024, arXiv:2405.18045).

For anchors ``a_i`` (one view) and their positives ``p_i`` (the other view), cosine similarities,
temperature ``t``::

    L_i = -a_i.p_i / t + log sum_{j != i} exp(a_i.a_j / t) + log sum_{j != i} exp(p_i.p_j / t)

The positive is only in the numerator and the denominators hold same-view pairs only, so alignment
and uniformity are decoupled. ``include_augs=False`` drops the last term. This is the official
code's formula (``losses.py``), computed with masked log-sum-exp instead of ``exp``/``log``.

Contract mapping: ``anchors`` are the first view ``[N, D]``, ``candidates`` the second view
``[M >= N, D]`` with diagonal positives (``pos_mask=None``, or the mask from
:func:`~contrasuite.core.pairs.append_negatives`). Candidate columns past ``N`` are extra negatives
(queue, generated hard negatives): they join the anchor-side sum, ``exp(a_i.c_j / t)``. ``neg_weight
[N, M]`` weights the anchor-side terms: column ``j < N`` weights ``exp(a_i.a_j / t)``, column
``j >= N`` weights ``exp(a_i.c_j / t)``; the positive-side energy is unweighted. Labels, ``candidates
=None`` and other positive patterns raise an error, since DHEL needs to know which rows are the
other view.

Distributed: ``Distributed.GLOBAL_STATISTICS``. Each anchor's denominators run over *both views of
the whole batch*, so a rank needs every rank's anchors and candidates (gathered with gradient); the
loss is then this objective on the concatenated batch.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor

from contrasuite.core.numerics import exp_shifted_, masked_logsumexp
from contrasuite.core.objectives.base import ContrastiveObjective, Distributed
from contrasuite.core.objectives.infonce import logsumexp_excluding
from contrasuite.core.pairs import Pairs
from contrasuite.core.similarity import gram_gradient, normalize


def check_paired_views(pairs: Pairs, objective: str) -> int:
    """Check the pairs are ``anchor i <-> candidate i`` (plus extra negative columns); return ``N``."""
    n, m = pairs.shape
    if pairs.targets is not None:
        paired = not pairs.exclude_self and bool((pairs.targets == torch.arange(n, device=pairs.targets.device)).all())
    else:
        expected = torch.eye(n, m, dtype=torch.bool, device=pairs.pos.device)
        paired = m >= n and torch.equal(pairs.pos, expected) and bool(pairs.valid.all())
    if not paired:
        raise ValueError(
            f"{objective} pairs anchor i with candidate i: pass the two views as anchors [N, D] and "
            f"candidates [M >= N, D] with diagonal positives (pos_mask=None or append_negatives); "
            f"labels, candidates=None and other pos_mask patterns are not supported"
        )
    if n < 2:
        raise ValueError(f"{objective} needs at least 2 anchors (same-view negatives), got N={n}")
    return n


def off_diagonal_logsumexp(logits: Tensor, weight: Tensor | None = None) -> Tensor:
    """``log sum_{j != i} w_ij exp(l_ij)`` for each row of ``logits [N, K >= N]`` (``w = 1`` without
    ``weight``; a zero weight removes the term). With weights the diagonal is left out by the mask of
    :func:`~contrasuite.core.numerics.masked_logsumexp`."""
    rows = torch.arange(logits.shape[0], device=logits.device)
    if weight is None:
        return logsumexp_excluding(logits, (rows, rows))
    keep = (weight > 0).fill_diagonal_(False)
    return masked_logsumexp(logits + torch.log(weight.clamp_min(torch.finfo(logits.dtype).tiny)), keep, dim=1)


class _SameViewEnergy(torch.autograd.Function):
    """``log sum_{j != i} exp(scale z_i.z_j)`` for each row of each view ``z [..., N, D]``: ``[..., N]``.

    Forward: one batched Gram matrix, its diagonal at the dtype's lowest value, ``E = exp(G - max)``
    in place and its row sums ``s`` (:func:`~contrasuite.core.numerics.exp_shifted_`). Backward reuses
    ``E``: ``dL/dG_ij = g_i E_ij / s_i``, and the Gram matrix being symmetric, one matmul per view
    (:func:`~contrasuite.core.similarity.gram_gradient`).
    Autograd through ``logsumexp(a @ a.T)`` recomputes the exponentials and takes two matmuls.
    """

    @staticmethod
    def forward(ctx, z: Tensor, scale: float) -> Tensor:  # type: ignore[override]
        gram = (z * scale) @ z.mT
        gram.diagonal(dim1=-2, dim2=-1).fill_(torch.finfo(gram.dtype).min)
        e, total, lse = exp_shifted_(gram)
        ctx.save_for_backward(z, e, total)
        ctx.scale = scale
        return lse

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None]:  # type: ignore[override]
        z, e, total = ctx.saved_tensors
        return gram_gradient(e, z, grad / total).mul_(ctx.scale), None


def same_view_energy(z: Tensor, scale: float) -> Tensor:
    """``[..., N]`` ``log sum_{j != i} exp(scale z_i.z_j)`` within each view of ``z [..., N >= 2, D]``."""
    return _SameViewEnergy.apply(z, scale)


def dhel(
    logit_ap: Tensor,
    logit_aa: Tensor,
    logit_pp: Tensor | None,
    logit_extra: Tensor | None = None,
    neg_weight: Tensor | None = None,
) -> Tensor:
    """Per-anchor DHEL ``[N]`` from logits ``l = s / t`` (cosine over temperature): anchor-positive
    ``[N]``, anchors-anchors ``[N, N]``, positives-positives ``[N, N]`` (``None`` drops the
    positive-side energy: ``include_augs=False``), anchors against extra negative candidates ``[N, K]``
    (optional), and weights ``[N, N + K]`` of the anchor-side terms (optional). The self-pairs are
    left out of both energies; the inputs are not modified."""
    anchor_side = logit_aa if logit_extra is None else torch.cat([logit_aa, logit_extra], dim=1)
    loss = off_diagonal_logsumexp(anchor_side, neg_weight) - logit_ap
    if logit_pp is not None:
        loss = loss + off_diagonal_logsumexp(logit_pp)
    return loss


class DHEL(ContrastiveObjective):
    """DHEL; see the module docstring.

    Two ``N x N`` energies (anchor side and positive side), so its work is that of two bare
    ``logsumexp(a @ b.T)``; the cross-view similarities are needed only for the positives (a row-wise
    dot product) and the extra candidate columns.

    Args:
        temperature: ``t``. Default 0.3 (official code).
        include_augs: add the positive-side energy ``log sum_{j != i} exp(p_i.p_j / t)``. Default True.
    """

    distributed: ClassVar[Distributed] = Distributed.GLOBAL_STATISTICS
    paired_views: ClassVar[bool] = True

    def __init__(self, temperature: float = 0.3, include_augs: bool = True) -> None:
        super().__init__()
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        self.temperature = temperature
        self.include_augs = include_augs

    def per_anchor(self, anchors: Tensor, candidates: Tensor, pairs: Pairs, neg_weight: Tensor | None) -> Tensor:
        n = check_paired_views(pairs, "DHEL")
        a, p = normalize(anchors), normalize(candidates[:n])  # one view at a time: no stacked copy to split
        a_t = a / self.temperature  # 1/t on the [N, D] rows, not on the [N, N] products
        logit_ap = (a_t * p).sum(dim=-1)
        if candidates.shape[0] == n and neg_weight is None:
            loss = same_view_energy(a, 1.0 / self.temperature) - logit_ap
            return loss + same_view_energy(p, 1.0 / self.temperature) if self.include_augs else loss
        logit_extra = a_t @ normalize(candidates[n:]).T if candidates.shape[0] > n else None
        logit_pp = (p / self.temperature) @ p.T if self.include_augs else None
        return dhel(logit_ap, a_t @ a.T, logit_pp, logit_extra, neg_weight)
