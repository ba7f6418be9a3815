"""Checkpoints: every state a run needs to continue exactly, written atomically, loaded safely.

A checkpoint holds the task's modules, optimizers, schedulers, the GradScaler, an optional task
state (``Task.state_dict``), every RNG state (python, numpy, torch CPU, CUDA), the data position
(epoch, step within it, global step), the best validation value so far and the resolved config.
RNG states are stored as tensors and plain types so ``torch.load(weights_only=True)`` reads them.

Beside each ``NAME.pt`` a manifest ``NAME.pt.json`` records the size and SHA-256 of the complete
file; :func:`load` refuses a file that matches neither (truncated, partly copied, altered). While a
new file replaces an old one the manifest lists both, so a kill at any moment leaves a loadable pair.
A checkpoint without a manifest (written before manifests existed) is loaded unchecked.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import torch
from torch.utils.serialization import config as serialization_config

from contrasuite.core.task.protocol import hook
from contrasuite.domains.archives import sha256_of
from contrasuite.domains.checkpoint_fit import capped, load_weights_only, misfit


REQUIRED_KEYS = ("modules", "optimizers", "schedulers", "position", "config")
"""What every engine checkpoint holds; a torch file without them is not a contrasuite checkpoint."""


class CheckpointError(RuntimeError):
    """A missing, unreadable or mismatched checkpoint; the message names the file."""


class _HashingWriter:
    """A write-only file wrapper that counts and hashes what passes through it."""

    def __init__(self, handle: BinaryIO) -> None:
        self.handle, self.sha, self.size = handle, hashlib.sha256(), 0

    def write(self, data: bytes) -> int:
        self.sha.update(data)
        self.size += len(data)
        return self.handle.write(data)

    def flush(self) -> None:
        self.handle.flush()


def manifest_path(path: Path) -> Path:
    return path.with_name(path.name + ".json")


def file_digest(path: Path) -> dict[str, Any]:
    """``{"bytes": size, "sha256": hex}`` of a file."""
    return {"bytes": path.stat().st_size, "sha256": sha256_of(path)}


def _accepted(path: Path) -> list[dict[str, Any]] | None:
    try:
        return json.loads(manifest_path(path).read_text())["accepted"]
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise CheckpointError(f"checkpoint manifest {manifest_path(path)} is unreadable ({err})") from None


def _write_manifest(path: Path, accepted: list[dict[str, Any]]) -> None:
    target = manifest_path(path)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"accepted": accepted}, indent=1) + "\n")
    os.replace(tmp, target)


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
    """``torch.save`` to a temporary file in the same folder, fsync, then rename over ``path``.

    The manifest first lists the new file beside the old one, then (after the rename) the new one only. The
    manifest's SHA-256 covers the whole file, so the zip records' own CRC-32s are left out
    (``save.compute_crc32``; ``torch.load`` reads the file without them): in two one-off timings of this save of
    44 MB (not a bench), 61 -> 43 and 52 -> 40 ms of CPU.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        try:
            with open(tmp, "wb") as handle:
                writer = _HashingWriter(handle)
                with serialization_config.patch({"save.compute_crc32": False}):
                    torch.save(obj, writer)
                handle.flush()
                os.fsync(handle.fileno())
        except (OSError, RuntimeError) as err:
            failure = _write_failure(path, err)
            if failure is err:
                raise
            raise failure from err
        new = {"bytes": writer.size, "sha256": writer.sha.hexdigest()}
        _write_manifest(path, [new, *(_accepted(path) or [])[:1]])
        os.replace(tmp, path)
        _write_manifest(path, [new])
    finally:
        tmp.unlink(missing_ok=True)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_failure(path: Path, err: BaseException) -> BaseException:
    """A failed checkpoint write as one line naming the file and the disk's cause (a full disk, a read-only
    folder); torch reports a failed write as ``[enforce fail at inline_container.cc] ... file write failed``,
    with the OSError behind it. Anything else (a pickling bug) is returned unchanged."""
    cause = next((e for e in (err, err.__cause__, err.__context__) if isinstance(e, OSError)), None)
    if cause is None and "write failed" not in str(err) and "failed writing" not in str(err):
        return err
    free = shutil.disk_usage(path.parent).free / 2**20
    reason = os.strerror(cause.errno) if cause is not None and cause.errno else "the write failed"
    return CheckpointError(f"{path}: could not write the checkpoint ({reason}; {free:.0f} MiB free in {path.parent}); "
                           f"the previous {path.name}, if any, is unchanged")


def load(path: Path) -> dict[str, Any]:
    """Read a checkpoint with ``weights_only=True`` onto the CPU after checking it against its manifest.

    Errors name the file: missing, incomplete or altered, unreadable, or a torch file that is not an
    engine checkpoint.
    """
    if not path.is_file():
        raise CheckpointError(f"checkpoint not found: {path}")
    accepted = _accepted(path)
    if accepted is not None:
        digest = file_digest(path)
        if digest not in accepted:
            expected = accepted[0].get("bytes") if accepted else "?"
            raise CheckpointError(f"checkpoint {path} is incomplete or altered: {digest['bytes']} bytes, SHA-256 "
                                  f"{digest['sha256'][:12]}..., its manifest {manifest_path(path).name} records "
                                  f"{expected} bytes and another hash")
    state = load_weights_only(path, CheckpointError)
    missing = [k for k in REQUIRED_KEYS if not isinstance(state, dict) or k not in state]
    if missing:
        raise CheckpointError(f"{path} is a torch file but not a contrasuite checkpoint (no {missing[0]!r} entry)")
    return state


def _load_named(kind: str, targets: dict[str, Any], states: dict[str, Any], path: Path) -> None:
    if set(targets) != set(states):
        raise CheckpointError(f"{path}: {kind} {sorted(states)} in the checkpoint, the task has {sorted(targets)}")
    for name, target in targets.items():
        try:
            target.load_state_dict(states[name])
        except (RuntimeError, ValueError, KeyError) as err:
            raise CheckpointError(capped(f"{path}: {kind} {name!r} does not fit: {misfit(str(err))}")) from None


def restore(state: dict[str, Any], path: Path, *, modules: dict, optimizers: dict, schedulers: dict,
            scaler: Any, task: Any) -> None:
    """Load every stateful part from a checkpoint dict (RNG and position are the caller's)."""
    _load_named("modules", modules, state["modules"], path)
    _load_named("optimizers", optimizers, state["optimizers"], path)
    _load_named("schedulers", schedulers, state["schedulers"], path)
    if scaler is not None and state.get("scaler"):
        scaler.load_state_dict(state["scaler"])
    if state.get("task") is not None and hook(task, "load_state_dict") is not None:
        task.load_state_dict(state["task"])


def restore_modules(state: dict[str, Any], path: Path, *, modules: dict, task: Any) -> None:
    """Load only the modules and task state (for evaluation)."""
    _load_named("modules", modules, state["modules"], path)
    if state.get("task") is not None and hook(task, "load_state_dict") is not None:
        task.load_state_dict(state["task"])
