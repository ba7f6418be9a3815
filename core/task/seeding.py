"""Seeds derived from ``(seed, *keys)`` by hashing, independent of any RNG state: exact resume, the same on every rank."""

from __future__ import annotations

import hashlib

import torch


def derived_seed(seed: int, *keys: int | str) -> int:
    """A 63-bit seed from ``(seed, *keys)`` (an epoch, a batch, a step, a purpose): independent of any RNG
    state, so resume is exact, and the same on every rank."""
    digest = hashlib.sha256(",".join(str(k) for k in (seed, *keys)).encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def seeded_generator(seed: int, *keys: int | str) -> torch.Generator:
    """A CPU generator seeded by :func:`derived_seed` ``(seed, *keys)``."""
    return torch.Generator().manual_seed(derived_seed(seed, *keys))
