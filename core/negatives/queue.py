"""A FIFO queue of past keys that supplies extra negative columns (MoCo; He et al., CVPR 2020).

The queue is a ``[K, D]`` registered buffer (so it is saved in checkpoints) with a write pointer.
``enqueue(keys)`` overwrites the oldest entries, wrapping round when the batch size does not divide
``K``; under ``torch.distributed`` the keys of every rank are gathered (without gradient) first, so
all ranks hold the same queue. Entries are detached: the queue never carries gradient.

Use with any objective: ``candidates, pos_mask = queue.extend(keys, pos_mask=None, n_anchors=N)``
appends the queued keys as columns that are positive for no anchor. MoCo-v2 defaults: ``K = 65536``,
``D = 128``; keys are enqueued *after* the loss is computed (current keys are not their own negatives).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from contrasuite.core import distributed  # the module, not its names: core.distributed imports core.objectives, which imports core.negatives
from contrasuite.core.pairs import append_negatives


class NegativeQueue(nn.Module):
    """FIFO memory of ``size`` keys of dimension ``dim``.

    Args:
        size: ``K``, the number of stored keys (MoCo default 65536).
        dim: ``D``, the key dimension.
        group: process group whose keys are gathered on ``enqueue`` (default: the world, if initialised).
    """

    def __init__(self, size: int, dim: int, group: Any = None) -> None:
        super().__init__()
        if size <= 0 or dim <= 0:
            raise ValueError(f"queue size and dim must be > 0, got size={size}, dim={dim}")
        self.group = group
        self.register_buffer("keys", torch.zeros(size, dim))
        self.register_buffer("ptr", torch.zeros((), dtype=torch.long))
        self.register_buffer("filled", torch.zeros((), dtype=torch.long))

    @property
    def size(self) -> int:
        return self.keys.shape[0]

    @torch.no_grad()
    def enqueue(self, keys: Tensor) -> None:
        """Write ``keys [B, D]`` (gathered over ranks) over the oldest entries; keeps the newest ``K``."""
        if keys.dim() != 2 or keys.shape[1] != self.keys.shape[1]:
            raise ValueError(f"keys must be [B, {self.keys.shape[1]}], got {tuple(keys.shape)}")
        keys = keys.detach()
        if distributed.world(self.group)[1] > 1:
            keys = distributed.gather_labels(keys, self.group)
        keys = keys[-self.size :].to(self.keys.dtype)
        b, start = keys.shape[0], int(self.ptr)
        idx = (start + torch.arange(b, device=self.keys.device)) % self.size
        self.keys[idx] = keys.to(self.keys.device)
        self.ptr.fill_((start + b) % self.size)
        self.filled.fill_(min(self.size, int(self.filled) + b))

    def negatives(self) -> Tensor:
        """The stored keys ``[min(filled, K), D]``, oldest first (detached)."""
        n, start = int(self.filled), int(self.ptr)
        if n < self.size:
            return self.keys[:n].clone()
        return torch.roll(self.keys, -start, dims=0).clone()

    def extend(self, candidates: Tensor, pos_mask: Tensor | None = None, n_anchors: int | None = None) -> tuple[Tensor, Tensor]:
        """``(candidates + queued keys, pos_mask + zero columns)`` for the core contract.

        ``pos_mask=None`` means diagonal positives over ``candidates`` for ``n_anchors`` anchors
        (default: as many anchors as candidates).
        """
        n = candidates.shape[0] if n_anchors is None else n_anchors
        return append_negatives(candidates, pos_mask, self.negatives().to(candidates.device), n)
