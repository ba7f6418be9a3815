"""Values computed once and cached on disk across runs (image_text's trunk features and generated negatives,
metric_learning's frozen-stem outputs).

A cache file is written atomically (a temporary file renamed over it) and read with ``weights_only=True``.
One that cannot be read (truncated by a killed run, damaged) is rebuilt with one line on stderr saying
so, instead of failing every later run until someone deletes it. Under several processes rank 0
computes a missing file while the others wait and read it (:func:`shared_load_or_compute`).
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import sys
from pathlib import Path
from typing import Any, Callable, TypeVar

import torch

T = TypeVar("T")


def key_digest(*parts: Any) -> str:
    """A 16-hex-digit digest of JSON-able ``parts`` (a top-level ``bytes`` part is hashed first; pass nested
    bytes through ``key_digest`` too, not as JSON)."""
    parts = [hashlib.sha256(p).hexdigest() if isinstance(p, (bytes, memoryview)) else p for p in parts]
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def read_cached(path: Path) -> tuple[Any, str]:
    """``(value, "")`` from a cache file; ``(None, "")`` when there is none; ``(None, why)`` when it is unreadable."""
    if not path.is_file():
        return None, ""
    try:
        return torch.load(path, map_location="cpu", weights_only=True), ""
    except (RuntimeError, EOFError, OSError, ValueError, pickle.UnpicklingError) as err:
        return None, " ".join(str(err).split())[:120] or type(err).__name__


def write_atomic(path: Path, value: Any) -> None:
    """``torch.save`` ``value`` at ``path`` through a temporary file renamed over it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        torch.save(value, tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def load_or_compute(path: Path, compute: Callable[[], Any], *, fits: Callable[[Any], bool] = lambda value: True,
                    what: str = "the cache") -> Any:
    """The value cached at ``path`` when it ``fits``, else ``compute()``'s, written there; a damaged file is
    rebuilt with one line naming it (``what``: what the file is, for that line)."""
    cached, damage = read_cached(path)
    if cached is not None and fits(cached):
        return cached
    value = compute()
    write_atomic(path, value)
    if damage:
        print(f"{what} {path} was truncated or damaged ({damage}); rebuilt it", file=sys.stderr)
    return value


def rank_zero_first(fn: Callable[[], T], rank: int = 0) -> T:
    """``fn()`` on rank 0 while the other ranks of an initialised process group wait, then on them: ``fn`` that
    finds what rank 0 wrote on disk reads it (and makes it itself where it cannot see it: a node-local folder)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
        return fn()
    value = fn() if rank == 0 else None
    dist.barrier()
    return value if rank == 0 else fn()


def shared_load_or_compute(path: Path, compute: Callable[[], Any], rank: int = 0, **how: Any) -> Any:
    """:func:`load_or_compute` on rank 0 first (:func:`rank_zero_first`): the other ranks read its file."""
    return rank_zero_first(lambda: load_or_compute(path, compute, **how), rank)
