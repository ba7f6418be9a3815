"""A tiny CIFAR-10 in the official python layout, written per test (no shared data needed)."""

import pickle
from pathlib import Path

import numpy as np
import pytest


def write_tiny_cifar(root: Path, per_batch: int = 8, n_test: int = 20, seed: int = 0) -> Path:
    """``root/cifar10/cifar-10-batches-py`` with 5 train batches of ``per_batch`` images and ``n_test`` test images."""
    rng = np.random.default_rng(seed)
    folder = root / "cifar10" / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    for name in names:
        n = n_test if name == "test_batch" else per_batch
        labels = np.arange(n) % 10
        data = rng.integers(0, 256, size=(n, 3072), dtype=np.uint8)
        (folder / name).write_bytes(pickle.dumps({b"labels": labels.tolist(), b"data": data}, protocol=2))
    return root


@pytest.fixture
def tiny_cifar(tmp_path):
    return write_tiny_cifar(tmp_path / "data")
