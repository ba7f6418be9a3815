"""On-disk training images, decoded and augmented in ``DataLoader`` workers, reproducible to the bit.

A domain whose images do not fit in memory (CUB with ``preload: false``, translation folders) builds
its epoch's batches as lists of indices, as before, and hands them to :func:`image_loader`. Every sample
is addressed as ``(seed, epoch, position in the epoch, index)``; its CPU augmentation (albumentations,
the project's CPU augmentation library) is reseeded from that address before it runs. So the batch a
step receives does not depend on the number of workers, on which worker decoded it, or on a resume in
the middle of the epoch: the engine skips the batches already done and the rest are the same.

Workers persist across epochs (the batch sampler is told the epoch in the main process, where workers
take their indices from), batches are pinned when the run is on CUDA, and on-device augmentation
(kornia, as image_ssl uses) stays in the task's step.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, Sampler

from contrasuite.core.distributed import batch_shard
from contrasuite.domains.images import read_rgb_array

Transform = Callable[[np.ndarray, int], np.ndarray]
"""``(uint8 HWC image, sample seed) -> uint8 HWC image``: a CPU augmentation reseeded per sample."""


def sample_seed(seed: int, epoch: int, position: int) -> int:
    """A 63-bit seed for the sample at ``position`` of ``epoch`` (independent of workers and resume)."""
    digest = hashlib.sha256(f"{seed}:{epoch}:{position}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def albumentations_transform(*transforms: Any) -> Transform:
    """An albumentations pipeline as a :data:`Transform` (``A.Compose`` reseeded for every sample)."""
    import os

    os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")
    import albumentations as A

    compose = A.Compose(list(transforms), seed=0)

    def run(image: np.ndarray, seed: int) -> np.ndarray:
        compose.set_random_seed(seed)
        return compose(image=image)["image"]

    return run


class OnDiskImages(Dataset):
    """``dataset[(epoch, position, index)] -> (uint8 [3, H, W], label)`` read from ``paths[index]``."""

    def __init__(self, paths: Sequence[Path], labels: Sequence[int] | None, transform: Transform, seed: int) -> None:
        self.paths, self.transform, self.seed = [Path(p) for p in paths], transform, seed
        self.labels = torch.as_tensor(list(labels) if labels is not None else [-1] * len(self.paths))

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, key: tuple[int, int, int]) -> tuple[Tensor, Tensor]:
        epoch, position, index = key
        image = self.transform(read_rgb_array(self.paths[index]), sample_seed(self.seed, epoch, position))
        return torch.from_numpy(np.ascontiguousarray(image)).permute(2, 0, 1), self.labels[index]


class EpochBatches(Sampler):
    """Yields the current epoch's batches as ``(epoch, position, index)`` keys; ``set_epoch`` chooses them.

    ``batches_of(epoch)`` gives the global batches; rank ``rank`` of ``world_size`` gets its
    :func:`~contrasuite.core.distributed.batch_shard` of each, keyed by the global position, so its samples
    are augmented as one process would augment them."""

    def __init__(self, batches_of: Callable[[int], Sequence[Sequence[int]]], rank: int = 0, world_size: int = 1) -> None:
        self.batches_of, self.epoch = batches_of, 0
        self.rank, self.world_size = rank, world_size
        self._batches: Sequence[Sequence[int]] = ()

    def set_epoch(self, epoch: int) -> None:
        self.epoch, self._batches = epoch, self.batches_of(epoch)

    def __len__(self) -> int:
        return len(self._batches)

    def __iter__(self) -> Iterator[list[tuple[int, int, int]]]:
        position = 0
        for batch in self._batches:
            part = batch_shard(len(batch), self.rank, self.world_size)
            yield [(self.epoch, position + part.start + j, int(i)) for j, i in enumerate(batch[part])]
            position += len(batch)


def image_loader(dataset: OnDiskImages, sampler: EpochBatches, workers: int, device: torch.device) -> DataLoader:
    """The DataLoader over ``sampler``'s batches: ``workers`` persistent processes, pinned memory on CUDA.

    It has a generator of its own: a DataLoader draws a base seed for its workers whenever it starts
    them, which would otherwise take a number from the global RNG (that the engine checkpoints and the
    tasks draw from) once per epoch without workers but once per run with persistent ones."""
    return DataLoader(dataset, batch_sampler=sampler, num_workers=workers, persistent_workers=workers > 0,
                      pin_memory=device.type == "cuda", prefetch_factor=2 if workers > 0 else None,
                      generator=torch.Generator().manual_seed(dataset.seed))


def epoch_batches(loader: DataLoader, epoch: int) -> Iterator[Any]:
    """The loader's batches of ``epoch`` (the sampler learns the epoch before the workers are asked)."""
    loader.batch_sampler.set_epoch(epoch)
    yield from loader
