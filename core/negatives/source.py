"""The negative-source interface: what a source receives and what it returns.

A source is called on one batch in the core contract (docs/architecture.md)::

    out = source(anchors [N, D], candidates [M, D], *, pos_mask=None, epoch=0, generator=None, rank=0, world=1)

``pos_mask [N, M]`` (``None``: anchor ``i``'s positive is candidate ``i``) says which candidates are
positives. ``epoch`` serves warm-ups, ``generator`` (a CPU ``torch.Generator``) every random draw, so a
seeded step is repeatable; ``rank`` and ``world`` are this process's place in the group (see
:class:`Negatives.columns`). It returns :class:`Negatives`: extra candidate columns shared by every
anchor, extra columns of each anchor's own, weights, whether the columns carry gradient, and, for a
source that mixes the positive pair, the replaced anchors and candidates. :meth:`Negatives.inputs`
turns that into the inputs every objective takes. A stateful source (the queue) learns from a step in
``update(*keys)``, called after the loss; its state is in its ``state_dict`` (an ``nn.Module``'s
buffers), so it is checkpointed with the task's modules.

Sources are used by name: :mod:`contrasuite.core.negatives.sources` holds the registry.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch
from torch import Tensor

from contrasuite.core.negatives.mochi import per_anchor_columns
from contrasuite.core.pairs import append_negatives


@dataclass(frozen=True)
class Inputs:
    """The core contract's inputs: ``objective(anchors, candidates, pos_mask=pos_mask, neg_weight=neg_weight)``."""

    anchors: Tensor
    candidates: Tensor
    pos_mask: Tensor
    neg_weight: Tensor | None = None


@dataclass(frozen=True)
class Negatives:
    """What a negative source returns for one batch of ``N`` anchors and ``M`` candidates."""

    columns: Tensor
    """``[K, D]`` extra negatives every anchor sees (``K`` may be 0). With ``world > 1`` a source whose
    columns every rank holds alike (the queue, whose enqueue gathers every rank's keys) returns this rank's
    share ``[rank::world]``, so the candidates gathered over ranks hold each column once."""
    own: Tensor | None = None
    """``[N, S, D]`` extra negatives of each anchor's own (MoCHi's mixes): anchor ``i`` sees its ``S``
    columns with weight 1 and every other anchor's with weight 0."""
    weight: Tensor | None = None
    """``[N, M + K]`` weights of the given candidates and of ``columns`` (``None``: 1); top-k mining's
    0 / 1 selection. Positives keep their weight."""
    grad: bool = False
    """Whether ``columns`` and ``own`` carry gradient (generated negatives embedded by the model do; a
    queue's keys and MoCHi's mixes are detached)."""
    anchors: Tensor | None = None
    """Replaced anchors ``[N, D]`` (Feature Transformation's extrapolated ``q^``); ``None``: unchanged."""
    candidates: Tensor | None = None
    """Replaced candidates ``[M, D]`` (the extrapolated ``k^``); ``None``: unchanged."""

    def inputs(self, anchors: Tensor, candidates: Tensor, pos_mask: Tensor | None = None) -> Inputs:
        """The objective's inputs: candidates ``[candidates; columns; own, flattened]``, ``pos_mask`` with
        zero columns appended, and ``neg_weight`` (``None`` when every weight is 1)."""
        anchors = anchors if self.anchors is None else self.anchors
        candidates = candidates if self.candidates is None else self.candidates
        candidates, pos_mask = append_negatives(candidates, pos_mask, self.columns, anchors.shape[0])
        weight = self.weight
        if self.own is not None:
            candidates, pos_mask, weight = per_anchor_columns(candidates, pos_mask, self.own, weight)
        return Inputs(anchors, candidates, pos_mask, weight)


@runtime_checkable
class NegativeSource(Protocol):
    """A source of negatives, used by name (``contrasuite.core.negatives.sources``).

    Its constructor takes ``dim`` (the embedding dimension) and its own parameters, each with a default.
    The class declares what it does, so a domain can check a config before a step runs.
    """

    adds_columns: bool
    """Whether it adds candidate columns (``False``: it only reweights the batch, as top-k mining does)."""
    mixes_positives: bool
    """Whether it replaces the anchors and candidates (Feature Transformation's positive extrapolation,
    which needs detached keys)."""
    grad: bool
    """Whether its columns carry gradient (:attr:`Negatives.grad`)."""

    def __call__(self, anchors: Tensor, candidates: Tensor, *, pos_mask: Tensor | None = None, epoch: int = 0,
                 generator: torch.Generator | None = None, rank: int = 0, world: int = 1) -> Negatives: ...

    def update(self, *keys: Tensor) -> None:
        """Learn from this step's keys, after the loss (the queue enqueues them); stateless sources do nothing."""
