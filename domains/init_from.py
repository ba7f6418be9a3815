"""``config.init_from``: start a run from the weights of another run (fine-tuning a pretrained model).

The path is a run folder (its ``checkpoints/best.pt`` (else ``last.pt``), or ``last.pt`` when the
task asks for it) or a checkpoint file. Only
the named modules' weights are read, with ``torch.load(weights_only=True)``; optimizer state, step
counters and RNG states stay those of the new run. Errors name the config key and the file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

import torch
from torch import nn

from contrasuite.core.task.errors import DataError


def checkpoint_file(path: Path, which: str = "best") -> Path:
    """A run folder's ``<which>.pt`` (``best`` falls back to ``last``), or ``path`` itself when it is a file."""
    if path.is_dir():
        chosen = path / "checkpoints" / f"{which}.pt"
        return chosen if chosen.is_file() else path / "checkpoints" / "last.pt"
    return path


def load_weights(path: str | Path, modules: Mapping[str, nn.Module], key: str = "config.init_from",
                 which: str = "best") -> Path:
    """Load ``modules`` (checkpoint name -> module) from ``path``; returns the checkpoint file read."""
    file = checkpoint_file(Path(path), which)
    if not file.is_file():
        raise DataError(f"{key}: no checkpoint at {file}")
    try:
        state = torch.load(file, map_location="cpu", weights_only=True)
    except Exception as err:  # unreadable or not a weights-only torch file
        raise DataError(f"{key}: cannot read {file}: {err}") from err
    stored = state.get("modules", state) if isinstance(state, dict) else {}
    for name, module in modules.items():
        if name not in stored:
            raise DataError(f"{key}: {file} has no module {name!r} (it has {sorted(stored)})")
        target = getattr(module, "module", module)  # a DDP-wrapped module loads into its inner one
        try:
            target.load_state_dict(stored[name])
        except RuntimeError as err:
            raise DataError(f"{key}: {file} module {name!r} does not fit this model: {' '.join(str(err).split())[:300]}") from err
    return file
