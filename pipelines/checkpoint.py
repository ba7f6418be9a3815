"""Checkpoints: every state a run needs to continue exactly, written atomically, loaded safely.

A checkpoint holds the task's modules, optimizers, schedulers, the GradScaler, an optional task
state (``Task.state_dict``), every RNG state (python, numpy, torch CPU, CUDA), the data position
(epoch, step within it, global step), the best validation value so far and the resolved config.
RNG states are stored as tensors and plain types so ``torch.load(weights_only=True)`` reads them.
"""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch


class CheckpointError(RuntimeError):
    """A missing, unreadable or mismatched checkpoint; the message names the file."""


def rng_state() -> dict[str, Any]:
    """Every RNG state as tensors and plain python values."""
    version, internal, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    return {
        "python": {"version": version, "state": torch.tensor(internal, dtype=torch.int64), "gauss": gauss},
        "numpy": {"kind": kind, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                  "has_gauss": int(has_gauss), "cached": float(cached)},
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`rng_state` returned."""
    py = state["python"]
    random.setstate((py["version"], tuple(int(v) for v in py["state"].tolist()), py["gauss"]))
    npy = state["numpy"]
    np.random.set_state((npy["kind"], npy["keys"].numpy().astype(np.uint32), npy["pos"], npy["has_gauss"], npy["cached"]))
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def atomic_save(obj: Any, path: Path) -> None:
    """``torch.save`` to a temporary file in the same folder, fsync, then rename over ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with open(tmp, "wb") as handle:
            torch.save(obj, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def load(path: Path) -> dict[str, Any]:
    """Read a checkpoint with ``weights_only=True`` onto the CPU; errors name the file."""
    if not path.is_file():
        raise CheckpointError(f"checkpoint not found: {path}")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - any unpickling failure means an unusable file
        raise CheckpointError(f"checkpoint {path} is unreadable or not a contrasuite checkpoint: {err}") from None


def _load_named(kind: str, targets: dict[str, Any], states: dict[str, Any], path: Path) -> None:
    if set(targets) != set(states):
        raise CheckpointError(f"{path}: {kind} {sorted(states)} in the checkpoint, the task has {sorted(targets)}")
    for name, target in targets.items():
        try:
            target.load_state_dict(states[name])
        except (RuntimeError, ValueError, KeyError) as err:
            raise CheckpointError(f"{path}: {kind} {name!r}: {err}") from None


def restore(state: dict[str, Any], path: Path, *, modules: dict, optimizers: dict, schedulers: dict,
            scaler: Any, task: Any) -> None:
    """Load every stateful part from a checkpoint dict (RNG and position are the caller's)."""
    _load_named("modules", modules, state["modules"], path)
    _load_named("optimizers", optimizers, state["optimizers"], path)
    _load_named("schedulers", schedulers, state["schedulers"], path)
    if scaler is not None and state.get("scaler"):
        scaler.load_state_dict(state["scaler"])
    if state.get("task") is not None and hasattr(task, "load_state_dict"):
        task.load_state_dict(state["task"])


def restore_modules(state: dict[str, Any], path: Path, *, modules: dict, task: Any) -> None:
    """Load only the modules and task state (for evaluation)."""
    _load_named("modules", modules, state["modules"], path)
    if state.get("task") is not None and hasattr(task, "load_state_dict"):
        task.load_state_dict(state["task"])
