"""A negative source on paired batches, from a domain's ``config.negatives: {name: ..., in_batch: ..., ...}``.

Every domain whose step pairs anchor ``i`` with positive ``i`` (image_ssl's two views, code_search's
query and code) takes extra negatives the same way: :func:`paired_negatives` builds any source
registered in :mod:`contrasuite.core.negatives.sources` by name (its parameters are the config keys
besides ``name`` and ``in_batch``), and :class:`PairedNegatives` lays its output out over the ranks in
the core contract's ``(anchors, candidates, neg_weight)``, positive ``i`` at candidate ``i``:

* ``queue`` (MoCo, He et al. 2020): ``candidates = [positives; queue]``; after each step the (detached)
  keys are enqueued. Keys are gathered over ranks, so every rank holds the same queue; rank ``r``
  appends the slice ``queue[r::W]``, so the candidates gathered by the distributed objective hold every
  queued key exactly once. ``in_batch: false`` keeps MoCo's logits ``[q.k+, q.queue]``: the other
  anchors' positives (of every rank) get ``neg_weight`` 0, so the queue holds the only negatives.
* ``mochi`` (Kalantidis et al. 2020): the queue plus, after ``warmup_epochs``, ``s`` negative-negative
  and ``s_prime`` query mixes of each anchor's ``n_hard`` hardest queued keys, appended as that
  anchor's own columns (``neg_weight`` 0 for every other anchor), so it needs an objective that honours
  ``neg_weight`` (the weighted InfoNCE family, DHEL).
* ``feature_transformation`` (Zhu et al. 2021): positive extrapolation of (anchor, positive) and
  negative interpolation of the queued keys; mixed features are not renormalised, so pair it with a
  ``similarity: dot`` objective on normalised embeddings to keep the paper's logits. Extrapolation
  needs detached keys (a momentum encoder): with a shared encoder the extrapolated key carries gradient
  and every negative logit pulls the keys toward the negatives.
* ``topk``: a weight of 1 on each anchor's ``k`` hardest in-batch negatives, 0 on the others (one
  process only: it weighs this rank's batch).

Random draws come from a CPU generator seeded by the caller's step seed, so a resumed run repeats them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import torch
from torch import Tensor, nn

from contrasuite.core.negatives.source import NegativeSource
from contrasuite.core.negatives.sources import NEGATIVE_SOURCES, build_negative_source
from contrasuite.core.task.errors import ConfigValueError


@dataclass(frozen=True)
class Extended:
    """Objective inputs: positives are the diagonal ``(i, i)``; ``neg_weight`` is over all ranks' columns."""

    anchors: Tensor
    candidates: Tensor
    neg_weight: Tensor | None = None

    def objective_kwargs(self) -> dict[str, Tensor]:
        """``{"neg_weight": ...}`` when some weight is not 1, else nothing."""
        return {} if self.neg_weight is None else {"neg_weight": self.neg_weight}


class PairedNegatives:
    """A core negative source on this rank's (anchors, positives): ``candidates = [positives; columns; own
    columns]``, ``neg_weight`` over every rank's columns in rank order (equal blocks). Other ranks' positives
    and shared columns weigh 1 (the positives 0 unless ``in_batch``), their own columns 0."""

    def __init__(self, source: NegativeSource, in_batch: bool = True) -> None:
        self.source, self.in_batch = source, in_batch

    @property
    def module(self) -> nn.Module:
        """What is checkpointed (the queue's buffers: ``queue.keys``, ``queue.ptr``, ``queue.filled``)."""
        return self.source

    @property
    def extrapolates(self) -> bool:
        """Whether the source mixes the positive pair (Feature Transformation), which needs detached keys."""
        return self.source.mixes_positives

    def to(self, device: torch.device | str) -> PairedNegatives:
        self.source.to(device)
        return self

    def __call__(self, anchors: Tensor, positives: Tensor, *, epoch: int, seed: int, rank: int = 0,
                 world: int = 1) -> Extended:
        try:
            out = self.source(anchors, positives, epoch=epoch, generator=torch.Generator().manual_seed(seed),
                              rank=rank, world=world)
        except ValueError as err:
            raise ConfigValueError(f"config.negatives: {err}") from err
        local = out.inputs(anchors, positives)
        n = positives.shape[0]
        weight = local.neg_weight
        if not self.in_batch:
            weight = torch.ones_like(local.pos_mask, dtype=local.candidates.dtype) if weight is None else weight.clone()
            weight[:, :n] = torch.eye(local.anchors.shape[0], n, dtype=weight.dtype, device=weight.device)
        if weight is None or world == 1:
            return Extended(local.anchors, local.candidates, weight)
        if out.weight is not None:
            raise ConfigValueError(f"config.negatives: {type(self.source).__name__} weighs this rank's batch only; "
                                   "run it on one process")
        remote = torch.zeros_like(weight)
        remote[:, : n + out.columns.shape[0]] = 1.0
        if not self.in_batch:
            remote[:, :n] = 0.0
        return Extended(local.anchors, local.candidates, torch.cat([weight if r == rank else remote for r in range(world)], dim=1))

    def update(self, *keys: Tensor) -> None:
        """Learn from this step's (normalised, detached) keys, after the loss: the queue enqueues them."""
        self.source.update(*keys)


def paired_negatives(spec: Mapping[str, Any], dim: int) -> PairedNegatives | None:
    """``config.negatives`` (``{name: ..., in_batch: ..., **parameters}``) -> a source for embeddings of
    dimension ``dim`` (``None`` for an empty mapping); errors name the key."""
    if not spec:
        return None
    spec = dict(spec)
    name = spec.pop("name", None)
    in_batch = spec.pop("in_batch", True)
    if name not in NEGATIVE_SOURCES:
        raise ConfigValueError(f"config.negatives.name: unknown source {name!r}; known: {sorted(NEGATIVE_SOURCES)}")
    try:
        source = build_negative_source(name, dim=dim, **spec)
    except ValueError as err:
        raise ConfigValueError(f"config.negatives ({name}): {err}") from None
    if not in_batch and not source.adds_columns:
        raise ConfigValueError(f"config.negatives: in_batch=false with a source that adds no columns ({name}, "
                               f"{spec}) leaves no negatives")
    return PairedNegatives(source, in_batch)
