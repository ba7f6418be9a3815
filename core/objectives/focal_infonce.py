"""Focal-InfoNCE (Hou and Li, Findings of EMNLP 2023, arXiv:2310.06918).

Self-paced modulation of the InfoNCE logits on cosine similarities (official ``sp_logits`` in
github.com/puerrrr/Focal-InfoNCE ``focalNCE/models.py``)::

    l_ip = s_ip * s_ip / t            (positives)
    l_ij = (s_ij + m) * s_ij / t      (negatives)
    L_i  = -l_ip + log( exp(l_ip) + sum_{j in N_i} exp(l_ij) )     (cross-entropy)

Harder negatives (larger ``s``) get a larger multiplier. The modulating factors are *not* detached
(as in the official code): the gradient is ``2 s / t`` for positives and ``(2 s + m) / t`` for
negatives. Multiple positives, extra candidate columns and ``neg_weight`` go through the shared
weighted kernel (the official code handles square logits only).

Distributed: ``Distributed.GATHER_CANDIDATES`` (row-local).
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor

from contrasuite.core.objectives.base import ContrastiveObjective, Distributed
from contrasuite.core.objectives.infonce import weighted_infonce
from contrasuite.core.pairs import Pairs
from contrasuite.core.similarity import cosine


def focal_logits(sim: Tensor, pos: Tensor, temperature: float, margin: float) -> Tensor:
    """``s^2 / t`` on positives and ``(s + m) s / t`` elsewhere, from cosine ``sim [N, M]``."""
    return torch.where(pos, sim * sim, (sim + margin) * sim) / temperature


class FocalInfoNCE(ContrastiveObjective):
    """Focal-InfoNCE; see the module docstring.

    Args:
        temperature: ``t``. Default 0.05 (official, unsupervised SimCSE).
        margin: ``m``. Default 0.3 (official).
    """

    distributed: ClassVar[Distributed] = Distributed.GATHER_CANDIDATES

    def __init__(self, temperature: float = 0.05, margin: float = 0.3) -> None:
        super().__init__()
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        self.temperature = temperature
        self.margin = margin

    def per_anchor(self, anchors: Tensor, candidates: Tensor, pairs: Pairs, neg_weight: Tensor | None) -> Tensor:
        logits = focal_logits(cosine(anchors, candidates), pairs.pos, self.temperature, self.margin)
        return weighted_infonce(logits, pairs, neg_weight, positive_in_denominator=True)
