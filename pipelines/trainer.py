"""The one training loop: builds a task, runs epochs of steps, validates, checkpoints, resumes.

Order of a run: device and process group, seeds, ``task.setup(ctx)``, (restore a checkpoint),
then for each epoch ``task.batches(epoch)`` -> ``task.train_step(batch, step)`` per batch, logging
every ``run.log_every_steps``, health every ``run.health_every_steps``, ``last.pt`` every
``run.checkpoint_every_steps`` and at each epoch end, validation every ``run.eval_every_epochs``
(``best.pt`` by ``run.best_metric``; ``run.early_stop_patience`` validations in a row without a better one end
training) and once at the end. Evaluation and health run under a forked
RNG so they never change the training stream; that, the stored RNG states and the data position
make a resumed run equal an uninterrupted one.

Trust: one process per run folder (:mod:`run_lock`); a resume refuses a ``last.pt`` written under a
config that differs from the run's in anything that changes the result, unless the command names the
change (``contrasuite resume RUN key=value``); ``run.max_consecutive_skips`` bounds how long
``run.non_finite=skip`` may drop steps; every failure is written into ``status.json``. SIGTERM,
SIGUSR1 and SIGINT stop the run after the step in progress with ``last.pt`` saved and ``status.json``
``preempted`` (:mod:`preemption`).
"""

from __future__ import annotations

import contextlib
import copy
import random
import signal
import sys
import time
from collections.abc import Sized
from contextlib import AbstractContextManager, contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np
import torch
from torch import nn

from contrasuite.core.metrics.health import health, similarity_samples
from contrasuite.core.objectives.base import ContrastiveObjective
from contrasuite.core.task.errors import SetupError
from contrasuite.core.task.precision import autocast_for
from contrasuite.core.task.protocol import TaskContext, hook
from contrasuite.domains.init_from import checkpoint_file
from contrasuite.pipelines import checkpoint, distributed
from contrasuite.pipelines.config import ConfigError, LoadedConfig, flatten, load_config, parse_override, save_resolved
from contrasuite.pipelines.host_allocator import use_host_allocator
from contrasuite.pipelines.memory_format import check_laid_out, laid_out, wants_channels_last
from contrasuite.pipelines.metrics_log import MetricsLog
from contrasuite.pipelines.plots import similarity_histogram, training_curves
from contrasuite.pipelines.precision import (
    make_scaler, pick_device, resolve_precision, set_deterministic, slow_bf16_note,
)
from contrasuite.pipelines.preemption import Preempted, StopSignals
from contrasuite.pipelines.run_dir import environment, new_run_dir, read_json, unfinished_runs, write_json
from contrasuite.pipelines.run_lock import RunLock
from contrasuite.pipelines.step import NonFiniteStepError, Step

RESULT_NEUTRAL_KEYS = ("run.progress", "run.tensorboard", "run.log_every_steps", "run.health_every_steps",
                       "run.checkpoint_every_steps", "run.output_root", "run.data_root", "run.resume",
                       "run.eval_checkpoint", "run.max_consecutive_skips", "run.name")
"""Settings a resume may change silently: they affect logging, paths and bookkeeping, never the weights."""


def concrete_precision(loaded: LoadedConfig, device: torch.device) -> str | None:
    """Replace ``run.precision=auto`` in ``loaded`` (its settings and resolved dict) by what it means on
    ``device``, so the task, autocast, scaler, ``config.yaml`` and checkpoints see the concrete value, and
    return the line that says what it chose; an explicit precision is left as given (None)."""
    precision, line = resolve_precision(loaded.run.precision, device)
    if line is not None:
        loaded.run.precision = loaded.resolved["run"]["precision"] = precision
    return line


