"""Negative sources by name: thin adapters of the queue, MoCHi, Feature Transformation and top-k mining
to :class:`~contrasuite.core.negatives.source.NegativeSource`, and the registry.

Registration is explicit, as for objectives: each adapter is listed in ``NEGATIVE_SOURCES``; a domain
or plugin adds its own with :func:`register_negative_source`. A domain builds one from its config with
:func:`build_negative_source` (``{name: queue, size: 4096}`` -> ``build_negative_source("queue", dim=D,
size=4096)``); ``contrasuite list`` shows every source with its parameters' defaults.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from contrasuite.core.negatives.feature_transformation import FeatureTransformation
from contrasuite.core.negatives.mochi import mochi
from contrasuite.core.negatives.queue import NegativeQueue
from contrasuite.core.negatives.source import Negatives, NegativeSource
from contrasuite.core.negatives.topk import mine_hard_negatives


class QueueSource(nn.Module):
    """MoCo's FIFO queue of past keys (:class:`~contrasuite.core.negatives.queue.NegativeQueue`) as shared
    columns; ``update`` enqueues both views' keys. State: ``queue.keys``, ``queue.ptr``, ``queue.filled``."""

    adds_columns, mixes_positives, grad = True, False, False

    def __init__(self, dim: int, size: int = 4096) -> None:
        super().__init__()
        self.queue = NegativeQueue(size, dim)

    def queued(self, rank: int = 0, world: int = 1) -> Tensor:
        """This rank's share ``queue[rank::world]`` of the stored keys (every rank holds the same queue)."""
        if self.queue.size % world:
            raise ValueError(f"the queue size {self.queue.size} must be divisible by the {world} ranks")
        return self.queue.negatives()[rank::world]

    def forward(self, anchors: Tensor, candidates: Tensor, *, pos_mask: Tensor | None = None, epoch: int = 0,
                generator: torch.Generator | None = None, rank: int = 0, world: int = 1) -> Negatives:
        return Negatives(self.queued(rank, world).to(candidates.dtype))

    @torch.no_grad()
    def update(self, *keys: Tensor) -> None:
        self.queue.enqueue(torch.cat([k.detach() for k in keys]))


class MochiSource(QueueSource):
    """The queue plus, from ``warmup_epochs`` on, :func:`~contrasuite.core.negatives.mochi.mochi`'s ``s``
    negative-negative and ``s_prime`` query mixes of each anchor's ``n_hard`` hardest queued keys, as
    the anchor's own columns (detached)."""

    def __init__(self, dim: int, size: int = 4096, n_hard: int = 256, s: int = 128, s_prime: int = 32,
                 warmup_epochs: int = 0) -> None:
        super().__init__(dim, size)
        self.n_hard, self.s, self.s_prime, self.warmup_epochs = n_hard, s, s_prime, warmup_epochs

    def forward(self, anchors: Tensor, candidates: Tensor, *, pos_mask: Tensor | None = None, epoch: int = 0,
                generator: torch.Generator | None = None, rank: int = 0, world: int = 1) -> Negatives:
        shared = super().forward(anchors, candidates, rank=rank, world=world)
        pool = self.queue.negatives()
        if epoch < self.warmup_epochs or len(pool) == 0 or self.s + self.s_prime == 0:
            return shared
        return Negatives(shared.columns, own=mochi(anchors, pool, self.n_hard, self.s, self.s_prime, generator=generator))


