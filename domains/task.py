"""The Task protocol: what a domain provides so that the one engine in ``contrasuite.pipelines`` runs it.

Domains implement this protocol without importing ``pipelines``. The engine owns the device,
precision, distributed setup, checkpoints, logging and the loop; the task owns its models, data,
loss terms and evaluation.

A training step may step several optimizers in a fixed order (CUT: discriminator, then generator
and head) by calling ``step.optimize(name, loss)`` once per optimizer; a full-batch task (graphs)
yields a single batch per epoch.
"""

from __future__ import annotations

import hashlib
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Protocol, Sequence, runtime_checkable

import torch
from torch import Tensor, nn


AUTOCAST_DTYPES: dict[str, torch.dtype | None] = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": None}
"""``run.precision`` -> the autocast dtype (``None``: autocast off)."""


def autocast_for(precision: str, device: torch.device) -> AbstractContextManager:
    """The autocast context of ``precision`` (``bf16``, ``fp16``, ``fp32``) on ``device`` (disabled for fp32)."""
    dtype = AUTOCAST_DTYPES[precision]
    return torch.autocast(device_type=device.type, dtype=dtype, enabled=dtype is not None)


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
    """Wraps a trainable module for distributed training (DistributedDataParallel on several ranks)."""
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


@dataclass
class ObjectiveConfig:
    """``config.objective``: the loss terms, each ``{name: <registered objective>, weight: w, <parameter>: value}``
    (:class:`contrasuite.core.objectives.ObjectiveSum`). A domain with more to say about its objective
    (image_ssl's views, graph's anchor) extends this class by those fields and its own default terms."""

    terms: list[Any] = field(default_factory=list)


def objective_field(*terms: dict[str, Any]) -> Any:
    """A domain config's ``objective`` field: an :class:`ObjectiveConfig` whose default terms are ``terms``."""
    return field(default_factory=lambda: ObjectiveConfig(terms=[dict(t) for t in terms]))


class TaskHooks(Protocol):
    """Optional methods of a :class:`Task`; the engine calls each one only where the task defines it
    (:func:`hook`).

    - ``state_dict() -> dict`` / ``load_state_dict(state)``: task state beyond modules and optimizers
      (a step counter), kept in the checkpoint.
    - ``embed_for_health(batch) -> (anchors, positives)``: embeddings of a batch for the health metrics
      and the similarity histogram.
    - ``similarity_samples() -> (positive, negative)``: similarity values for the histogram when the
      batch embeddings do not give them.
    A class attribute ``smoke = SmokeSettings(...)`` tells ``contrasuite smoke`` how to shrink a config.
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


@dataclass(frozen=True)
class SmokeSettings:
    """How ``contrasuite smoke`` shrinks a full-scale config to two CPU steps: the data, never the model.

    A task class declares ``smoke = SmokeSettings(...)`` (optional; without it the config runs with
    only ``run.max_steps=2``). The smoke run takes ``batch`` samples per step under ``batch_key`` (None:
    a full-batch task), applies ``overrides`` (subsets, a tiny evaluation, GradCache off so every sample's
    activations are alive at once), and scales the measured activation memory per sample to
    ``live_batch(full_config)``: the samples whose activations one backward of the full config holds
    (the global batch, or a GradCache chunk of it).
    """

    batch_key: str | None
    batch: int = 4
    overrides: tuple[str, ...] = ()
    live_batch: Callable[[Any], int] | None = None
    """Full config -> samples alive in one backward (None: the value at ``batch_key``)."""
    holds_a_batch: tuple[str, ...] = ()
    """Keys of ``overrides`` that size a training subset: raised to twice the batch when a run keeps the config's
    own larger batch (``smoke --as-shipped``), so the subset holds a batch (a class-balanced one rounds down)."""



def batch_shard(size: int, rank: int, world_size: int) -> slice:
    """Rank ``rank``'s contiguous part of a global batch of ``size`` items.

    ``batch_size`` is the global batch in every domain: each rank takes ``size // world_size`` items
    (a remainder is dropped), so every rank holds as many as the others and the ranks' parts, in rank
    order, are the one-process batch. No rank waits alone in a collective."""
    k = size // world_size
    return slice(rank * k, (rank + 1) * k)


def rank_part(size: int, rank: int, world_size: int) -> slice:
    """Rank ``rank``'s contiguous part of ``size`` items when every item must be used: parts differ by
    at most one item and, in rank order, cover all ``size`` (for work split over ranks and then gathered,
    where :func:`batch_shard`'s equal parts would drop a remainder)."""
    k, extra = divmod(size, world_size)
    start = rank * k + min(rank, extra)
    return slice(start, start + k + (rank < extra))


def derived_seed(seed: int, *keys: int | str) -> int:
    """A 63-bit seed from ``(seed, *keys)`` (an epoch, a batch, a step, a purpose): independent of any RNG
    state, so resume is exact, and the same on every rank."""
    digest = hashlib.sha256(",".join(str(k) for k in (seed, *keys)).encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def seeded_generator(seed: int, *keys: int | str) -> torch.Generator:
    """A CPU generator seeded by :func:`derived_seed` ``(seed, *keys)``."""
    return torch.Generator().manual_seed(derived_seed(seed, *keys))


def average_gradients_over_ranks(module: nn.Module) -> None:
    """Average the gradients of ``module``'s parameters over ranks during backward, as DDP does for a
    wrapped model, so every rank keeps the same values. For modules DDP cannot wrap: learned temperatures,
    or networks called several times (or through methods other than ``forward``) before one backward.
    The hooks fire in autograd's order, the same on every rank."""
    import torch.distributed as dist

    def hook(grad: Tensor) -> Tensor:
        grad = grad.clone()
        dist.all_reduce(grad)
        return grad / dist.get_world_size()

    for p in module.parameters():
        if p.requires_grad:
            p.register_hook(hook)
