"""Downloading data files (verified, with progress) and extracting archives once into a cache.

:func:`download` fetches one file with a byte progress bar on stderr, checks its SHA-256 while it arrives
and renames it into place only when it matches (``contrasuite data fetch`` and the loaders that download a
missing file use it).

The emoji sets come as ``<data_root>/emoji/emoji-<style>-64.tar.gz``; a domain that needs the PNG files
extracts each archive once into ``<cache>/emoji/<style>-64-<hash>`` and reads from there afterwards.
The folder name carries the first 16 hex digits of the archive's SHA-256, so a changed, truncated or
missing archive is never served from an old extraction.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tarfile
import tempfile
import urllib.error
import urllib.request
import zlib
from pathlib import Path
from typing import Iterable

from contrasuite.core.task.errors import CorruptData, DataError


def sha256_of(path: Path) -> str:
    """The SHA-256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def download(url: str, dest: Path, sha256: str, *, size: int | None = None) -> Path:
    """Fetch ``url`` to ``dest`` (returned) with a progress bar on stderr, atomically (temp file, then rename).

    A transfer that fails is a :class:`DataError`, one whose SHA-256 is not ``sha256`` a :class:`CorruptData`;
    both name the URL and ``dest``, and leave ``dest`` as it was."""
    from tqdm import tqdm

    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    digest = hashlib.sha256()
    try:
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=60) as response:
            total = size or int(response.headers.get("Content-Length") or 0) or None
            with tqdm(total=total, desc=dest.name, unit="B", unit_scale=True, file=sys.stderr, dynamic_ncols=True) as bar:
                for chunk in iter(lambda: response.read(1 << 20), b""):
                    out.write(chunk)
                    digest.update(chunk)
                    bar.update(len(chunk))
        if digest.hexdigest() != sha256:
            raise CorruptData(f"{url}: the download has SHA-256 {digest.hexdigest()}, expected {sha256}; "
                              f"{dest} was not written")
        os.replace(tmp, dest)
    except (urllib.error.URLError, OSError) as err:
        raise DataError(f"downloading {url} to {dest} failed ({err})") from None
    finally:
        Path(tmp).unlink(missing_ok=True)
    return dest


def cache_root(configured: str = "") -> Path:
    """Where extracted archives live: ``configured``, else ``$CONTRASUITE_CACHE``, else ``~/.cache/contrasuite``."""
    if configured:
        return Path(configured).expanduser()
    return Path(os.environ.get("CONTRASUITE_CACHE", "~/.cache/contrasuite")).expanduser()


def extract_once(archive: Path, target: Path) -> Path:
    """Extract ``archive`` once into ``<target>-<hash>`` (returned); atomic (temp dir + rename).

    An archive holding a single top folder is unwrapped (its contents become the returned folder).
    A missing archive is a ``FileNotFoundError``, a corrupt one a :class:`CorruptData`, both naming it."""
    if not archive.is_file():
        raise FileNotFoundError(f"archive not found: {archive} (set the data root: config.data.root / "
                                f"--data-root / $CONTRASUITE_DATA; docs/data.md, contrasuite data fetch NAME)")
    target = target.with_name(f"{target.name}-{sha256_of(archive)[:16]}")
    if target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        try:
            with tarfile.open(archive) as tar:
                extract_safely(tar, tmp, archive)
        except (tarfile.TarError, EOFError, zlib.error, OSError) as err:
            raise CorruptData(f"{archive}: corrupt or truncated archive ({type(err).__name__}: {err})") from None
        inner = list(tmp.iterdir())
        source = inner[0] if len(inner) == 1 and inner[0].is_dir() else tmp
        try:
            os.replace(source, target)
        except OSError:
            if not target.is_dir():  # no other process finished it first: a real error
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def extract_safely(tar: tarfile.TarFile, dest: Path, archive: Path) -> None:
    """Extract ``tar`` (read from ``archive``) into ``dest`` through the ``data`` filter (PEP 706: nothing lands
    outside ``dest``, no devices, no set-uid bits). A Python without it (before 3.11.4 and 3.10.12, e.g. Debian
    12's 3.11.2) gets the same guarantee by hand, stricter: only regular files and folders with relative names
    inside ``dest``, written with plain permissions; anything else is a :class:`CorruptData` naming the member."""
    if hasattr(tarfile, "data_filter"):
        tar.extractall(dest, filter="data")
        return
    members = tar.getmembers()
    for member in members:
        name = Path(member.name)
        if not (member.isfile() or member.isdir()) or name.is_absolute() or ".." in name.parts:
            raise CorruptData(f"{archive}: member {member.name!r} is not a plain file or folder inside the archive; "
                              "nothing was extracted")
        member.mode = 0o755 if member.isdir() else 0o644
    tar.extractall(dest, members=members)


def emoji_archive(emoji_root: Path, style: str) -> Path:
    """``<emoji_root>/emoji-<style>-64.tar.gz``: any style packed that way works (twitter, google, openmoji, ...)."""
    return Path(emoji_root) / f"emoji-{style}-64.tar.gz"


def emoji_style_dirs(emoji_root: Path, cache: Path, styles: Iterable[str]) -> dict[str, Path]:
    """The extracted 64-px PNG folder of each style: ``<cache>/emoji/<style>-64-<hash>``."""
    return {s: extract_once(emoji_archive(emoji_root, s), cache / "emoji" / f"{s}-64") for s in styles}