def seed_all(seed: int) -> None:
    """Seed python, numpy and torch (CPU and every GPU)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


@dataclass
class Position:
    """Where the data stream is: the epoch, batches done in it, optimisation steps done in total."""

    epoch: int = 0
    step_in_epoch: int = 0
    global_step: int = 0


def config_changes(saved: dict, current: dict, allowed: Sequence[str] = ()) -> list[str]:
    """Dotted keys whose values differ between two resolved configs, minus result-neutral and ``allowed`` ones.

    A key is allowed when it, or a dotted prefix of it, is listed."""
    old, new = flatten(saved), flatten(current)
    free = (*RESULT_NEUTRAL_KEYS, *allowed)
    return [k for k in sorted(set(old) | set(new))
            if old.get(k, "<absent>") != new.get(k, "<absent>")
            and not any(k == f or k.startswith(f + ".") for f in free)]


class Trainer:
    """Runs one task from one validated config in one run folder (locked for the trainer's lifetime)."""

    def __init__(self, loaded: LoadedConfig, run_dir: Path | None = None, lock: bool | RunLock = True,
                 read_only: bool = False) -> None:
        """``lock``: take the run folder's lock (True), use one the caller already holds, or none (False).

        ``read_only`` (evaluation): ``status.json`` and ``metrics.csv`` are never written. In a folder that
        already exists (``run_dir`` given: resume, eval) a failed task setup leaves ``status.json`` as it was."""
        self.loaded, self.run = loaded, loaded.run
        self._read_only = read_only
        self.dist = distributed.env_info()
        self.device = pick_device(self.run.device, self.dist.local_rank)
        if self.run.sync_batchnorm and self.dist.enabled and self.device.type == "cpu":
            raise SetupError("run.sync_batchnorm=true needs CUDA devices: PyTorch's SyncBatchNorm has no CPU kernel "
                             "(set run.sync_batchnorm=false to keep BatchNorm statistics per process)")
        distributed.init(self.dist, self.device, self.run.dist_timeout_minutes)
        set_deterministic(self.run.deterministic)
        # Said when training starts, so a run refused at setup prints its one error line and nothing else.
        chosen = concrete_precision(loaded, self.device)
        self._notes = [n for n in (chosen, slow_bf16_note(self.run.precision, self.device)) if n]
        given = run_dir is not None
        if run_dir is None:
            made = new_run_dir(self.run.output_root, loaded.domain, loaded.name) if self.dist.is_main else None
            run_dir = Path(distributed.broadcast_object(str(made) if made else None))
        self.run_dir = Path(run_dir)
        self._lock = lock if isinstance(lock, RunLock) else RunLock(self.run_dir) if lock and self.dist.is_main else None
        if lock is True and self._lock is not None:
            self._lock.acquire()
        allocator = use_host_allocator(self.run.host_allocator, self.device)
        if self.dist.is_main and not (self.run_dir / "config.yaml").exists():
            save_resolved(loaded.resolved, self.run_dir / "config.yaml")
            write_json({**environment(self.device, self.dist.world_size), "run_name": loaded.name,
                        "precision": self.run.precision,
                        "host_allocator": allocator},
                       self.run_dir / "environment.json")
        self._wrapped: list[nn.Module] = []
        self._channels_last = wants_channels_last(self.run.memory_format, loaded.task_class, self.device)
        self.position = Position()
        seed_all(self.run.seed)
        self.task = loaded.task_class()
        try:
            self.task.setup(TaskContext(
                config=loaded.config, device=self.device, precision=self.run.precision, run_dir=self.run_dir,
                data_root=Path(self.run.data_root), seed=self.run.seed, rank=self.dist.rank,
                world_size=self.dist.world_size, gather=distributed.gather_with_grad, wrap=self._wrap,
                lay_out=lambda m: laid_out(m, self._channels_last), progress=self._progress,
            ))
            check_laid_out(self.task, self._channels_last)
        except BaseException as err:
            if not given or not (self.run_dir / "status.json").exists():
                self._status("failed", error=f"task setup: {type(err).__name__}: {err}")
            self.close()
            raise
        if self.dist.enabled:
            seed_all(self.run.seed + self.dist.rank)
        self.scaler = make_scaler(self.run.precision, self.device)
        self.log = MetricsLog(self.run_dir, enabled=self.dist.is_main and not read_only, tensorboard=self.run.tensorboard)
        self.best: float | None = None
        self._evals_since_best = 0  # validations since ``best`` last improved (``run.early_stop_patience``)
        self._selection_key: str | None = None  # the validation key that selected ``best.pt`` last
        self._seconds_before = (0.0, 0.0)  # training (wall, CPU) seconds of the processes that made the restored checkpoint
        self._resumed = False
        self._fit_started: tuple[float, float] | None = None  # (time.time(), time.process_time()) when fit began
        self._epoch_rng: dict[str, Any] | None = None
        self._resume_rng: dict[str, Any] | None = None
        self._last_eval_step = -1
        self._saved_step = -1  # the step of the last ``last.pt`` this process wrote
        self._last_batch: Any = None
        self._consecutive_skips = 0
        self._signals = StopSignals()
        self._last_step: int | None = None  # the run's final step, always logged (a short run still has a curve)

    def close(self) -> None:
        """Give the run folder back (the lock); called when ``fit`` ends or a resume is refused."""
        if self._lock is not None:
            self._lock.release()

    # -- task plumbing ------------------------------------------------------------------------

    def _wrap(self, module: nn.Module) -> nn.Module:
        module = laid_out(module, self._channels_last)  # before DDP, which takes the parameters' layout
        if self.run.sync_batchnorm and self.dist.enabled:
            module = nn.SyncBatchNorm.convert_sync_batchnorm(module)
        wrapped = distributed.wrap_module(module, self.device)
        self._wrapped.append(wrapped)
        return wrapped

    def _progress(self, iterable: Any, desc: str = "", total: int | None = None) -> Any:
        """``TaskContext.progress``: a transient tqdm bar for a stage of evaluation (rank 0, ``run.progress``)."""
        from tqdm import tqdm

        return tqdm(iterable, desc=desc, total=total, leave=False, dynamic_ncols=True, file=sys.stderr,
                    disable=not (self.dist.is_main and self.run.progress))

    def _modules(self) -> dict[str, nn.Module]:
        return {k: distributed.unwrap(m) for k, m in self.task.modules().items()}

    def autocast(self) -> AbstractContextManager:
        return autocast_for(self.run.precision, self.device)

    @contextmanager
    def _side_computation(self) -> Iterator[None]:
        """Eval mode and saved RNG states: validation and health leave training state untouched."""
        flags = [(m, m.training) for mod in self.task.modules().values() for m in mod.modules()]
        rng = checkpoint.rng_state()
        for mod in self.task.modules().values():
            mod.eval()
        try:
            yield
        finally:
            for m, was_training in flags:
                m.train(was_training)
            checkpoint.set_rng_state(rng)

    # -- checkpoints --------------------------------------------------------------------------

    def _state(self, rank_rngs: list[tuple[dict[str, Any], dict[str, Any] | None]]) -> dict[str, Any]:
        state_dict = hook(self.task, "state_dict")
        task_state = state_dict() if state_dict is not None else None
        return {
            "modules": {k: m.state_dict() for k, m in self._modules().items()},
            "optimizers": {k: o.state_dict() for k, o in self.task.optimizers().items()},
            "schedulers": {k: s.state_dict() for k, s in self.task.schedulers().items()},
            "scaler": self.scaler.state_dict() if self.scaler is not None else None,
            "task": task_state,
            "rng": rank_rngs[0][0],
            "epoch_rng": rank_rngs[0][1],
            "rank_rngs": rank_rngs if len(rank_rngs) > 1 else None,
            "position": asdict(self.position),
            "best": self.best,
            "evals_since_best": self._evals_since_best,
            "last_eval_step": self._last_eval_step,
            "consecutive_skips": self._consecutive_skips,
            **self.train_times(),
            "config": self.loaded.resolved,
        }

    def save(self, name: str) -> None:
        """Write ``last.pt`` (everything a resume needs) or ``best.pt`` (what evaluation needs: no optimizer,
        scheduler or scaler state, which is most of a checkpoint's size under Adam)."""
        distributed.check_in_sync(self._modules())
        # every rank's (RNG, epoch-start RNG): each rank draws its own augmentations, so each resumes its own
        rank_rngs = distributed.all_gather_object((checkpoint.rng_state(), self._epoch_rng))
        if self.dist.is_main:
            state = self._state(rank_rngs)
            if name == "best":
                state.update(optimizers={}, schedulers={}, scaler=None)
            checkpoint.atomic_save(state, self.run_dir / "checkpoints" / f"{name}.pt")
            self._status("running")
        if name == "last":  # every rank, so all skip fit's final save alike
            self._saved_step = self.position.global_step
        distributed.barrier()

    def restore(self, path: Path, state: dict[str, Any] | None = None) -> None:
        """Load ``path`` (or its already-read ``state``) into the task; the RNG follows when the data reaches the position.

        A failure gives the folder back and leaves ``status.json`` as it was (nothing was trained)."""
        try:
            state = checkpoint.load(path) if state is None else state
            checkpoint.restore(state, path, modules=self._modules(), optimizers=dict(self.task.optimizers()),
                               schedulers=dict(self.task.schedulers()), scaler=self.scaler, task=self.task)
        except BaseException:
            self.close()
            raise
        self.position = Position(**state["position"])
        self.best = state["best"]
        self._evals_since_best = state.get("evals_since_best", 0)
        self._resume_rng, self._epoch_rng = self._own_rng(state)
        self._last_eval_step = state["last_eval_step"]
        self._consecutive_skips = state.get("consecutive_skips", 0)
        self._seconds_before = (state.get("train_seconds", 0.0), state.get("train_cpu_seconds", 0.0))
        self._resumed = True
        self.log.truncate_after(self.position.global_step)

    def _own_rng(self, state: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """This rank's ``(rng, epoch_rng)`` from a checkpoint; rank 0's when it was written by another world size."""
        ranks = state.get("rank_rngs") or [(state["rng"], state["epoch_rng"])]
        if len(ranks) == self.dist.world_size:
            return ranks[self.dist.rank]
        if self.dist.is_main:
            print(f"resume: the checkpoint holds RNG states of {len(ranks)} process(es), this run has "
                  f"{self.dist.world_size}; every rank restores rank 0's, so augmentations will not repeat the "
                  "original run's", file=sys.stderr)
        return ranks[0]

    def train_times(self) -> dict[str, float]:
        """``train_seconds`` (wall) and ``train_cpu_seconds`` (this process's user + system time, without data
        loader workers) of training up to now, validations included, summed over the processes a resumed run
        went through (each counted to the checkpoint it left: work lost after a run's last checkpoint is not
        counted). Saved in every checkpoint, so ``best.pt`` holds the time to the selected checkpoint."""
        wall, cpu = (0.0, 0.0) if self._fit_started is None else (
            time.time() - self._fit_started[0], time.process_time() - self._fit_started[1])
        return {"train_seconds": round(self._seconds_before[0] + wall, 1),
                "train_cpu_seconds": round(self._seconds_before[1] + cpu, 1)}

    def _status(self, state: str, **extra: Any) -> None:
        if self.dist.is_main and not self._read_only:
            write_json({"state": state, **asdict(self.position), **extra}, self.run_dir / "status.json")

    # -- the loop -----------------------------------------------------------------------------

    def _finished(self) -> bool:
        max_steps = self.run.max_steps
        return (self.position.epoch >= self.run.epochs or (max_steps is not None and self.position.global_step >= max_steps)
                or self._stopped_early())

    def _stopped_early(self) -> bool:
        """``run.early_stop_patience`` validations in a row brought no better ``run.best_metric``."""
        return 0 < self.run.early_stop_patience <= self._evals_since_best

    def _epoch_batches(self) -> Iterator[Any]:
        """This epoch's batches from the current position, with RNG restored as the position requires."""
        pos = self.position
        if self._resume_rng is not None and self._epoch_rng is not None:
            checkpoint.set_rng_state(self._epoch_rng)  # mid-epoch: replay the epoch's start, then skip
        elif self._resume_rng is not None:
            checkpoint.set_rng_state(self._resume_rng)  # at an epoch boundary the two coincide
            self._resume_rng = None
        if pos.step_in_epoch == 0:
            self._epoch_rng = checkpoint.rng_state()
        batches = self.task.batches(pos.epoch)
        it = iter(batches)
        for skipped in range(pos.step_in_epoch):
            try:
                next(it)
            except StopIteration:
                raise checkpoint.CheckpointError(
                    f"resume: epoch {pos.epoch} has {skipped} batches now, the checkpoint stopped after "
                    f"{pos.step_in_epoch}; batches(epoch) must be deterministic") from None
        if self._resume_rng is not None:
            checkpoint.set_rng_state(self._resume_rng)
            self._resume_rng = None
        return it

    def _total_steps(self) -> int | None:
        rng = checkpoint.rng_state()  # batches() may draw from the global RNG; the count must not
        batches = self.task.batches(self.position.epoch)
        checkpoint.set_rng_state(rng)
        if not isinstance(batches, Sized):
            return self.run.max_steps
        total = len(batches) * self.run.epochs
        return min(total, self.run.max_steps) if self.run.max_steps is not None else total

    def fit(self) -> Path:
        """Train from the current position to the end; returns the run folder."""
        from tqdm import tqdm

        self._fit_started = (time.time(), time.process_time())
        for note in self._notes if self.dist.is_main else ():
            print(note, file=sys.stderr)
        self._status("running")
        self._names = {id(p): f"{mod}.{name}" for mod, m in self._modules().items() for name, p in m.named_parameters()}
        self._last_step = self._total_steps()
        bar = tqdm(total=self._last_step, initial=self.position.global_step, disable=not (self.dist.is_main and self.run.progress),
                   desc=f"{self.loaded.domain}/{self.loaded.name}", dynamic_ncols=True, file=sys.stderr)
        try:
            with self._signals.installed():  # a signal during the final validation lets the run finish first
                while not self._finished():
                    self._run_epoch(bar)
                unvalidated = self._last_eval_step != self.position.global_step
                if unvalidated:
                    self.validate()
                if unvalidated or self._saved_step != self.position.global_step:
                    self.save("last")
            earlier = {"earlier_train_cpu_seconds": self._seconds_before[1]} if self._resumed else {}
            early = {"stopped_early": self._early_stop_reason()} if self._stopped_early() else {}
            self._status("finished", **self.train_times(), resumed=self._resumed, **earlier, **early)
        except Preempted:
            raise
        except BaseException as err:
            state = "interrupted" if isinstance(err, KeyboardInterrupt) else "failed"
            self._status(state, error=f"{type(err).__name__}: {err}".rstrip(": "))
            with contextlib.suppress(AttributeError):  # an exception type without a __dict__ keeps its message only
                err.run_dir = self.run_dir  # type: ignore[attr-defined]  # the CLI names it under a bug's traceback
            raise
        finally:
            bar.close()
            self.log.close()
            self.close()
        return self.run_dir

    def _run_epoch(self, bar: Any) -> None:
        pos, run = self.position, self.run
        for batch in self._epoch_batches():
            if run.max_steps is not None and pos.global_step >= run.max_steps:
                return
            step = Step(epoch=pos.epoch, step=pos.global_step, optimizers=self.task.optimizers(),
                        schedulers=self.task.schedulers(), autocast=self.autocast, scaler=self.scaler,
                        grad_clip=run.grad_clip, non_finite=run.non_finite,
                        no_sync=lambda: distributed.no_sync(self._wrapped), param_names=self._names,
                        grad_clip_value=run.grad_clip_value)
            out = self.task.train_step(batch, step)
            step.finish()
            self._count_skips(step)
            pos.step_in_epoch += 1
            pos.global_step += 1
            self._last_batch = batch
            bar.update(1)
            if run.log_every_steps and (pos.global_step % run.log_every_steps == 0 or pos.global_step == self._last_step):
                values = {f"train/{k}": float(v) for k, v in out.items()} | step.stats | self._lrs_and_objective_state()
                self.log.log(values, step=pos.global_step, epoch=pos.epoch)
                if "loss" in out:
                    bar.set_postfix(loss=f"{float(out['loss']):.4f}")
            elif any(k.startswith("skipped/") for k in step.stats):
                self.log.log({k: v for k, v in step.stats.items() if k.startswith("skipped/")},
                             step=pos.global_step, epoch=pos.epoch)
            if run.health_every_steps and pos.global_step % run.health_every_steps == 0:
                self._log_health(batch)
            if run.checkpoint_every_steps and pos.global_step % run.checkpoint_every_steps == 0:
                self.save("last")
            self._stop_if_signalled()
        pos.epoch += 1
        pos.step_in_epoch = 0
        self._epoch_rng = None
        if run.eval_every_epochs and pos.epoch % run.eval_every_epochs == 0:
            self.validate()
        self.save("last")  # before a final validation too: the epoch is kept whatever that validation does
        if self._stopped_early() and self.dist.is_main:
            print(f"early stop after epoch {pos.epoch}: {self._early_stop_reason()}, best {self.best}", file=sys.stderr)

    def _stop_if_signalled(self) -> None:
        """After a step: on a stop signal that reached any rank, save ``last.pt`` and raise :class:`Preempted`."""
        signum = self._signals.requested(self.device)
        if not signum:
            return
        self.save("last")
        name = signal.Signals(signum).name
        self._status("preempted", signal=name, **self.train_times())
        raise Preempted(f"{name} at step {self.position.global_step}: saved {self.run_dir / 'checkpoints' / 'last.pt'}; "
                        f"continue with: contrasuite resume {self.run_dir}", signum)

    def _count_skips(self, step: Step) -> None:
        """Fail once more than ``run.max_consecutive_skips`` steps in a row were skipped."""
        self._consecutive_skips = self._consecutive_skips + 1 if step.skip_reasons else 0
        if self._consecutive_skips > self.run.max_consecutive_skips:
            raise NonFiniteStepError(
                f"{self._consecutive_skips} consecutive steps skipped (run.max_consecutive_skips="
                f"{self.run.max_consecutive_skips}); the last: {step.skip_reasons[-1]}")

    def _lrs_and_objective_state(self) -> dict[str, float]:
        values = {f"lr/{k}": float(o.param_groups[0]["lr"]) for k, o in self.task.optimizers().items()}
        for mod_name, mod in self._modules().items():
            for name, sub in mod.named_modules():
                if isinstance(sub, ContrastiveObjective):
                    prefix = ".".join(filter(None, (mod_name, name)))
                    values |= {f"param/{prefix}.{k}": v for k, v in sub.learned_values().items()}
                    values |= {f"state/{prefix}.{k}": v for k, v in sub.log_values().items()}
        return values

    def _embed_for_health(self, batch: Any) -> tuple[torch.Tensor, torch.Tensor] | None:
        embed = hook(self.task, "embed_for_health")
        if embed is None or batch is None:
            return None
        with self._side_computation(), torch.no_grad(), self.autocast():
            return embed(batch)

    def _log_health(self, batch: Any) -> None:
        pair = self._on_main(lambda: self._embed_for_health(batch))
        if pair is not None:
            values = {f"health/{k}": v for k, v in health(*pair).items()}
            self.log.log(values, step=self.position.global_step, epoch=self.position.epoch)

    # -- evaluation ---------------------------------------------------------------------------

    def validate(self) -> Mapping[str, float]:
        """``task.evaluate("val")`` on rank 0: log, plot similarities, keep ``best.pt`` by ``run.best_metric``.

        The other ranks wait for rank 0's decision (and its metrics), so no evaluation is run twice."""
        self._last_eval_step = self.position.global_step
        metrics, better = distributed.broadcast_object(self._on_main(self._validate_main) or ({}, False))
        self._evals_since_best = 0 if better else self._evals_since_best + 1
        if better:
            self.save("best")
        return metrics

    def _early_stop_reason(self) -> str:
        """Why training stopped early, naming the metric that selects ``best.pt`` (``run.best_metric``, else the
        first key validation returned)."""
        key = self.run.best_metric or self._selection_key or "first validation metric"
        return (f"{self._evals_since_best} validations without a better {key} "
                f"(run.early_stop_patience={self.run.early_stop_patience})")

    def _validate_main(self) -> tuple[dict[str, float], bool]:
        pos = self.position
        with self._side_computation():
            metrics = {k: float(v) for k, v in self.task.evaluate("val").items()}
        self._plot_similarities()
        self.log.log({f"val/{k}": v for k, v in metrics.items()}, step=pos.global_step, epoch=pos.epoch)
        key = self._selection_key = self.run.best_metric or next(iter(metrics), None)
        training_curves(self.log.path, self.run_dir / "plots" / "curves.png", key, f"{self.loaded.domain}/{self.loaded.name}")
        better = False
        if key is not None:
            if key not in metrics:
                raise KeyError(f"run.best_metric={key!r} is not among the validation metrics {sorted(metrics)}")
            value = metrics[key]
            better = self.best is None or (value > self.best if self.run.best_mode == "max" else value < self.best)
            self.best = value if better else self.best
        write_json({"split": "val", **asdict(pos), "metrics": metrics, "best_metric": key, "best": self.best},
                   self.run_dir / "eval_val.json")
        return metrics, better

    def _on_main(self, fn: Callable[[], Any]) -> Any:
        """``fn()`` on rank 0 with DDP's collectives off (``None`` on the other ranks)."""
        if not self.dist.is_main:
            return None
        with distributed.local_only(self._wrapped):
            return fn()

    def _plot_similarities(self) -> None:
        if (samples := hook(self.task, "similarity_samples")) is not None:
            with self._side_computation(), torch.no_grad():
                pos_neg = samples()
        else:
            pair = self._embed_for_health(self._last_batch)
            pos_neg = similarity_samples(*pair) if pair is not None else None
        if pos_neg is not None:
            path = self.run_dir / "plots" / f"similarity_step{self.position.global_step:07d}.png"
            similarity_histogram(*pos_neg, path, f"{self.loaded.name}, epoch {self.position.epoch}, step {self.position.global_step}")

    def test(self, which: str) -> dict[str, Any]:
        """Load ``best`` (or ``last``) modules and write ``eval_test.json`` from ``task.evaluate("test")``."""
        path = checkpoint_file(self.run_dir, which)
        if path.stem != which:
            print(f"no best.pt in {self.run_dir}; evaluating last.pt", file=sys.stderr)
            which = path.stem
        state = checkpoint.load(path)
        checkpoint.restore_modules(state, path, modules=self._modules(), task=self.task)

        def evaluate() -> dict[str, Any]:
            started = time.time()
            with self._side_computation():
                metrics = {k: float(v) for k, v in self.task.evaluate("test").items()}
            # the checkpoint's own training time: for best.pt, the time to the selected checkpoint
            trained = {k: state[k] for k in ("train_seconds", "train_cpu_seconds") if k in state}
            result = {"split": "test", "checkpoint": which, **state["position"], "metrics": metrics,
                      "seconds": round(time.time() - started, 3), **trained}
            write_json(result, self.run_dir / "eval_test.json")
            return result

        return distributed.broadcast_object(self._on_main(evaluate))


def train(loaded: LoadedConfig) -> Path:
    """Train a loaded config; a path in ``run.resume`` resumes that run, ``auto`` the newest unfinished run
    of this config name that was made under the same config (up to :data:`RESULT_NEUTRAL_KEYS`): one with
    another seed or length is never continued in its place."""
    mode = loaded.run.resume
    if mode == "auto":
        wanted = copy.deepcopy(loaded.resolved)  # as the Trainer will make it: the precision auto gives here
        device = pick_device(loaded.run.device, distributed.env_info().local_rank)
        wanted["run"]["precision"] = resolve_precision(loaded.run.precision, device)[0]
        for found in unfinished_runs(loaded.run.output_root, loaded.domain, loaded.name):
            try:
                changed = config_changes(load_config(found / "config.yaml", name=saved_run_name(found)).resolved, wanted)
            except ConfigError as err:  # made before a key it uses moved (pipelines/moved_keys.py)
                changed = [f"its config no longer loads: {err}"]
            if not changed:
                return resume(found)
            if distributed.env_info().is_main:
                print(f"run.resume=auto: not continuing {found}, made under another config ({', '.join(changed[:3])})",
                      file=sys.stderr)
    elif mode != "never":
        return resume(Path(mode))
    return Trainer(loaded).fit()


def saved_run_name(run_dir: Path) -> str:
    """The run name a run folder was made under (``environment.json``), else the folder above it."""
    return read_json(run_dir / "environment.json").get("run_name") or run_dir.parent.name


def resume(run_dir: Path, overrides: Sequence[str] = ()) -> Path:
    """Continue the run in ``run_dir`` from ``checkpoints/last.pt`` with its saved config.

    ``overrides`` (``key=value``) are deliberate changes, e.g. ``run.epochs=20``: they are applied to the
    saved config and written back to ``config.yaml`` once the checkpoint has loaded into the task. Any
    other difference between the checkpoint's config and ``config.yaml`` that can change the result is
    refused, naming the keys. A resume that fails before training changes nothing in the folder.
    """
    run_dir = Path(run_dir)
    if read_json(run_dir / "status.json").get("state") == "finished" and not overrides:
        print(f"{run_dir} already finished", file=sys.stderr)
        return run_dir
    loaded = load_config(run_dir / "config.yaml", overrides, name=saved_run_name(run_dir))
    path = run_dir / "checkpoints" / "last.pt"
    lock = RunLock(run_dir) if distributed.env_info().is_main else None
    if lock is not None:
        lock.acquire()  # before anything is read or written: the folder may belong to a live process
    try:
        state = checkpoint.load(path)
        changed = config_changes(state["config"], loaded.resolved, [parse_override(o)[0] for o in overrides])
    except BaseException:
        if lock is not None:
            lock.release()
        raise
    if changed:
        if lock is not None:
            lock.release()
        old, new = flatten(state["config"]), flatten(loaded.resolved)
        shown = ", ".join(f"{k} ({old.get(k, '<absent>')!r} -> {new.get(k, '<absent>')!r})" for k in changed[:3])
        raise checkpoint.CheckpointError(
            f"{path} was written under another config: {shown}{' ...' if len(changed) > 3 else ''}; "
            f"to change it deliberately, pass it to resume (contrasuite resume {run_dir} {changed[0]}=VALUE)")
    trainer = Trainer(loaded, run_dir=run_dir, lock=lock or False)
    trainer.restore(path, state)
    if overrides and trainer.dist.is_main:
        save_resolved(loaded.resolved, run_dir / "config.yaml")
    return trainer.fit()


def evaluate(run_dir: Path, which: str | None = None) -> dict[str, Any]:
    """Test-split evaluation of a finished (or interrupted) run; writes ``eval_test.json`` and nothing else.

    It takes no lock: it only reads atomically written checkpoints, so a live run may be evaluated."""
    run_dir = Path(run_dir)
    loaded = load_config(run_dir / "config.yaml", name=saved_run_name(run_dir))
    trainer = Trainer(loaded, run_dir=run_dir, lock=False, read_only=True)
    return trainer.test(which or loaded.run.eval_checkpoint)
