"""Extra negatives for the paired form, from ``config.negatives: {name: ..., ...}``.

Each source turns (anchors = one view's projections, positives = the other view's) into the core
contract's ``(anchors, candidates, neg_weight)`` with the positive of anchor ``i`` at candidate ``i``:

* ``queue`` (MoCo, He et al. 2020): ``candidates = [positives; queue]``; after each step both views'
  (normalised, detached) keys are enqueued. Keys are gathered over ranks, so every rank holds the
  same queue; rank ``r`` appends the slice ``queue[r::W]``, so the gathered candidates hold every
  queued key exactly once. ``in_batch: false`` keeps MoCo's logits ``[q.k+, q.queue]``: the other
  anchors' positives (of every rank) get ``neg_weight`` 0, so the queue holds the only negatives.
* ``mochi`` (Kalantidis et al. 2020): the queue plus, after ``warmup_epochs``, ``s`` negative-negative
  and ``s_prime`` query mixes of each anchor's ``n_hard`` hardest queued keys, appended as that
  anchor's own columns (``neg_weight`` 0 for every other anchor), so it needs an objective that honours
  ``neg_weight`` (the weighted InfoNCE family, DHEL).
* ``feature_transformation`` (Zhu et al. 2021): positive extrapolation of (anchor, positive) and
  negative interpolation of the queued keys; mixed features are not renormalised, so pair it with a
  ``similarity: dot`` objective on the (already normalised) projections to keep the paper's logits.
  The official code runs it in MoCo: detached keys from a momentum encoder
  (``config.model.key_momentum``) and ``in_batch: false``. With a shared encoder the extrapolated
  key ``k^ = lambda k + (1 - lambda) q`` carries gradient, and every negative logit then pulls the
  keys toward the negatives (the representation collapses).

Mixing draws come from a generator seeded by the step's augmentation seed, so resume is exact.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import torch
from torch import Tensor, nn

from contrasuite.core.negatives import FeatureTransformation, NegativeQueue, mochi, per_anchor_columns

from contrasuite.domains.errors import ConfigValueError


@dataclass(frozen=True)
class Extended:
    """Objective inputs: positives are the diagonal ``(i, i)``; ``neg_weight`` is over all ranks' columns."""

    anchors: Tensor
    candidates: Tensor
    neg_weight: Tensor | None = None


class QueueNegatives(nn.Module):
    """``candidates = [positives; this rank's slice of the queue]``."""

    extrapolates = False
    """Whether the source mixes the positive pair (Feature Transformation), which needs detached keys."""

    def __init__(self, dim: int, size: int = 4096, in_batch: bool = True) -> None:
        super().__init__()
        self.queue = NegativeQueue(size, dim)
        self.in_batch = in_batch

    def queued(self, rank: int, world: int) -> Tensor:
        if self.queue.size % world:
            raise ConfigValueError(f"config.negatives.size={self.queue.size} must be divisible by the {world} ranks")
        return self.queue.negatives()[rank::world]

    def forward(self, anchors: Tensor, positives: Tensor, *, epoch: int, seed: int, rank: int = 0, world: int = 1) -> Extended:
        negatives = self.queued(rank, world).to(positives.dtype)
        return self._extended(anchors, positives, negatives, rank, world)

    def _extended(self, anchors: Tensor, positives: Tensor, negatives: Tensor, rank: int, world: int) -> Extended:
        """``[positives; negatives]``, with the other anchors' positives weighted 0 unless ``in_batch``."""
        candidates = torch.cat([positives, negatives])
        if self.in_batch:
            return Extended(anchors, candidates)
        n = positives.shape[0]
        local = torch.ones(anchors.shape[0], candidates.shape[0], dtype=candidates.dtype, device=candidates.device)
        local[:, :n] = torch.eye(anchors.shape[0], n, dtype=candidates.dtype, device=candidates.device)
        remote = torch.ones_like(local)
        remote[:, :n] = 0.0
        return Extended(anchors, candidates, torch.cat([local if r == rank else remote for r in range(world)], dim=1))

    @torch.no_grad()
    def update(self, *keys: Tensor) -> None:
        """Enqueue the (normalised) projections of this step, after the loss."""
        self.queue.enqueue(torch.cat([k.detach() for k in keys]))


