"""Class-balanced batches: ``batch_size / m`` distinct classes, ``m`` images of each.

The same rule as pytorch-metric-learning's ``MPerClassSampler`` (classes with fewer than ``m``
images are sampled with replacement), but seeded by ``(seed, epoch)`` with a private generator
instead of the global NumPy state, so a resumed run replays the same batches.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Iterator, Sequence

import torch


class MPerClassBatches:
    """Iterable of index lists; ``len()`` batches per epoch, about one pass over the images."""

    def __init__(self, labels: Sequence[int], m: int, batch_size: int, seed: int = 0) -> None:
        if m < 1:
            raise ValueError(f"sampler.m_per_class must be >= 1, got {m}")
        if batch_size % m:
            raise ValueError(f"sampler.batch_size ({batch_size}) must be a multiple of sampler.m_per_class ({m})")
        by_class: dict[int, list[int]] = defaultdict(list)
        for i, y in enumerate(labels):
            by_class[int(y)].append(i)
        self.by_class = [torch.tensor(v) for _, v in sorted(by_class.items())]
        self.m, self.batch_size, self.seed = m, batch_size, seed
        self.classes_per_batch = batch_size // m
        if self.classes_per_batch > len(self.by_class):
            raise ValueError(
                f"sampler.batch_size / m_per_class = {self.classes_per_batch} classes per batch, "
                f"but the training split has only {len(self.by_class)} classes"
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

    def __iter__(self) -> Iterator[list[int]]:
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
        order = torch.empty(0, dtype=torch.long)
        for _ in range(self.num_batches):
            if len(order) < self.classes_per_batch:
                order = torch.cat([order, torch.randperm(len(self.by_class), generator=g)])
            chosen, order = order[: self.classes_per_batch], order[self.classes_per_batch :]
            if len(set(chosen.tolist())) < len(chosen):  # a class straddling two permutations
                chosen = torch.randperm(len(self.by_class), generator=g)[: self.classes_per_batch]
            yield torch.cat([self._take(self.by_class[c], g) for c in chosen.tolist()]).tolist()
