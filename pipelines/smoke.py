"""``contrasuite smoke [CONFIG ...]``: does each full-scale config start? Two real steps and a tiny evaluation.

For each config (default: every shipped config outside ``reduced``/``base``/``datasets``) the real
model, optimizers and data pipeline are built on the CPU from a small subset of the real data (the
task's ``smoke`` settings, :class:`contrasuite.core.task.protocol.SmokeSettings`: subsets, a small batch,
GradCache off), two training steps and the end-of-run validation run, and one line reports the
parameter count, the time, and an estimate of the memory one device needs for the full config:

    weights + gradients + optimizer state + (peak of a step - gradients) / smoke batch x live batch

where the peak is measured on the CPU's allocator (profiler events, :mod:`contrasuite.pipelines.memory`)
during the second step, and the live batch is the samples one backward of the full config holds (the
global batch, or a GradCache chunk). It is an estimate from CPU allocations at the run's precision:
CUDA kernels' workspaces and the allocator's fragmentation come on top. A config whose data is not
on this machine is reported as ``skip`` with the missing file; any other error, unreadable data
included (:class:`~contrasuite.core.task.errors.CorruptData`), is ``FAIL`` and makes the exit status 1,
and so does a call where every config was skipped (nothing was checked).

``--all`` takes every shipped config, reduced protocols included; ``--as-shipped`` runs each config at
its own batch instead of the smoke batch (still on the task's data subsets, for two steps): how CI runs
the reduced configs, whose batches fit a CPU.

Several processes (``torchrun --nproc_per_node N -m contrasuite.pipelines.cli smoke ...``): every config
runs on all N processes in one process group (gloo on the CPU), joined once for the whole call; rank 0
alone prints and writes ``--json``. Each config's outcome is agreed over the ranks (every rank's result
is gathered): a failure on any rank is ``FAIL`` on all, naming the rank, so the ranks stay aligned for
the next config. Every run ends with the engine's final ``last.pt`` save, which compares the ranks'
parameters and fails the run when they differ: ``ok`` means the ranks finished in sync. The smoke batch
(a global batch) is rounded up to a multiple of N; on a CPU ``run.sync_batchnorm`` is set to false
(PyTorch's SyncBatchNorm has no CPU kernel) and the line says so; a task that runs in one process only
(graph, :class:`~contrasuite.core.task.errors.OneProcessOnly`) is ``one-process``, not a failure. A rank
that fails inside a collective leaves the others waiting up to ``--dist-timeout-minutes``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Sequence

import torch
from omegaconf import OmegaConf

from contrasuite.core.task.errors import CorruptData, DataError, OneProcessOnly, one_line
from contrasuite.core.task.precision import AUTOCAST_DTYPES
from contrasuite.core.task.protocol import BATCH_KEY, SmokeSettings
from contrasuite.pipelines import distributed
from contrasuite.pipelines.config import (
    ConfigError, config_root, find_config, is_fragment, load_config, shipped_configs,
)
from contrasuite.pipelines.memory import peak_bytes
from contrasuite.pipelines.trainer import Trainer

RUN_OVERRIDES = ("run.progress=false", "run.eval_every_epochs=0",
                 "run.health_every_steps=0", "run.log_every_steps=1", "run.checkpoint_every_steps=0", "run.resume=never")
"""``checkpoint_every_steps=0`` leaves only the final ``last.pt`` save, which still compares the ranks' parameters."""
STATES = ("ok", "one-process", "skip", "FAIL")
SYNC_BN_OFF = "run.sync_batchnorm=false: SyncBatchNorm has no CPU kernel, BatchNorm statistics stay per process"


@dataclass
class SmokeResult:
    config: str
    state: str
    """``ok``, ``one-process`` (the task refuses several processes), ``skip`` (data not on this machine) or ``FAIL``."""
    params: int = 0
    seconds: float = 0.0
    """The whole config: setup, steps, validation and the final checkpoint."""
    steps: int = 0
    steps_seconds: float = 0.0
    steps_per_second: float | None = None
    """After the first two steps (warm-up), when more than two ran."""
    eval_seconds: float = 0.0
    smoke_batch: int | None = None
    step_peak_bytes: int = 0
    live_batch: int | None = None
    estimate_bytes: int = 0
    precision: str = ""
    device: str = ""
    processes: int = 1
    note: str = ""


def runnable_configs() -> list[Path]:
    """Every shipped config that is not a fragment other configs extend."""
    return [p for p in shipped_configs() if not is_fragment(p)]


def is_reduced(path: Path) -> bool:
    """A reduced protocol: a shipped config under a ``reduced*`` name or folder."""
    return any(part.startswith("reduced") for part in path.relative_to(config_root()).parts)


