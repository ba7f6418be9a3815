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

from contrasuite.core.numerics import masked_logsumexp
from contrasuite.core.objectives.base import ContrastiveObjective, Distributed
from contrasuite.core.objectives.infonce import weighted_infonce
from contrasuite.core.pairs import Pairs
from contrasuite.core.similarity import cosine


def check_paired_views(pairs: Pairs, objective: str) -> int:
    """Check the pairs are ``anchor i <-> candidate i`` (plus extra negative columns); return ``N``."""
    n, m = pairs.pos.shape
    expected = torch.eye(n, m, dtype=torch.bool, device=pairs.pos.device)
    if m < n or not torch.equal(pairs.pos, expected) or not bool(pairs.valid.all()):
        raise ValueError(
            f"{objective} pairs anchor i with candidate i: pass the two views as anchors [N, D] and "
            f"candidates [M >= N, D] with diagonal positives (pos_mask=None or append_negatives); "
            f"labels, candidates=None and other pos_mask patterns are not supported"
        )
    if n < 2:
        raise ValueError(f"{objective} needs at least 2 anchors (same-view negatives), got N={n}")
    return n


def dhel(
    sim_ac: Tensor,
    sim_aa: Tensor,
    sim_pp: Tensor | None,
    temperature: float,
    neg_weight: Tensor | None = None,
) -> Tensor:
    """Per-anchor DHEL ``[N]`` from cosine similarities: anchors-candidates ``[N, M]`` (positive on the
    diagonal, extra columns past ``N``), anchors-anchors ``[N, N]`` and positives-positives ``[N, N]``
    (``None`` drops the positive-side energy: ``include_augs=False``)."""
    n, m = sim_ac.shape
    off_diag = ~torch.eye(n, dtype=torch.bool, device=sim_ac.device)
    # One row of logits: [a_i.c_j for all j | a_i.a_j]. Positive: column i; negatives: a_i.a_j (j != i)
    # and the extra candidate columns j >= N. Kernel with a = 0.
    logits = torch.cat([sim_ac, sim_aa], dim=1) / temperature
    pos = torch.cat([torch.eye(n, m, dtype=torch.bool, device=sim_ac.device), torch.zeros_like(off_diag)], dim=1)
    extra = torch.zeros(n, m, dtype=torch.bool, device=sim_ac.device)
    extra[:, n:] = True
    valid = torch.cat([extra, off_diag], dim=1) | pos
    weight = None
    if neg_weight is not None:
        weight = torch.cat([neg_weight, neg_weight[:, :n]], dim=1)
    loss = weighted_infonce(logits, Pairs(pos=pos, valid=valid), weight, positive_in_denominator=False)
    if sim_pp is not None:
        loss = loss + masked_logsumexp(sim_pp / temperature, off_diag, dim=1)
    return loss


class DHEL(ContrastiveObjective):
    """DHEL; see the module docstring for the formula and how it maps onto the contract.

    Args:
        temperature: ``t``. Default 0.3 (official code).
        include_augs: add the positive-side energy ``log sum_{j != i} exp(p_i.p_j / t)``. Default True.
    """

    distributed: ClassVar[Distributed] = Distributed.GLOBAL_STATISTICS

    def __init__(self, temperature: float = 0.3, include_augs: bool = True) -> None:
        super().__init__()
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        self.temperature = temperature
        self.include_augs = include_augs

    def per_anchor(self, anchors: Tensor, candidates: Tensor, pairs: Pairs, neg_weight: Tensor | None) -> Tensor:
        n = check_paired_views(pairs, "DHEL")
        positives = candidates[:n]
        sim_pp = cosine(positives, positives) if self.include_augs else None
        return dhel(cosine(anchors, candidates), cosine(anchors, anchors), sim_pp, self.temperature, neg_weight)
