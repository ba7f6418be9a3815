"""Extracting the shipped data archives once into a cache, shared by the domains that read emoji PNGs.

The emoji sets come as ``<data_root>/emoji/emoji-<style>-64.tar.gz``; a domain that needs the PNG files
extracts each archive once into ``<cache>/emoji/<style>-64`` and reads from there afterwards.
"""

from __future__ import annotations

import os
import shutil
import tarfile
import tempfile
from pathlib import Path
from typing import Iterable


def cache_root(configured: str = "") -> Path:
    """Where extracted archives live: ``configured``, else ``$CONTRASUITE_CACHE``, else ``~/.cache/contrasuite``."""
    if configured:
        return Path(configured).expanduser()
    return Path(os.environ.get("CONTRASUITE_CACHE", "~/.cache/contrasuite")).expanduser()


def extract_once(archive: Path, target: Path) -> Path:
    """Extract ``archive`` into ``target`` once; atomic (temp dir + rename), so readers never see half.

    An archive holding a single top folder is unwrapped (its contents become ``target``)."""
    if target.is_dir():
        return target
    if not archive.is_file():
        raise FileNotFoundError(f"archive not found: {archive} (set the data root: config.data.root / "
                                f"--data-root / $CONTRASUITE_DATA; see ../shared/data/README.md)")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        with tarfile.open(archive) as tar:
            tar.extractall(tmp, filter="data")
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


def emoji_style_dirs(emoji_root: Path, cache: Path, styles: Iterable[str]) -> dict[str, Path]:
    """The extracted 64-px PNG folder of each style: ``<cache>/emoji/<style>-64``."""
    return {s: extract_once(emoji_root / f"emoji-{s}-64.tar.gz", cache / "emoji" / f"{s}-64") for s in styles}