def _generator(seed: int) -> torch.Generator:
    """A CPU generator: draws are made on the CPU, so they do not depend on the device."""
    return torch.Generator().manual_seed(seed)


class MochiNegatives(QueueNegatives):
    """Queue plus per-anchor MoCHi mixes of the hardest queued keys."""

    def __init__(self, dim: int, size: int = 4096, n_hard: int = 256, s: int = 128, s_prime: int = 32,
                 warmup_epochs: int = 0) -> None:
        super().__init__(dim, size)
        self.n_hard, self.s, self.s_prime, self.warmup_epochs = n_hard, s, s_prime, warmup_epochs

    def forward(self, anchors: Tensor, positives: Tensor, *, epoch: int, seed: int, rank: int = 0, world: int = 1) -> Extended:
        base = super().forward(anchors, positives, epoch=epoch, seed=seed, rank=rank, world=world)
        pool = self.queue.negatives()
        if epoch < self.warmup_epochs or len(pool) == 0 or self.s + self.s_prime == 0:
            return base
        synthetic = mochi(anchors, pool, self.n_hard, self.s, self.s_prime, generator=_generator(seed))
        candidates, _, weight = per_anchor_columns(base.candidates, None, synthetic)
        return Extended(anchors, candidates, _global_weight(weight, base.candidates.shape[0], rank, world))


def _global_weight(local: Tensor, n_plain: int, rank: int, world: int) -> Tensor:
    """Local ``[n, m]`` weights -> ``[n, W m]`` over every rank's columns (rank-major, equal blocks).

    Other ranks' plain columns (their positives and queue slices) weigh 1, their synthetic columns 0.
    """
    if world == 1:
        return local
    n, m = local.shape
    remote = torch.zeros_like(local)
    remote[:, :n_plain] = 1.0
    return torch.cat([local if r == rank else remote for r in range(world)], dim=1)


class FeatureTransformationNegatives(QueueNegatives):
    """Positive extrapolation and queue interpolation (``size=0``: in-batch negatives only)."""

    def __init__(self, dim: int, size: int = 4096, pos_alpha: float = 2.0, neg_alpha: float = 1.6,
                 extrapolate: bool = True, interpolate: bool = True, in_batch: bool = True) -> None:
        if size == 0 and not in_batch:
            raise ValueError("in_batch=false with size=0 leaves no negatives")
        super().__init__(dim, max(size, 1), in_batch)
        self.use_queue, self.extrapolates = size > 0, extrapolate
        self.transform = FeatureTransformation(pos_alpha, neg_alpha, extrapolate=extrapolate, interpolate=interpolate)

    def forward(self, anchors: Tensor, positives: Tensor, *, epoch: int, seed: int, rank: int = 0, world: int = 1) -> Extended:
        negatives = self.queued(rank, world) if self.use_queue else None
        if negatives is not None and len(negatives) == 0:
            negatives = None
        device = anchors.device
        # core's Feature Transformation draws on the inputs' device from one generator; run it on the
        # CPU (a few vectors) so the CPU generator serves every device. Gradients flow through .to().
        out = self.transform(anchors.cpu(), positives.cpu(), None if negatives is None else negatives.cpu(),
                             generator=_generator(seed))
        n = positives.shape[0]
        return self._extended(out.anchors.to(device), out.candidates[:n].to(device), out.candidates[n:].to(device),
                              rank, world)

    def update(self, *keys: Tensor) -> None:
        if self.use_queue:
            super().update(*keys)


NegativeSource = QueueNegatives
SOURCES: dict[str, type[QueueNegatives]] = {
    "queue": QueueNegatives,
    "mochi": MochiNegatives,
    "feature_transformation": FeatureTransformationNegatives,
}


def build_negative_source(spec: Mapping[str, Any], dim: int) -> QueueNegatives | None:
    """``{name: ..., **kwargs}`` -> a source (``None`` for an empty mapping); errors name the key."""
    if not spec:
        return None
    spec = dict(spec)
    name = spec.pop("name", None)
    if name not in SOURCES:
        raise ConfigValueError(f"config.negatives.name: unknown source {name!r}; known: {sorted(SOURCES)}")
    try:
        return SOURCES[name](dim, **spec)
    except TypeError as err:
        raise ConfigValueError(f"config.negatives ({name}): {err}") from None
