"""A run's checkpoint in the network a command rebuilt: what does not fit becomes one line naming the file.

The domain commands (``upscale``, ``retrieve``, ``translate``, ``code-search``) rebuild a network from a
run's ``config.yaml`` and load the run's checkpoint into it. A run of another task, or a checkpoint of
another network (another domain's, the same network at another width) would otherwise end in a
``load_state_dict`` traceback listing every key. Here: :func:`require_task` refuses the run,
:func:`fitting` turns the mismatch into a :class:`DataError` with counts and a few keys, and
:func:`read_modules` reads a checkpoint's modules with ``weights_only=True`` (a pickle that would run
code is refused, never run).
"""

from __future__ import annotations

import pickle
import re
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Mapping

import torch

from contrasuite.core.task.errors import DataError

SHOWN = 3
"""Keys named per kind of mismatch."""
LIMIT = 600
"""Characters of a message at most (the rest becomes ``...``)."""

_TORCH_ERROR = "Error(s) in loading state_dict"
_SHAPE = re.compile(r"size mismatch for (.+?): copying a param with shape torch\.Size\((\[.*?\])\) from checkpoint, "
                    r"the shape in current model is torch\.Size\((\[.*?\])\)")


def capped(message: str, limit: int = LIMIT) -> str:
    """``message`` on one line, cut to ``limit`` characters."""
    line = " ".join(message.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def require_task(run_dir: Path, task: str, wanted: str, command: str) -> None:
    """Refuse a run of another task than ``wanted``, naming both and the command."""
    if task != wanted:
        raise DataError(f"{run_dir} is a run of task {task!r}; {command} needs a {wanted!r} run")


def _counted(keys: list[str], one: str, many: str) -> str:
    """``"5 missing keys: a, b, c, ..."``."""
    named = ", ".join(keys[:SHOWN]) + (", ..." if len(keys) > SHOWN else "")
    return f"{len(keys)} {one if len(keys) == 1 else many}: {named}"


def misfit(message: str) -> str:
    """torch's ``load_state_dict`` error as counts and a few keys of each kind: missing, unexpected, another shape."""
    missing, unexpected, shapes, other = [], [], [], []
    for part in message.split("\n\t")[1:]:
        if part.startswith("Missing key(s)"):
            missing += re.findall(r'"([^"]*)"', part)
        elif part.startswith("Unexpected key(s)"):
            unexpected += re.findall(r'"([^"]*)"', part)
        elif match := _SHAPE.match(part):
            shapes.append(f"{match[1]} {match[2].replace(' ', '')} -> {match[3].replace(' ', '')}")
        else:
            other.append(part.strip())
    shape = "of another shape (checkpoint -> network)"
    kinds = [(missing, "missing key", "missing keys"), (unexpected, "unexpected key", "unexpected keys"),
             (shapes, f"key {shape}", f"keys {shape}"), (other, "other error", "other errors")]
    summary = "; ".join(_counted(keys, one, many) for keys, one, many in kinds if keys)
    return summary or " ".join(message.split())


@contextmanager
def fitting(file: Path, modules: Mapping[str, Any], *needed: str) -> Iterator[None]:
    """Around code that loads the checkpoint ``file``'s ``modules`` into a rebuilt network: a ``needed`` module
    it lacks, or weights that do not fit (``load_state_dict``'s error), raise one capped :class:`DataError`."""
    absent = [name for name in needed if name not in modules]
    if absent:
        raise DataError(capped(f"checkpoint {file} does not fit the network: it has no module {absent[0]!r} "
                               f"(it has {sorted(modules)})"))
    try:
        yield
    except RuntimeError as err:
        if not str(err).startswith(_TORCH_ERROR):
            raise
        raise DataError(capped(f"checkpoint {file} does not fit the network: {misfit(str(err))}")) from None


def load_failure(err: Exception) -> str:
    """Why a ``torch.load(weights_only=True)`` failed, after "checkpoint FILE is " (torch's own message
    suggests loading the file unsafely, and runs to many lines)."""
    if isinstance(err, pickle.UnpicklingError):
        found = re.search(r"Unsupported global: GLOBAL (\S+)", str(err))
        stop = re.search(r"(Unsupported operand \d+)", str(err))
        what = (f"loading it would call {found[1]}" if found else
                f"it holds something other than tensors and plain values ({stop[1] if stop else 'not a torch file'})")
        return f"not a weights-only checkpoint: {what}; refused unread (unpickling it could run code)"
    first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return f"unreadable: {first}"


def load_weights_only(file: Path, error: type[Exception] = DataError) -> Any:
    """``torch.load(file, weights_only=True)`` onto the CPU; any failure is one capped ``error`` naming the file."""
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Detected pickle protocol")  # a foreign pickle: refused below
            return torch.load(file, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - truncated, not a torch file, not weights-only: an unusable file
        raise error(capped(f"checkpoint {file} is {load_failure(err)}")) from None


def read_modules(file: Path) -> Mapping[str, Any]:
    """A checkpoint file's ``modules``, read with ``weights_only=True``; errors name the file."""
    if not file.is_file():
        raise FileNotFoundError(f"checkpoint not found: {file}")
    state = load_weights_only(file)
    if not isinstance(state, dict) or not isinstance(state.get("modules"), dict):
        raise DataError(f"{file} is a torch file but not a contrasuite checkpoint (no 'modules' entry)")
    return state["modules"]
