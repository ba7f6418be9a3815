"""The frozen stem's outputs of a split, cached on disk and reused by every run (pretrained weights are fixed).

A cache file that cannot be read (truncated by a killed run, damaged) is rebuilt from the images, with
one line on stderr saying so, instead of failing every later run until someone deletes it.
"""

from __future__ import annotations

import os
import pickle
import sys
from pathlib import Path
from typing import Callable

import torch
from torch import Tensor


def read_stems(path: Path) -> tuple[Tensor | None, str]:
    """``(outputs, "")`` from a cache file; ``(None, "")`` when there is none; ``(None, why)`` when it is unreadable."""
    if not path.is_file():
        return None, ""
    try:
        cached = torch.load(path, map_location="cpu", weights_only=True)
    except (RuntimeError, EOFError, OSError, ValueError, pickle.UnpicklingError) as err:
        return None, " ".join(str(err).split())[:120] or type(err).__name__
    if not isinstance(cached, Tensor) or cached.ndim == 0:
        return None, f"it holds a {type(cached).__name__}, not stem outputs"
    return cached, ""


def write_stems(path: Path, outputs: Tensor) -> None:
    """Save ``outputs`` at ``path`` atomically (a temporary file renamed over it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        torch.save(outputs.cpu(), tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def cached_stems(path: Path, rows: int, compute: Callable[[], Tensor], device: torch.device | str) -> Tensor:
    """The ``rows`` stem outputs cached at ``path`` (on ``device``), else ``compute()``'s, saved there."""
    cached, damage = read_stems(path)
    if cached is not None and cached.shape[0] == rows:
        return cached.to(device)
    outputs = compute()
    write_stems(path, outputs)
    if damage:
        print(f"metric_learning: the stem cache {path} was truncated or damaged ({damage}); rebuilt it",
              file=sys.stderr)
    return outputs
