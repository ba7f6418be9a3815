"""Loss terms of the metric-learning task: every core objective, plus pytorch-metric-learning's as a reference.

Terms are ``[{name, weight, **kwargs}]`` as everywhere in contrasuite. Core names (``circle``,
``multi_similarity``, ``hyperbolic_pairwise_ce``, ``infonce``, ...) come from
``contrasuite.core.objectives.OBJECTIVES``. Two more names run pytorch-metric-learning's
implementations through the same pipeline (core must not import PML, so they live here, are
passed to the core builder as ``extra`` names, and are declared on the task class as
``extra_objectives`` for the engine's config check):

* ``pml_circle``: ``losses.CircleLoss(m, gamma)``;
* ``pml_multi_similarity``: ``losses.MultiSimilarityLoss(alpha, beta, base)`` fed by
  ``miners.MultiSimilarityMiner(epsilon)`` (as the paper mines; PML keeps mining outside the loss).

Every term is called as ``term(embeddings, labels=labels)``, the core contract's labels form, and
computes in fp32 with autocast off (core objectives by the numerics policy, ``PMLTerm`` itself).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from torch import Tensor, nn

from contrasuite.core.numerics import full_precision
from contrasuite.core.objectives import ObjectiveSum
from contrasuite.core.objectives.hyperbolic import HyperbolicPairwiseCE


class PMLTerm(nn.Module):
    """A pytorch-metric-learning loss (and optional miner) behind the core call convention."""

    def __init__(self, loss: nn.Module, miner: nn.Module | None = None) -> None:
        super().__init__()
        self.loss, self.miner = loss, miner

    def forward(
        self,
        anchors: Tensor,
        candidates: Tensor | None = None,
        *,
        labels: Tensor | None = None,
        candidate_labels: Tensor | None = None,
        pos_mask: Tensor | None = None,
        neg_weight: Tensor | None = None,
    ) -> Tensor:
        if labels is None or pos_mask is not None or neg_weight is not None:
            raise ValueError(f"{type(self).__name__} takes labels only (no pos_mask, no neg_weight)")
        with full_precision(anchors):
            z = anchors.float()
            ref = None if candidates is None else candidates.float()
            mined = None if self.miner is None else self.miner(z, labels, ref, candidate_labels)
            return self.loss(z, labels, mined, ref, candidate_labels)


class PMLCircle(PMLTerm):
    """pytorch-metric-learning ``CircleLoss(m, gamma)`` (defaults as PML and the paper's retrieval setting)."""

    def __init__(self, m: float = 0.4, gamma: float = 80.0) -> None:
        from pytorch_metric_learning import losses

        super().__init__(losses.CircleLoss(m=m, gamma=gamma))


class PMLMultiSimilarity(PMLTerm):
    """pytorch-metric-learning ``MultiSimilarityLoss(alpha, beta, base)`` with ``MultiSimilarityMiner(epsilon)``."""

    def __init__(self, alpha: float = 2.0, beta: float = 50.0, base: float = 0.5, epsilon: float = 0.1) -> None:
        from pytorch_metric_learning import losses, miners

        super().__init__(
            losses.MultiSimilarityLoss(alpha=alpha, beta=beta, base=base), miners.MultiSimilarityMiner(epsilon=epsilon)
        )


PML_TERMS: dict[str, type[nn.Module]] = {"pml_circle": PMLCircle, "pml_multi_similarity": PMLMultiSimilarity}


class MetricObjective(ObjectiveSum):
    """Weighted sum of terms (core names plus ``PML_TERMS``), called as ``objective(embeddings, labels=labels)``."""

    def __init__(self, terms: Sequence[Mapping[str, Any]]) -> None:
        super().__init__(terms, extra=PML_TERMS)

    def hyperbolic(self) -> HyperbolicPairwiseCE | None:
        """The hyperbolic term, if any: retrieval then ranks by distance on its ball."""
        return next((t for t in self.terms if isinstance(t, HyperbolicPairwiseCE) and t.c > 0), None)
