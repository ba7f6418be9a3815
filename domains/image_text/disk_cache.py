"""Results cached on disk across runs: atomically written, read with ``weights_only=True``, computed once
per cache key on rank 0 while the other ranks of a process group wait and read them."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Callable

import torch

from contrasuite.domains.archives import cache_root as shared_cache_root


def cache_root(cache_dir: str | None) -> Path:
    """``image_text`` below the shared cache root (:func:`contrasuite.domains.archives.cache_root`: ``config.cache_dir``,
    else ``$CONTRASUITE_CACHE``, else ``~/.cache/contrasuite``)."""
    return shared_cache_root(cache_dir or "") / "image_text"


def key_digest(*parts: Any) -> str:
    """A 16-hex-digit digest of JSON-able ``parts`` (a top-level ``bytes`` part is hashed first; pass nested
    bytes through ``key_digest`` too, not as JSON)."""
    parts = [hashlib.sha256(p).hexdigest() if isinstance(p, (bytes, memoryview)) else p for p in parts]
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def load_or_compute(file: Path, compute: Callable[[], Any]) -> Any:
    """The value cached at ``file``, else ``compute()`` written there atomically (temporary file, rename)."""
    if file.is_file():
        return torch.load(file, map_location="cpu", weights_only=True)
    value = compute()
    file.parent.mkdir(parents=True, exist_ok=True)
    tmp = file.with_suffix(f".tmp{os.getpid()}")
    torch.save(value, tmp)
    tmp.replace(file)
    return value


def shared_load_or_compute(file: Path, compute: Callable[[], Any], rank: int = 0) -> Any:
    """:func:`load_or_compute` on rank 0 while the other ranks of an initialised process group wait, then
    read its file (each computes it itself where it cannot see the file: a cache folder local to a node)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
        return load_or_compute(file, compute)
    value = load_or_compute(file, compute) if rank == 0 else None
    dist.barrier()
    return value if rank == 0 else load_or_compute(file, compute)