def full_scale_configs() -> list[Path]:
    """Shipped configs that are not reduced protocols or fragments other configs extend."""
    return [p for p in runnable_configs() if not is_reduced(p)]


def _tensor_bytes(tensors: Any) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))


def _subsets(settings: SmokeSettings, batch: int | None) -> list[str]:
    """The task's smoke overrides, each subset of :attr:`SmokeSettings.holds_a_batch` smaller than ``batch`` raised
    to twice ``batch``."""
    out = []
    for override in settings.overrides:
        key, _, value = override.partition("=")
        out.append(f"{key}={2 * batch}" if key in settings.holds_a_batch and batch and batch > int(value) else override)
    return out


def measure(path: Path, workdir: Path, *, data_root: str | None = None, device: str = "cpu",
            precision: str | None = None, steps: int = 2, smoke_batch: bool = True, subset: bool = True,
            evaluate: bool = True) -> SmokeResult:
    """Run ``steps`` training steps of ``path`` (and its final validation if ``evaluate``); never raises.

    ``smoke_batch``: the task's small smoke batch (else the config's own); ``subset``: the task's data
    subsets and GradCache off (else the config's data). The last step runs under the memory meter."""
    name = str(path.relative_to(config_root()).with_suffix("")) if path.is_relative_to(config_root()) else str(path)
    world = distributed.env_info().world_size
    note = ""
    began = time.perf_counter()
    try:
        full = load_config(path, data_root=data_root)
        settings: SmokeSettings = getattr(full.task_class, "smoke", None) or SmokeSettings(full_batch=True)
        key = None if settings.full_batch else BATCH_KEY
        shipped_batch = OmegaConf.select(OmegaConf.create(full.resolved), key) if key else None
        live = settings.live_batch(full.config) if settings.live_batch else shipped_batch
        batch = -(-settings.batch // world) * world  # a global batch: a whole number of samples per rank
        sync_off = world > 1 and torch.device(device).type == "cpu" and full.run.sync_batchnorm
        note = SYNC_BN_OFF if sync_off else ""
        used = batch if key and smoke_batch else shipped_batch
        overrides = [*RUN_OVERRIDES, f"run.max_steps={steps}", f"run.device={device}", f"run.output_root={workdir}",
                     *([f"run.precision={precision}"] if precision else []),
                     *(_subsets(settings, used) if subset else ()),
                     *([f"{key}={batch}"] if key and smoke_batch else []), *(["run.sync_batchnorm=false"] if sync_off else [])]
        loaded = load_config(path, overrides, data_root=data_root)
        trainer = Trainer(loaded)
        task = trainer.task
        peaks: list[int] = []
        times: list[float] = []
        timing = {"eval": 0.0}
        train_step, task_evaluate = task.train_step, task.evaluate

        def measured_step(batch: Any, step: Any) -> Any:
            """Each step timed; the last one under the memory meter (the optimizer state exists by then)."""
            started = time.perf_counter()
            if step.step < steps - 1:
                out = train_step(batch, step)
                if trainer.device.type == "cuda":
                    torch.cuda.synchronize(trainer.device)
            else:
                out, peak = peak_bytes(lambda: train_step(batch, step), trainer.device)
                peaks.append(peak)
            times.append(time.perf_counter() - started)
            return out

        def timed_evaluate(split: str = "val") -> Any:
            started = time.perf_counter()
            out = task_evaluate(split) if evaluate else {}
            timing["eval"] += time.perf_counter() - started
            return out

        task.train_step, task.evaluate = measured_step, timed_evaluate
        trainer.fit()
    except OneProcessOnly as err:
        return SmokeResult(name, "one-process", device=device, processes=world, note=one_line(err))
    except CorruptData as err:
        return SmokeResult(name, "FAIL", device=device, note=f"bad data: {one_line(err)}")
    except (DataError, FileNotFoundError) as err:
        return SmokeResult(name, "skip", device=device, note=f"data not on this machine: {one_line(err)}")
    except Exception as err:  # noqa: BLE001 - one line per broken config, then the next config
        return SmokeResult(name, "FAIL", device=device, note=f"{type(err).__name__}: {one_line(err)}")
    params = {id(p): p for m in task.modules().values() for p in m.parameters()}
    weights = _tensor_bytes(params.values())
    grads = _tensor_bytes(p for p in params.values() if p.requires_grad)
    optim = _tensor_bytes(t for o in task.optimizers().values() for s in o.state.values() for t in s.values())
    peak = peaks[-1] if peaks else 0
    scale = (live / used) if key and live and used else 1.0
    warm = times[2:]
    return SmokeResult(name, "ok", params=sum(p.numel() for p in params.values()),
                       seconds=round(time.perf_counter() - began, 1), steps=len(times),
                       steps_seconds=sum(times), steps_per_second=len(warm) / sum(warm) if warm else None,
                       eval_seconds=timing["eval"], smoke_batch=used, step_peak_bytes=peak, live_batch=live,
                       estimate_bytes=int(weights + grads + optim + max(peak - grads, 0) * scale),
                       precision=loaded.run.precision, device=str(trainer.device), processes=world, note=note)


def agreed(results: Sequence[SmokeResult]) -> SmokeResult:
    """One config's outcome from every rank's result (rank order): rank 0's, with the ranks' largest step peak
    and estimate, or ``FAIL`` naming the first rank that failed or ended otherwise than rank 0."""
    first = results[0]
    for rank, r in enumerate(results):
        if r.state == "FAIL" or r.state != first.state:
            why = r.note if r.state == "FAIL" else f"{r.state} here but {first.state} on rank 0 ({r.note or first.note})"
            return replace(first, state="FAIL", note=f"rank {rank}: {why}" if len(results) > 1 else why)
    return replace(first, step_peak_bytes=max(r.step_peak_bytes for r in results),
                   estimate_bytes=max(r.estimate_bytes for r in results))


def line(r: SmokeResult) -> str:
    if r.state != "ok":
        return f"{r.state:4s} {r.config}: {r.note}"
    at = f"batch {r.live_batch}" if r.live_batch else "the full graph"
    over = f" over {r.processes} processes" if r.processes > 1 else ""
    return (f"ok   {r.config}: {r.params / 1e6:.2f}M params, {r.steps} steps {r.steps_seconds:.1f} s, eval {r.eval_seconds:.1f} s, "
            f"step peak {r.step_peak_bytes / 2**20:.0f} MiB at smoke batch {r.smoke_batch or 'full'}; "
            f"est. {r.estimate_bytes / 2**30:.2f} GiB per device at {at}{over} ({r.precision})"
            + (f"; {r.note}" if r.note else ""))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="contrasuite smoke", description=__doc__.splitlines()[0])
    parser.add_argument("configs", nargs="*", help="config files or shipped names (default: every full-scale config)")
    parser.add_argument("--all", action="store_true", help="every shipped config, reduced protocols included")
    parser.add_argument("--as-shipped", action="store_true",
                        help="each config at its own batch, not the task's smoke batch (still on the smoke data subsets)")
    parser.add_argument("--data-root", default=None)
    parser.add_argument("--json", type=Path, default=None, help="also write every result to this JSON file")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: leave as is)")
    parser.add_argument("--precision", choices=tuple(AUTOCAST_DTYPES), default=None,
                        help="run every config at this precision (default: each config's own); on a CPU that "
                             "emulates bf16 (no AVX512-BF16 or AMX), fp32 runs several times faster")
    parser.add_argument("--dist-timeout-minutes", type=float, default=10.0,
                        help="under torchrun: how long a rank waits in a collective for the others")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        if args.all and args.configs:
            raise ConfigError("give config names or --all, not both")
        paths = [find_config(c) for c in args.configs] or (runnable_configs() if args.all else full_scale_configs())
    except ConfigError as err:
        print(f"contrasuite smoke: {one_line(err)}", file=sys.stderr)
        return 2
    info = distributed.env_info()
    distributed.init(info, torch.device("cpu"), args.dist_timeout_minutes)
    show = print if info.is_main else lambda *a, **k: None
    results = []
    with tempfile.TemporaryDirectory(prefix="contrasuite-smoke-") as tmp:
        for path in paths:
            mine = measure(path.resolve(), Path(tmp), data_root=args.data_root, precision=args.precision,
                           smoke_batch=not args.as_shipped)
            results.append(agreed(distributed.all_gather_object(mine)))
            show(line(results[-1]), flush=True)
    distributed.shutdown()
    counts = {s: sum(r.state == s for r in results) for s in STATES}
    one = f"{counts['one-process']} one-process only, " if counts["one-process"] else ""
    show(f"smoke: {counts['ok']} ok, {one}{counts['skip']} skipped (data not here), {counts['FAIL']} failed")
    if args.json and info.is_main:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=1) + "\n")
    if not counts["ok"] and not counts["FAIL"]:
        show("smoke: nothing was checked: no config's data is on this machine (--data-root, $CONTRASUITE_DATA)"
             if counts["skip"] else "smoke: nothing was checked: every config runs in one process only")
        return 1
    return 1 if counts["FAIL"] else 0
