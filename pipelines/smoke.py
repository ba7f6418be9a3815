"""``contrasuite smoke [CONFIG ...]``: does each full-scale config start? Two real steps and a tiny evaluation.

For each config (default: every shipped config outside ``reduced``/``base``/``datasets``) the real
model, optimizers and data pipeline are built on the CPU from a small subset of the real data (the
task's ``smoke`` settings, :class:`contrasuite.domains.task.SmokeSettings`: subsets, a small batch,
GradCache off), two training steps and the end-of-run validation run, and one line reports the
parameter count, the time, and an estimate of the memory one device needs for the full config:

    weights + gradients + optimizer state + (peak of a step - gradients) / smoke batch x live batch

where the peak is measured on the CPU's allocator (profiler events, :mod:`contrasuite.pipelines.memory`)
during the second step, and the live batch is the samples one backward of the full config holds (the
global batch, or a GradCache chunk). It is an estimate from CPU allocations at the run's precision:
CUDA kernels' workspaces and the allocator's fragmentation come on top. A config whose data is not
on this machine is reported as ``skip`` with the missing file; any other error, unreadable data
included (:class:`~contrasuite.domains.errors.CorruptData`), is ``FAIL`` and makes the exit status 1,
and so does a call where every config was skipped (nothing was checked).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

import torch
from omegaconf import OmegaConf

from contrasuite.domains.errors import CorruptData, DataError, one_line
from contrasuite.domains.task import AUTOCAST_DTYPES, SmokeSettings
from contrasuite.pipelines.config import ConfigError, config_root, find_config, is_fragment, load_config, shipped_configs
from contrasuite.pipelines.memory import peak_bytes
from contrasuite.pipelines.trainer import Trainer

RUN_OVERRIDES = ("run.progress=false", "run.eval_every_epochs=0",
                 "run.health_every_steps=0", "run.log_every_steps=1", "run.checkpoint_every_steps=0", "run.resume=never")


@dataclass
class SmokeResult:
    config: str
    state: str
    """``ok``, ``skip`` (data not on this machine) or ``FAIL``."""
    params: int = 0
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
    note: str = ""


def full_scale_configs() -> list[Path]:
    """Shipped configs that are not reduced protocols or fragments other configs extend."""
    root = config_root()
    return [p for p in shipped_configs()
            if not is_fragment(p) and not any(part.startswith("reduced") for part in p.relative_to(root).parts)]


def _tensor_bytes(tensors: Any) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))


def measure(path: Path, workdir: Path, *, data_root: str | None = None, device: str = "cpu",
            precision: str | None = None, steps: int = 2, smoke_batch: bool = True, subset: bool = True,
            evaluate: bool = True) -> SmokeResult:
    """Run ``steps`` training steps of ``path`` (and its final validation if ``evaluate``); never raises.

    ``smoke_batch``: the task's small smoke batch (else the config's own); ``subset``: the task's data
    subsets and GradCache off (else the config's data). The last step runs under the memory meter."""
    name = str(path.relative_to(config_root()).with_suffix("")) if path.is_relative_to(config_root()) else str(path)
    try:
        full = load_config(path, data_root=data_root)
        settings: SmokeSettings = getattr(full.task_class, "smoke", None) or SmokeSettings(None)
        key = settings.batch_key
        full_batch = OmegaConf.select(OmegaConf.create(full.resolved), key) if key else None
        live = settings.live_batch(full.config) if settings.live_batch else full_batch
        overrides = [*RUN_OVERRIDES, f"run.max_steps={steps}", f"run.device={device}", f"run.output_root={workdir}",
                     *([f"run.precision={precision}"] if precision else []), *(settings.overrides if subset else ()),
                     *([f"{key}={settings.batch}"] if key and smoke_batch else [])]
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
    used = settings.batch if key and smoke_batch else full_batch
    scale = (live / used) if key and live and used else 1.0
    warm = times[2:]
    return SmokeResult(name, "ok", params=sum(p.numel() for p in params.values()), steps=len(times),
                       steps_seconds=sum(times), steps_per_second=len(warm) / sum(warm) if warm else None,
                       eval_seconds=timing["eval"], smoke_batch=used, step_peak_bytes=peak, live_batch=live,
                       estimate_bytes=int(weights + grads + optim + max(peak - grads, 0) * scale),
                       precision=loaded.run.precision, device=str(trainer.device))


def line(r: SmokeResult) -> str:
    if r.state != "ok":
        return f"{r.state:4s} {r.config}: {r.note}"
    at = f"batch {r.live_batch}" if r.live_batch else "the full graph"
    return (f"ok   {r.config}: {r.params / 1e6:.2f}M params, {r.steps} steps {r.steps_seconds:.1f} s, eval {r.eval_seconds:.1f} s, "
            f"step peak {r.step_peak_bytes / 2**20:.0f} MiB at smoke batch {r.smoke_batch or 'full'}; "
            f"est. {r.estimate_bytes / 2**30:.2f} GiB per device at {at} ({r.precision})")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="contrasuite smoke", description=__doc__.splitlines()[0])
    parser.add_argument("configs", nargs="*", help="config files or shipped names (default: every full-scale config)")
    parser.add_argument("--data-root", default=None)
    parser.add_argument("--json", type=Path, default=None, help="also write every result to this JSON file")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: leave as is)")
    parser.add_argument("--precision", choices=tuple(AUTOCAST_DTYPES), default=None,
                        help="run every config at this precision (default: each config's own); on a CPU that "
                             "emulates bf16 (no AVX512-BF16 or AMX), fp32 runs several times faster")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        paths = [find_config(c) for c in args.configs] or full_scale_configs()
    except ConfigError as err:
        print(f"contrasuite smoke: {one_line(err)}", file=sys.stderr)
        return 2
    results = []
    with tempfile.TemporaryDirectory(prefix="contrasuite-smoke-") as tmp:
        for path in paths:
            results.append(measure(path.resolve(), Path(tmp), data_root=args.data_root, precision=args.precision))
            print(line(results[-1]), flush=True)
    counts = {s: sum(r.state == s for r in results) for s in ("ok", "skip", "FAIL")}
    print(f"smoke: {counts['ok']} ok, {counts['skip']} skipped (data not here), {counts['FAIL']} failed")
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=1) + "\n")
    if counts["skip"] and not counts["ok"] and not counts["FAIL"]:
        print("smoke: nothing was checked: no config's data is on this machine (--data-root, $CONTRASUITE_DATA)")
        return 1
    return 1 if counts["FAIL"] else 0
