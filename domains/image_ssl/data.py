"""CIFAR-10 as uint8 tensors, from any of the layouts a data root may hold.

Accepted under ``<data_root>/cifar10/`` (first match wins with ``source="auto"``):

* ``cifar10-jpg/{train,test}/<class>/NNNN.jpg``: the JPEG copy, extracted;
* ``cifar10-jpg-{train,test}.tar.gz``: the same JPEG copy, still packed (read without extracting);
* ``cifar-10-batches-py/``: the official python archive, extracted;
* ``cifar-10-python.tar.gz``: the official python archive (downloaded from the CIFAR authors' site,
  SHA-256 checked, when nothing else is there and ``download=True``).

The JPEG copy is decoded once into ``<cache_dir>/cifar10-<split>-<key>.npz`` (``key`` hashes the file
list or the tarball's bytes), written atomically, so later runs load 60k images in well under a second.
The official batches are pickles; they are read by :class:`_ArrayUnpickler`, which only reconstructs
numpy arrays, lists, dicts, strings and numbers, never arbitrary objects.
"""

from __future__ import annotations

import hashlib
import io
import os
import pickle
import tarfile
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator

import numpy as np
from PIL import Image

from contrasuite.core.task.errors import ConfigValueError, CorruptData, DataError
from contrasuite.domains.archives import download, sha256_of
from contrasuite.domains.images import open_image, to_rgb8

CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
"""CIFAR-10 class names in the official label order (``batches.meta``)."""

OFFICIAL_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
OFFICIAL_SHA256 = "6d958be074577803d12ecdefd02955f39262c83c16fe9348329d7fe0b5c001ce"
OFFICIAL_ARCHIVE = "cifar-10-python.tar.gz"
OFFICIAL_DIR = "cifar-10-batches-py"
JPEG_DIR = "cifar10-jpg"
SPLITS = ("train", "test")
_OFFICIAL_BATCHES = {"train": [f"data_batch_{i}" for i in range(1, 6)], "test": ["test_batch"]}


@dataclass(frozen=True)
class ImageSet:
    """Images ``[N, 32, 32, 3]`` uint8 (HWC) and labels ``[N]`` int64, plus where they came from."""

    images: np.ndarray
    labels: np.ndarray
    source: str
    """``"CIFAR-10 (JPEG copy)"`` or ``"CIFAR-10 (official python archive)"``."""

    def __len__(self) -> int:
        return len(self.labels)


