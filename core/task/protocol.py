"""The Task protocol: what a domain provides so that the one engine in ``contrasuite.pipelines`` runs it.

Domains implement this protocol without importing ``pipelines``. The engine owns the device,
precision, distributed setup, checkpoints, logging and the loop; the task owns its models, data,
loss terms and evaluation.

A training step may step several optimizers in a fixed order (CUT: discriminator, then generator
and head) by calling ``step.optimize(name, loss)`` once per optimizer; a full-batch task (graphs)
yields a single batch per epoch.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Protocol, Sequence, runtime_checkable

import torch
from torch import Tensor, nn

from contrasuite.core.task.precision import autocast_for


Progress = Callable[..., Iterable]
"""``progress(iterable, desc, total=None)``: the iterable, shown as a progress bar or not (``TaskContext.progress``)."""


def no_progress(iterable: Iterable, desc: str = "", total: int | None = None) -> Iterable:
    """A :data:`Progress` that shows nothing: the iterable itself."""
    return iterable


@contextmanager
def shown(progress: Progress, desc: str) -> Iterator[None]:
    """A one-item bar named ``desc`` while the block runs (a setup phase that has no items to count)."""
    for _ in progress([None], desc, total=1):
        yield


@dataclass
class TaskContext:
    """What the engine hands to a task when it is built."""

    config: Any
    """The task's resolved config section (a typed dataclass or an OmegaConf node)."""
    device: torch.device
    precision: str
    """``"bf16"``, ``"fp16"`` or ``"fp32"``."""
    run_dir: Path
    data_root: Path
    seed: int
    rank: int = 0
    world_size: int = 1
    gather: Callable[[Tensor], Tensor] = field(default=lambda t: t)
    """All-gather along dim 0 with gradient flowing back to the local slice (identity on one rank)."""
    wrap: Callable[[nn.Module], nn.Module] = field(default=lambda m: m)
    """Wraps a trainable module for distributed training (DistributedDataParallel on several ranks), its 4-D
    weights first laid out as ``run.memory_format`` says (``lay_out``)."""
    lay_out: Callable[[nn.Module], nn.Module] = field(default=lambda m: m)
    """Lays a module's 4-D weights out as ``run.memory_format`` says, in place, and returns it: for the modules of
    a task that averages gradients itself instead of calling ``wrap`` (translation, image_text)."""
    progress: Progress = field(default=no_progress)
    """Shows a loop of evaluation: ``ctx.progress(chunks, "embedding test images", total=n)`` is a tqdm
    bar on rank 0 when ``run.progress`` is on, the iterable itself otherwise."""

    def autocast(self) -> AbstractContextManager:
        """The autocast context for this run's precision (disabled for fp32)."""
        return autocast_for(self.precision, self.device)


@runtime_checkable
class StepContext(Protocol):
    """What the engine hands to ``Task.train_step`` for one step."""

    epoch: int
    step: int
    """Global optimisation step, counted from 0 across epochs."""

    def autocast(self) -> AbstractContextManager: ...

    def optimize(self, name: str, loss: Tensor, terms: Mapping[str, Tensor] | None = None) -> None:
        """Backward ``loss`` (scaled under fp16), check it is finite, clip, step optimizer ``name``, zero its grads.

        ``terms`` (the loss's named parts) lets a non-finite message name the culprit."""
        ...

    def optimize_cached(self, name: str, embed: Callable[[Any], Any], chunks: Sequence[Any],
                        loss_fn: Callable[..., Tensor], terms: Mapping[str, Tensor] | None = None) -> Tensor:
        """The same step with GradCache: embed ``chunks`` without graph, loss on all, backward chunk by chunk."""
        ...


