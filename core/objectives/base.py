"""What every objective shares: the call convention, the reduction, the distributed declaration.

``loss = Objective(**hyperparameters)(anchors, candidates=None, *, labels=None, pos_mask=None,
neg_weight=None)`` returns a scalar: the mean of the per-anchor losses over anchors that have at
least one positive. Subclasses implement :meth:`ContrastiveObjective.per_anchor`, which receives
fp32 (or fp64) embeddings and the resolved :class:`~contrasuite.core.pairs.Pairs`, with autocast off.
Objectives with a ``tile_size`` (:mod:`contrasuite.core.tiling`) also take ``pos_mask`` and
``neg_weight`` as functions of a block ``(rows: slice, cols: slice)``.

Objectives defined on pairs (``paired_views = True``: DHEL, KCL, CLIP, SigLIP compare view 1 with
view 2, positive ``i <-> i``) also take SimCLR's two-view batch, ``objective(z, labels=labels)`` with
every label twice: it is split into the two views ``a`` (the first row of each label) and ``b`` (the
second), and the loss is ``(L(a, b) + L(b, a)) / 2``, so every objective can be swapped by name in the
same call.
"""

from __future__ import annotations

import enum
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from contrasuite.core.numerics import full_precision, upcast
from contrasuite.core.pairs import Blocks, Pairs, paired_partner, resolve_pairs


class Distributed(str, enum.Enum):
    """How an objective behaves when the batch is split over ranks."""

    GATHER_CANDIDATES = "gather_candidates"
    """Local anchors against every rank's candidates, gathered with gradient (open_clip's local loss)."""
    PAIRWISE_RING = "pairwise_ring"
    """A sum of independent pair terms: each rank scores its anchors against each rank's block in turn."""
    GLOBAL_STATISTICS = "global_statistics"
    """Needs statistics of the whole batch (e.g. cluster weights); gather candidates and compute them there."""