def load_cifar10(
    data_root: str | os.PathLike,
    split: str,
    *,
    source: str = "auto",
    cache_dir: str | os.PathLike | None = None,
    download: bool = True,
) -> ImageSet:
    """Load CIFAR-10 ``split`` (``"train"`` or ``"test"``) from ``data_root/cifar10``.

    ``source``: ``"auto"`` (JPEG copy if present, else the official archive), ``"jpeg"`` or ``"python"``.
    ``cache_dir``: where decoded JPEG sets are cached (default ``$CONTRASUITE_CACHE`` or
    ``~/.cache/contrasuite``).
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    if source not in ("auto", "jpeg", "python"):
        raise ConfigValueError(f"data.source must be 'auto', 'jpeg' or 'python', got {source!r}")
    root = Path(data_root) / "cifar10"
    jpeg_dir = root / JPEG_DIR / split
    jpeg_tar = root / f"cifar10-jpg-{split}.tar.gz"
    if source in ("auto", "jpeg"):
        if jpeg_dir.is_dir():
            return _cached(_jpeg_folder_members(jpeg_dir), _folder_key(jpeg_dir), split, cache_dir, jpeg_dir)
        if jpeg_tar.is_file():
            return _cached(_jpeg_tar_members(jpeg_tar, split), _file_key(jpeg_tar), split, cache_dir, jpeg_tar)
        if source == "jpeg":
            raise DataError(f"CIFAR-10 JPEG copy not found: expected the folder {jpeg_dir} or the archive {jpeg_tar}")
    return _load_official(root, split, download=download)


# --- the JPEG copy ---------------------------------------------------------------------------------


def _class_index(name: str, where: Path | str) -> int:
    try:
        return CLASSES.index(name)
    except ValueError:
        raise DataError(f"{where}: unknown CIFAR-10 class folder {name!r}; expected one of {CLASSES}") from None


def _jpeg_folder_members(folder: Path) -> Iterator[tuple[str, int, bytes]]:
    """``(file name, label, bytes)`` for every ``<class>/*.jpg`` under ``folder``, in sorted order."""
    for class_dir in sorted(p for p in folder.iterdir() if p.is_dir()):
        label = _class_index(class_dir.name, class_dir)
        for path in sorted(class_dir.glob("*.jpg")):
            yield str(path), label, path.read_bytes()


def _jpeg_tar_members(archive: Path, split: str) -> Iterator[tuple[str, int, bytes]]:
    """``(member name, label, bytes)`` for ``cifar10-jpg/<split>/<class>/*.jpg`` members, sorted by name.

    Members are read in archive order (a gzip stream cannot seek back cheaply), then sorted; nothing is
    read before the first member is asked for, so a load from the decoded cache never reads the archive
    (it read all 60,000 members, 5 s, on every load before).
    """
    out = []
    try:
        with tarfile.open(archive, "r:gz") as tar:
            for member in tar:
                if not (member.isfile() and member.name.endswith(".jpg")):
                    continue
                parts = Path(member.name).parts
                if len(parts) < 3 or parts[-3] != split:
                    raise DataError(f"{archive}: unexpected member {member.name!r}; expected cifar10-jpg/{split}/<class>/NNNN.jpg")
                handle = tar.extractfile(member)
                if handle is None:
                    raise DataError(f"{archive}: cannot read member {member.name!r}")
                out.append((f"{archive}:{member.name}", _class_index(parts[-2], archive), handle.read()))
    except (tarfile.TarError, EOFError, OSError, zlib.error) as err:
        raise DataError(f"{archive}: corrupt or unreadable archive ({err})") from err
    yield from sorted(out, key=lambda item: item[0])


def decode_jpeg(data: bytes, name: str) -> np.ndarray:
    """Decode one 32x32 image to ``[32, 32, 3]`` uint8; errors name the file."""
    with open_image(data, f"cannot decode image {name}") as img:
        array = np.asarray(to_rgb8(img), dtype=np.uint8)
    if array.shape != (32, 32, 3):
        raise DataError(f"image {name} has shape {array.shape}, expected (32, 32, 3)")
    return array


def _folder_key(folder: Path, pattern: str = "*.jpg") -> str:
    digest = hashlib.sha256()
    for path in sorted(folder.rglob(pattern)):
        stat = path.stat()
        digest.update(f"{path.relative_to(folder)}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


def _file_key(path: Path) -> str:
    return sha256_of(path)[:16]


def default_cache_dir() -> Path:
    return Path(os.environ.get("CONTRASUITE_CACHE", Path.home() / ".cache" / "contrasuite"))


def _cached(
    members: Iterable[tuple[str, int, bytes]], key: str, split: str, cache_dir: str | os.PathLike | None,
    source: Path, *, decode: Callable[[bytes, str], np.ndarray] = decode_jpeg, prefix: str = "cifar10-jpg",
    label: str = "CIFAR-10 (JPEG copy)",
) -> ImageSet:
    """Decode ``members`` once and cache them as ``<prefix>-<split>-<key>.npz`` (atomic write); later calls load it."""
    cache = Path(cache_dir) if cache_dir else default_cache_dir()
    target = cache / f"{prefix}-{split}-{key}.npz"
    if target.is_file():
        try:
            with np.load(target, allow_pickle=False) as saved:
                return ImageSet(saved["images"], saved["labels"].astype(np.int64), label)
        except (OSError, ValueError, KeyError):
            target.unlink(missing_ok=True)  # a damaged cache is rebuilt from the source
    images, labels = [], []
    for name, index, data in members:
        images.append(decode(data, name))
        labels.append(index)
    if not images:
        raise DataError(f"{source}: no images found for split {split!r}")
    result = ImageSet(np.stack(images), np.asarray(labels, dtype=np.int64), label)
    cache.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=cache, prefix=target.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            np.savez(handle, images=result.images, labels=result.labels)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return result


# --- your own image folder -------------------------------------------------------------------------

FOLDER_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp")


def folder_classes(folder: Path) -> tuple[str, ...]:
    """The class names of an image folder: the sub-folders of ``<folder>/train``, sorted."""
    train = Path(folder) / "train"
    if not train.is_dir():
        raise DataError(f"image folder {folder}: expected {train}/<class>/<image> (config.data.folder)")
    classes = tuple(sorted(p.name for p in train.iterdir() if p.is_dir()))
    if not classes:
        raise DataError(f"image folder {train} has no class sub-folders")
    return classes


def load_image_folder(folder: str | os.PathLike, split: str, size: int,
                      cache_dir: str | os.PathLike | None = None) -> ImageSet:
    """``<folder>/<split>/<class>/<image>`` as ``[N, size, size, 3]`` uint8 (RGB, bicubic resize), cached once.

    Classes are the sub-folders of ``<folder>/train`` (sorted), the same indices for every split; a
    class folder of another split that train does not have is an error naming it."""
    folder = Path(folder)
    classes = folder_classes(folder)
    root = folder / split
    if not root.is_dir():
        raise DataError(f"image folder {folder}: split folder {root} not found")
    members = []
    for class_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        if class_dir.name not in classes:
            raise DataError(f"{class_dir}: class {class_dir.name!r} is not among the training classes {list(classes)}")
        for path in sorted(p for p in class_dir.iterdir() if p.suffix.lower() in FOLDER_SUFFIXES):
            members.append((str(path), classes.index(class_dir.name), path.read_bytes()))

    def decode(data: bytes, name: str) -> np.ndarray:
        with open_image(data, name) as img:
            rgb = to_rgb8(img)
            return np.asarray(rgb if rgb.size == (size, size) else rgb.resize((size, size), Image.BICUBIC), dtype=np.uint8)

    # "rgb8": decoded by to_rgb8 (caches of older versions clipped 16-bit images; they are not reused)
    key = hashlib.sha256(f"{_folder_key(root, '*.*')}:{size}:rgb8".encode()).hexdigest()[:16]
    return _cached(members, key, split, cache_dir, root, decode=decode, prefix=f"folder-{folder.name}",
                   label=f"image folder {folder}")


# --- the official python archive -------------------------------------------------------------------


_RECONSTRUCT = np.ndarray.__reduce__(np.zeros(0))[0]
_ALLOWED = {
    ("numpy.core.multiarray", "_reconstruct"): _RECONSTRUCT,
    ("numpy._core.multiarray", "_reconstruct"): _RECONSTRUCT,
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
    ("_codecs", "encode"): __import__("codecs").encode,
}


class _ArrayUnpickler(pickle.Unpickler):
    """An unpickler that can only rebuild numpy arrays and builtin containers (no code execution)."""

    def find_class(self, module: str, name: str) -> object:
        try:
            return _ALLOWED[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name} from a CIFAR batch") from None


def read_batch(data: bytes, name: str) -> tuple[np.ndarray, np.ndarray]:
    """One official batch -> ``(images [N, 32, 32, 3] uint8, labels [N] int64)``; errors name the batch."""
    try:
        batch = _ArrayUnpickler(io.BytesIO(data), encoding="bytes").load()
        pixels = np.asarray(batch[b"data"], dtype=np.uint8)
        labels = np.asarray(batch[b"labels"], dtype=np.int64)
    except (pickle.UnpicklingError, EOFError, KeyError, TypeError, ValueError) as err:
        raise DataError(f"corrupt CIFAR-10 batch {name}: {err}") from err
    if pixels.ndim != 2 or pixels.shape[1] != 3072 or len(labels) != len(pixels):
        raise DataError(f"corrupt CIFAR-10 batch {name}: data {pixels.shape}, labels {labels.shape}")
    if labels.size and (labels.min() < 0 or labels.max() >= len(CLASSES)):
        raise DataError(f"corrupt CIFAR-10 batch {name}: labels outside 0..9")
    return pixels.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1).copy(), labels


def _load_official(root: Path, split: str, *, download: bool) -> ImageSet:
    folder, archive = root / OFFICIAL_DIR, root / OFFICIAL_ARCHIVE
    names = _OFFICIAL_BATCHES[split]
    if folder.is_dir():
        blobs = []
        for name in names:
            path = folder / name
            if not path.is_file():
                raise DataError(f"CIFAR-10 batch missing: expected {path}")
            blobs.append((str(path), path.read_bytes()))
    else:
        if not archive.is_file():
            if not download:
                raise DataError(_missing_message(root))
            _download(archive, root)
        blobs = _archive_batches(archive, names)
    parts = [read_batch(data, name) for name, data in blobs]
    images = np.concatenate([p[0] for p in parts])
    labels = np.concatenate([p[1] for p in parts])
    return ImageSet(images, labels, "CIFAR-10 (official python archive)")


def _archive_batches(archive: Path, names: list[str]) -> list[tuple[str, bytes]]:
    try:
        with tarfile.open(archive, "r:gz") as tar:
            out = []
            for name in names:
                member = f"{OFFICIAL_DIR}/{name}"
                try:
                    handle = tar.extractfile(member)
                except KeyError:
                    handle = None
                if handle is None:
                    raise DataError(f"{archive}: member {member} missing")
                out.append((f"{archive}:{member}", handle.read()))
            return out
    except (tarfile.TarError, EOFError, OSError) as err:
        raise DataError(f"{archive}: corrupt or unreadable archive ({err})") from err


def _missing_message(root: Path) -> str:
    return (
        f"CIFAR-10 not found under {root}: expected the JPEG copy ({root / JPEG_DIR}/{{train,test}}/ or "
        f"{root}/cifar10-jpg-{{train,test}}.tar.gz), or the official archive {root / OFFICIAL_ARCHIVE} "
        f"(from {OFFICIAL_URL}, SHA-256 {OFFICIAL_SHA256}) or its extracted folder {root / OFFICIAL_DIR}/ "
        f"(contrasuite data fetch cifar10; docs/data.md)"
    )


def _download(archive: Path, root: Path) -> None:
    """Fetch the official archive to ``archive`` (atomically, with progress) and check its SHA-256."""
    try:
        download(OFFICIAL_URL, archive, OFFICIAL_SHA256)
    except CorruptData:
        raise
    except DataError as err:
        raise DataError(f"{err}. " + _missing_message(root)) from None