@runtime_checkable
class Task(Protocol):
    """A domain's trainable unit. Implementations are plain classes registered by name."""

    def setup(self, ctx: TaskContext) -> None:
        """Build models, data and optimizers from ``ctx.config``."""
        ...

    def modules(self) -> Mapping[str, nn.Module]:
        """Every module whose state is checkpointed."""
        ...

    def optimizers(self) -> Mapping[str, torch.optim.Optimizer]:
        """Optimizers by name, in the order a step uses them."""
        ...

    def schedulers(self) -> Mapping[str, Any]:
        """Learning-rate schedulers by name (stepped once per optimisation step by the task's optimize calls)."""
        ...

    def batches(self, epoch: int) -> Iterable[Any]:
        """This rank's batches for ``epoch``; shuffling seeded by ``(seed, epoch)`` so resume is exact."""
        ...

    def train_step(self, batch: Any, step: StepContext) -> Mapping[str, float]:
        """Run one step (calling ``step.optimize`` for each optimizer); return scalars to log."""
        ...

    def evaluate(self, split: str = "val") -> Mapping[str, float]:
        """Evaluate on ``split`` (``"val"`` for checkpoint selection, ``"test"`` for reporting)."""
        ...


class TaskHooks(Protocol):
    """Optional methods of a :class:`Task`; the engine calls each one only where the task defines it
    (:func:`hook`).

    - ``state_dict() -> dict`` / ``load_state_dict(state)``: task state beyond modules and optimizers
      (a step counter), kept in the checkpoint.
    - ``embed_for_health(batch) -> (anchors, positives)``: embeddings of a batch for the health metrics
      and the similarity histogram.
    - ``similarity_samples() -> (positive, negative)``: similarity values for the histogram when the
      batch embeddings do not give them.
    A class attribute ``smoke = SmokeSettings(...)`` tells ``contrasuite smoke`` how to shrink a config;
    ``channels_last_on_cpu = True`` asks ``run.memory_format: auto`` to lay the modules the task wraps out
    channels-last on the CPU, where its convolutions were measured faster so.
    """

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...

    def embed_for_health(self, batch: Any) -> tuple[Tensor, Tensor] | None: ...

    def similarity_samples(self) -> tuple[Tensor, Tensor] | None: ...


TASK_HOOKS = frozenset(name for name in vars(TaskHooks) if not name.startswith("_"))


def hook(task: Any, name: str) -> Callable[..., Any] | None:
    """The task's optional ``name`` method (one of :class:`TaskHooks`), or None where it has none."""
    if name not in TASK_HOOKS:
        raise AttributeError(f"{name!r} is not a Task hook; known: {sorted(TASK_HOOKS)}")
    return getattr(task, name, None)


BATCH_KEY = "config.batch_size"
"""Where every task that trains on batches keeps its global batch (a full-batch task has none)."""


@dataclass(frozen=True)
class SmokeSettings:
    """How ``contrasuite smoke`` shrinks a full-scale config to two CPU steps: the data, never the model.

    A task class declares ``smoke = SmokeSettings(...)`` (optional; without it the config runs with
    only ``run.max_steps=2``). The smoke run sets :data:`BATCH_KEY` to ``batch`` samples per step (not
    for a ``full_batch`` task), applies ``overrides`` (subsets, a tiny evaluation, GradCache off so every
    sample's activations are alive at once), and scales the measured activation memory per sample to
    ``live_batch(full_config)``: the samples whose activations one backward of the full config holds
    (the global batch, or a GradCache chunk of it).
    """

    batch: int = 4
    overrides: tuple[str, ...] = ()
    live_batch: Callable[[Any], int] | None = None
    """Full config -> samples alive in one backward (None: ``config.batch_size``)."""
    holds_a_batch: tuple[str, ...] = ()
    """Keys of ``overrides`` that size a training subset: raised to twice the batch when a run keeps the config's
    own larger batch (``smoke --as-shipped``), so the subset holds a batch (a class-balanced one rounds down)."""
    full_batch: bool = False
    """The task trains on all its data at every step (graphs): it has no ``config.batch_size`` to shrink."""
