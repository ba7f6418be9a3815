"""Shared fixtures: a session emoji cache, tiny public-layout folders (the emoji data root: tests/domains/conftest.py)."""

from pathlib import Path

import numpy as np
import pytest
from PIL import Image


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    """One extraction of the emoji archives (and stem caches) for the whole test session."""
    return tmp_path_factory.mktemp("contrasuite_cache")


def write_image(path: Path, value: int, size: int = 24) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(value)
    Image.fromarray(rng.integers(0, 255, (size, size, 3), dtype=np.uint8)).save(path)


def emoji_gallery(cache_dir: Path, gallery: Path) -> Path:
    """Five Google-style emoji of the session cache copied into the new folder ``gallery``; the query returned is the
    Twitter style of the first."""
    gallery.mkdir()
    sources = sorted(next((cache_dir / "emoji").glob("google-64-*")).glob("1f34*.png"))[:5]
    for p in sources:
        (gallery / p.name).write_bytes(p.read_bytes())
    return next((cache_dir / "emoji").glob("twitter-64-*")) / sources[0].name


def make_tiny_cub(root: Path) -> Path:
    """CUB_200_2011 layout with classes 1-4 and 101-104, 3 images each."""
    base = root / "CUB_200_2011"
    images, labels = [], []
    n = 0
    for c in [1, 2, 3, 4, 101, 102, 103, 104]:
        for k in range(3):
            n += 1
            rel = f"{c:03d}.Bird_{c}/img_{k}.jpg"
            write_image(base / "images" / rel, n)
            images.append(f"{n} {rel}")
            labels.append(f"{n} {c}")
    (base / "images.txt").write_text("\n".join(images) + "\n")
    (base / "image_class_labels.txt").write_text("\n".join(labels) + "\n")
    return root


@pytest.fixture
def tiny_cub(tmp_path) -> Path:
    return make_tiny_cub(tmp_path)


@pytest.fixture(scope="session")
def tiny_cub_session(tmp_path_factory) -> Path:
    return make_tiny_cub(tmp_path_factory.mktemp("cub"))
