"""Class-balanced batches: ``batch_size / m`` distinct classes, ``m`` images of each.

The same rule as pytorch-metric-learning's ``MPerClassSampler`` (classes with fewer than ``m``
images are sampled with replacement), but seeded by ``(seed, epoch)`` with a private generator
instead of the global NumPy state, so a resumed run replays the same batches.

With ``groups`` (a group name per image; emoji: the base emoji of each skin-tone variant), classes
are drawn group by group and a group's classes go into the same batch (a random subset of them
when fewer places are left), so the hardest negatives of a class, the other tones of the same
emoji in the same drawing style, are in its batch. Without groups every class is its own group,
and a batch is the next ``batch_size / m`` classes of a shuffled class order.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Hashable, Iterator, Sequence

import torch

from contrasuite.core.task.errors import ConfigValueError


class MPerClassBatches:
    """Iterable of index lists; ``len()`` batches per epoch, about one pass over the images."""

    def __init__(
        self,
        labels: Sequence[int],
        m: int,
        batch_size: int,
        seed: int = 0,
        groups: Sequence[Hashable] | None = None,
    ) -> None:
        if m < 1:
            raise ConfigValueError(f"config.sampler.m_per_class must be >= 1, got {m}")
        if batch_size % m:
            raise ConfigValueError(f"config.batch_size ({batch_size}) must be a multiple of config.sampler.m_per_class ({m})")
        if groups is not None and len(groups) != len(labels):
            raise ValueError(f"{len(groups)} group names for {len(labels)} images")
        by_class: dict[int, list[int]] = defaultdict(list)
        for i, y in enumerate(labels):
            by_class[int(y)].append(i)
        classes = sorted(by_class)
        self.by_class = {c: torch.tensor(by_class[c]) for c in classes}
        group_of = {int(y): g for y, g in zip(labels, groups)} if groups is not None else {c: c for c in classes}
        members: dict[Hashable, list[int]] = defaultdict(list)
        for c in classes:
            members[group_of[c]].append(c)
        self.groups = list(members.values())
        self.m, self.batch_size, self.seed = m, batch_size, seed
        self.classes_per_batch = batch_size // m
        if self.classes_per_batch > len(classes):
            raise ConfigValueError(
                f"config.batch_size / config.sampler.m_per_class = {self.classes_per_batch} classes per batch, "
                f"but the training split has only {len(classes)} classes"
            )
        self.epoch = 0
        self.num_batches = max(1, len(labels) // batch_size)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.num_batches

    def _take(self, members: torch.Tensor, g: torch.Generator) -> torch.Tensor:
        if len(members) >= self.m:
            return members[torch.randperm(len(members), generator=g)[: self.m]]
        return members[torch.randint(len(members), (self.m,), generator=g)]

    def _batch_classes(self, order: list[int], g: torch.Generator) -> list[int]:
        """The next ``classes_per_batch`` classes, whole groups first, from ``order`` (refilled when empty)."""
        chosen: list[int] = []
        while len(chosen) < self.classes_per_batch:
            if not order:
                order.extend(torch.randperm(len(self.groups), generator=g).tolist())
            group = [c for c in self.groups[order.pop(0)] if c not in chosen]  # a group seen twice after a refill
            room = self.classes_per_batch - len(chosen)
            if len(group) > room:
                group = [group[i] for i in torch.randperm(len(group), generator=g)[:room].tolist()]
            chosen += group
        return chosen

    def __iter__(self) -> Iterator[list[int]]:
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
        order: list[int] = []
        for _ in range(self.num_batches):
            chosen = self._batch_classes(order, g)
            yield torch.cat([self._take(self.by_class[c], g) for c in chosen]).tolist()