class FeatureTransformationSource(QueueSource):
    """:class:`~contrasuite.core.negatives.feature_transformation.FeatureTransformation`: the extrapolated
    pair replaces the anchors and candidates, the interpolated queue is the columns (``size=0``: no queue,
    in-batch negatives only; a one-key queue is still kept, unused, so the state has one form). Runs on
    the generator's device (the CPU for a CPU generator; a few vectors), so one generator serves every
    device; gradients flow through the move."""

    def __init__(self, dim: int, size: int = 4096, pos_alpha: float = 2.0, neg_alpha: float = 1.6,
                 extrapolate: bool = True, interpolate: bool = True) -> None:
        super().__init__(dim, max(size, 1))
        self.use_queue, self.adds_columns, self.mixes_positives = size > 0, size > 0, extrapolate
        self.transform = FeatureTransformation(pos_alpha, neg_alpha, extrapolate=extrapolate, interpolate=interpolate)

    def forward(self, anchors: Tensor, candidates: Tensor, *, pos_mask: Tensor | None = None, epoch: int = 0,
                generator: torch.Generator | None = None, rank: int = 0, world: int = 1) -> Negatives:
        negatives = self.queued(rank, world) if self.use_queue else None
        if negatives is not None and len(negatives) == 0:
            negatives = None
        device, here = anchors.device, torch.device("cpu") if generator is None else generator.device
        out = self.transform(anchors.to(here), candidates.to(here), None if negatives is None else negatives.to(here),
                             generator=generator)
        n = candidates.shape[0]  # the mixed queue is detached; its slice of out.candidates only looks attached
        return Negatives(out.candidates[n:].detach().to(device), anchors=out.anchors.to(device),
                         candidates=out.candidates[:n].to(device))

    def update(self, *keys: Tensor) -> None:
        if self.use_queue:
            super().update(*keys)


class TopKSource(nn.Module):
    """Top-k hard negative mining (:func:`~contrasuite.core.negatives.topk.mine_hard_negatives`): no new
    columns; a weight of 1 on each anchor's ``k`` most similar negatives among the candidates (``k`` is
    clipped to the candidates), 0 on the others."""

    adds_columns, mixes_positives, grad = False, False, False

    def __init__(self, dim: int, k: int = 16, similarity: str = "cosine") -> None:
        super().__init__()
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        self.k, self.similarity = k, similarity

    def forward(self, anchors: Tensor, candidates: Tensor, *, pos_mask: Tensor | None = None, epoch: int = 0,
                generator: torch.Generator | None = None, rank: int = 0, world: int = 1) -> Negatives:
        hard = mine_hard_negatives(anchors, candidates, k=min(self.k, candidates.shape[0]), pos_mask=pos_mask,
                                   similarity=self.similarity)
        return Negatives(candidates.new_zeros(0, candidates.shape[1]), weight=hard.neg_weight)

    def update(self, *keys: Tensor) -> None:
        """Stateless."""


NEGATIVE_SOURCES: dict[str, type[nn.Module]] = {
    "queue": QueueSource,
    "mochi": MochiSource,
    "feature_transformation": FeatureTransformationSource,
    "topk": TopKSource,
}


def register_negative_source(name: str, cls: type[nn.Module]) -> type[nn.Module]:
    """Add ``cls`` (a :class:`NegativeSource` whose constructor takes ``dim``) under ``name``; a name is
    registered once."""
    if NEGATIVE_SOURCES.get(name, cls) is not cls:
        raise ValueError(f"negative source {name!r} is already registered ({NEGATIVE_SOURCES[name].__name__})")
    if not all(hasattr(cls, a) for a in ("adds_columns", "mixes_positives", "grad", "update")):
        raise TypeError(f"{cls.__name__} does not declare the NegativeSource interface (adds_columns, mixes_positives, "
                        "grad, update)")
    NEGATIVE_SOURCES[name] = cls
    return cls


def build_negative_source(name: str, *, dim: int, **params: Any) -> NegativeSource:
    """The source registered as ``name`` for embeddings of dimension ``dim``; errors name the source."""
    if name not in NEGATIVE_SOURCES:
        raise ValueError(f"unknown negative source {name!r}; known: {sorted(NEGATIVE_SOURCES)}")
    try:
        return NEGATIVE_SOURCES[name](dim, **params)
    except TypeError as err:
        raise ValueError(f"negative source {name!r}: {err}") from None