class ContrastiveObjective(nn.Module):
    """Base of all objectives: resolves pairs, upcasts, reduces. See the module docstring."""

    distributed: ClassVar[Distributed] = Distributed.GATHER_CANDIDATES
    paired_views: ClassVar[bool] = False
    """The objective pairs anchor ``i`` with candidate ``i``; a two-view ``labels`` batch is split (module docstring)."""
    takes_prior: ClassVar[bool] = False
    """``forward`` takes ``prior=`` (a similarity prior ``[N, M]``, Soft-InfoNCE); :class:`ObjectiveSum` passes it."""
    chooses_similarity: ClassVar[bool] = False
    """The constructor takes ``similarity`` (``"cosine"`` or ``"dot"``), e.g. InfoNCE; a domain can set it."""
    per_anchor_mean: ClassVar[bool] = True
    """The loss is this class's ``forward``: the mean of :meth:`per_anchor` over the anchors with a positive,
    so a rank can sum its anchors' terms (core.distributed). A class that overrides ``forward``
    must declare it, ``False`` unless its ``forward`` only routes inputs to this one."""
    tiles: ClassVar[bool] = False
    """The constructor takes ``tile_size`` (:mod:`contrasuite.core.tiling`): the loss in row blocks, never the
    whole ``[N, M]`` matrix; ``self.tile_size`` is then ``None`` (dense) or the block's rows."""
    learned: tuple[str, ...] = ()
    """The trained scalars (a logit scale, a bias) :func:`register_scalar` declared; :meth:`learned_values` reads them."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "forward" in cls.__dict__ and "per_anchor_mean" not in cls.__dict__:
            raise TypeError(f"{cls.__name__} overrides forward: declare per_anchor_mean (see ContrastiveObjective)")

    def two_view_labels(self, anchors: Tensor, candidates: Tensor | None, labels: Tensor | None,
                        rest: tuple[object, ...]) -> Tensor | None:
        """For a :attr:`paired_views` objective called on a two-view batch (``candidates=None``, ``labels``,
        nothing else): the mean of both directions of the paired form. ``None`` for any other call."""
        if not self.paired_views or candidates is not None or labels is None:
            return None
        if any(r is not None for r in rest):
            raise ValueError(f"{type(self).__name__} on a labels batch takes no candidate_labels, pos_mask or neg_weight")
        partner = paired_partner(labels)
        if partner is None:
            raise ValueError(f"{type(self).__name__} pairs two views: with candidates=None every label must occur "
                             "exactly twice (the two views of one sample)")
        first = (partner > torch.arange(len(labels), device=labels.device)).nonzero().squeeze(1)
        a, b = anchors[first], anchors[partner[first]]
        return 0.5 * (self(a, b) + self(b, a))

    def log_values(self) -> dict[str, float]:
        """Scalars about the last call that the trainer logs as ``state/<module path>.<name>`` (none here)."""
        return {}

    def learned_values(self) -> dict[str, float]:
        """The trained scalars' current values, which the trainer logs as ``param/<module path>.<name>``."""
        return {name: float(getattr(self, name).detach()) for name in self.learned}

    def per_anchor(self, anchors: Tensor, candidates: Tensor, pairs: Pairs, neg_weight: Tensor | None) -> Tensor:
        """Per-anchor losses ``[N]`` (any value for anchors without positives; they are dropped)."""
        raise NotImplementedError

    def per_anchor_fp32(self, anchors: Tensor, candidates: Tensor, pairs: Pairs, neg_weight: Tensor | None) -> Tensor:
        """:meth:`per_anchor` on fp32 (or fp64) copies of the inputs with autocast off (the numerics policy)."""
        if callable(neg_weight) and not (self.tiles and self.tile_size is not None):
            raise ValueError(f"{type(self).__name__}: a neg_weight given as a function of the block needs tile_size")
        with full_precision(anchors):
            weight = neg_weight if neg_weight is None or callable(neg_weight) else upcast(neg_weight)
            return self.per_anchor(upcast(anchors), upcast(candidates), pairs, weight)

    def forward(
        self,
        anchors: Tensor,
        candidates: Tensor | None = None,
        *,
        labels: Tensor | None = None,
        candidate_labels: Tensor | None = None,
        pos_mask: Tensor | Blocks | None = None,
        neg_weight: Tensor | Blocks | None = None,
    ) -> Tensor:
        split = self.two_view_labels(anchors, candidates, labels, (candidate_labels, pos_mask, neg_weight))
        if split is not None:
            return split
        candidates, pairs = resolve_pairs(
            anchors, candidates, labels=labels, candidate_labels=candidate_labels, pos_mask=pos_mask,
            neg_weight=neg_weight,
        )
        return self.loss_of_pairs(anchors, candidates, pairs, neg_weight)

    def loss_of_pairs(self, anchors: Tensor, candidates: Tensor, pairs: Pairs, neg_weight: Tensor | None) -> Tensor:
        """The scalar loss once the pairs are resolved (``candidates`` as :func:`resolve_pairs` returns them)."""
        losses = self.per_anchor_fp32(anchors, candidates, pairs, neg_weight)
        # Single-positive pairs: every anchor has its positive, so the reduction is a plain mean.
        return losses.mean() if pairs.targets is not None else reduce_mean(losses, pairs.has_pos)


def reduce_mean(losses: Tensor, keep: Tensor) -> Tensor:
    """Mean of ``losses`` over ``keep``; zero (with gradient) when nothing is kept."""
    kept = torch.where(keep, losses, torch.zeros_like(losses))
    return kept.sum() / keep.sum().clamp_min(1)


def register_scalar(module: ContrastiveObjective, name: str, value: float, learnable: bool) -> None:
    """A scalar of ``module`` (a logit scale or bias): a trained ``nn.Parameter``, declared in ``module.learned``,
    or a fixed buffer."""
    tensor = torch.tensor(float(value))
    if learnable:
        module.register_parameter(name, nn.Parameter(tensor))
        module.learned = (*module.learned, name)
    else:
        module.register_buffer(name, tensor)
