"""A task outside the trainer, in this process on one rank: what a benchmark or a report's evaluation needs.

:func:`setup_task` sets a task up as the trainer would on one process (no run folder, no distributed
group); :class:`StepRunner` runs its training steps as the trainer does (the engine's ``Step`` with its
loss scaler and autocast), so a benchmark times exactly what training runs.
"""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import torch
from torch import nn

from contrasuite.core.task.precision import autocast_for
from contrasuite.core.task.protocol import Task, TaskContext
from contrasuite.pipelines.memory_format import check_laid_out, laid_out, wants_channels_last
from contrasuite.pipelines.precision import make_scaler, resolve_precision
from contrasuite.pipelines.step import Step


def setup_task(task: Task, config: Any, *, device: torch.device, precision: str = "fp32", data_root: Path = Path("."),
               run_dir: Path = Path("."), seed: int = 0, progress: Callable[..., Iterable] | None = None,
               memory_format: str = "auto") -> Task:
    """``task.setup`` with a one-rank :class:`TaskContext` (``config``: the task's config section; ``precision``
    may be ``auto``, resolved for ``device`` as the trainer does; the modules the task wraps laid out by
    ``memory_format`` as the trainer does, :mod:`~contrasuite.pipelines.memory_format`); returns ``task``."""
    extra = {} if progress is None else {"progress": progress}
    concrete = resolve_precision(precision, device)[0]
    channels_last = wants_channels_last(memory_format, type(task), device)

    def lay_out(module: nn.Module) -> nn.Module:  # one rank: wrapping is laying out
        return laid_out(module, channels_last)

    task.setup(TaskContext(config=config, device=device, precision=concrete, run_dir=Path(run_dir),
                           data_root=Path(data_root), seed=seed, wrap=lay_out, lay_out=lay_out, **extra))
    check_laid_out(task, channels_last)
    return task


class StepRunner:
    """``task.train_step`` inside the engine's ``Step`` (optimizers, schedulers, loss scaler, autocast for
    ``precision``, ``auto`` resolved for ``device``; no gradient clipping; a non-finite loss stops), one call
    per step."""

    def __init__(self, task: Task, device: torch.device, precision: str) -> None:
        self.task, self.device, self.precision = task, device, resolve_precision(precision, device)[0]
        self.scaler = make_scaler(self.precision, device)

    def __call__(self, batch: Any, epoch: int, step: int) -> Mapping[str, float]:
        context = Step(epoch=epoch, step=step, optimizers=self.task.optimizers(), schedulers=self.task.schedulers(),
                       autocast=lambda: autocast_for(self.precision, self.device), scaler=self.scaler, grad_clip=None,
                       non_finite="stop", no_sync=nullcontext)
        out = self.task.train_step(batch, context)
        context.finish()
        return out
