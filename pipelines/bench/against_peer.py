"""A training step of ours against a peer's, alternating rounds in one process; the record and its page section.

The shared part of the domains' ``contrasuite bench <domain> --against peer`` (reached through
:mod:`contrasuite.pipelines.api`); each domain's ``bench.py`` keeps what is its own: how it sets up its task and
the peer's step, the equal-work description of its section, and its flags. Not a bench itself (no ``main``).

The protocol: both sides on the CPU in fp32 (:func:`cpu_task`, :func:`our_step`; a bench may also run them on a GPU or
under bf16 autocast, which its record and section name say: :func:`settings`, :func:`section_name`), the first step or loss of each
on the same batch from the same weights as the equal-work check (:func:`loss_check`), then :func:`alternate`'s
rounds, the order of the sides alternating so both share whatever load the machine has; a round's ratio is peer
time / our time (above 1: ours is faster), summarized by :func:`summarize`. The record (JSON, ``--output``;
:func:`peer_record`) holds the bench's own fields, :func:`settings`, the measurements (:func:`outcome`) and
:func:`machine` (and with ``--profile``, both sides' operators: :func:`profile_sides`); ``--report``
(:func:`peer_main`) renders it into its section of :data:`PAGE` (:func:`write_section`; :func:`comparison_section`
for a one-comparison record) and the page's overview table from every kept record (:func:`write_summary`), a page
never typed by hand.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import torch

from contrasuite.pipelines.bench import write_output
from contrasuite.pipelines.cli_runs import ROOT
from contrasuite.pipelines.config import load_config
from contrasuite.pipelines.host_allocator import page_faults, retain_freed_memory, use_host_allocator, wants_retain
from contrasuite.pipelines.run_dir import cpu_name
from contrasuite.pipelines.standalone import StepRunner, setup_task

RECORDS = ROOT / "docs" / "results" / "records" / "bench_pipelines"
"""Where the kept records are, one JSON file a section."""
PAGE = ROOT / "docs" / "results" / "bench_pipelines.md"
LOSS_TOLERANCE = 1e-4
"""Largest relative difference of the two first-batch losses for a comparison to count as equal work."""
CLOCKS: dict[str, Callable[[], float]] = {"cpu": time.process_time, "wall": time.perf_counter}
PROFILE_ROWS = 8
"""A profile table's rows: the operators of largest time on either side, then as many of largest difference."""
HAND_LOOP_EPOCH_END = "a hand loop has them: nothing (no validation, no checkpoint)"
"""What a peer's plain loop does at an epoch's end (a :class:`PeerRun`'s default), as a record's
``peer_epoch_end_what`` says it."""
CHECK_OPS = ("aten::_foreach_norm", "aten::linalg_vector_norm", "aten::stack", "aten::isfinite", "aten::all",
             "aten::_local_scalar_dense")
"""The operators of the engine's per-step checks (``pipelines/step.py``): the norms of the gradients and of the
updated weights, and their finiteness read to the host."""
PAGE_HEAD = """# Pipelines against their official code or closest peer (issue 41)

Each section is rendered from a kept record under `docs/results/records/bench_pipelines/` by the bench's
`--report` flag (`contrasuite bench <domain> --report`); no number here is typed by hand. A ratio is the
peer's time per training step over ours, measured in one process on the same data, threads and precision,
the two sides alternating; above 1 means ours is faster. Each bench sets its task up after
`torch.manual_seed(0)` with the config's `run.seed` (0 in every shipped config), and the peer starts from a
copy of those weights; the spread shown is over the alternating rounds of that one seed, since a step's time
does not depend on the seed. A "compute bound" paragraph divides the FLOPs of our step (`torch.utils.flop_counter`)
by the fastest fp32 matrix product the same process measures: the peer's time over that floor is the ratio a
step doing all its arithmetic at that rate would reach, the ceiling at that precision on that machine.
"""


# -- running ----------------------------------------------------------------------------------------------

CPU = torch.device("cpu")


def cpu_task(config: str | os.PathLike, overrides: Sequence[str], data_root: str | None, run_dir: Path,
             device: torch.device = CPU, precision: str = "fp32") -> tuple[Any, Any]:
    """The task of ``config`` (a file or a shipped config's name) set up as the trainer does on the CPU in fp32
    (or on ``device`` in ``precision``), after ``torch.manual_seed(0)``, and its loaded config. Its
    ``run.host_allocator`` applies from here on, as the trainer applies it at setup: a bench's first steps then run
    on it too (run before it, they left the heap laid out so that every later step of ours faulted in 0.6 M fresh
    pages, image_text's whole towers at batch 128: 7.2-8.0 s a step instead of 6.1-6.2 s)."""
    torch.manual_seed(0)
    loaded = load_config(config, list(overrides), data_root=data_root)
    task = setup_task(loaded.task_class(), loaded.config, device=device, precision=precision,
                      data_root=Path(loaded.run.data_root or "."), run_dir=run_dir, seed=loaded.run.seed,
                      memory_format=loaded.run.memory_format)
    use_host_allocator(loaded.run.host_allocator, device)
    return task, loaded


def train_to_checkpoint(config: str | os.PathLike, overrides: Sequence[str], data_root: str | None, root: Path,
                        device: torch.device = CPU, precision: str = "fp32") -> dict[str, Any]:
    """Ours as a user trains: ``config`` with ``overrides`` on the bench's ``device`` and ``precision`` through the
    Trainer (``contrasuite train``) into a run folder under ``root``, to the end of its schedule, in this process on
    its threads. Returns the command, the step of the checkpoint the run selects (``run.eval_checkpoint``), the steps
    run, and the training time that checkpoint holds (the trainer's ``train_times``: validations included, setup
    not)."""
    from contrasuite.pipelines import trainer
    from contrasuite.pipelines.python_api import load_run

    overrides = [*overrides, f"run.device={device.type}", f"run.precision={precision}"]
    loaded = load_config(config, [*overrides, f"run.output_root={root}", "run.resume=never"], data_root=data_root)
    run_dir = trainer.train(loaded)
    selected, last = (load_run(run_dir, which).state for which in (loaded.run.eval_checkpoint, "last"))
    shown = config if isinstance(config, str) else Path(config).relative_to(ROOT)
    return {"command": shlex.join(["contrasuite", "train", str(shown), *overrides]),
            "checkpoint": loaded.run.eval_checkpoint, "selected_step": selected["position"]["global_step"],
            "steps_run": last["position"]["global_step"], "cpu_s": selected["train_cpu_seconds"],
            "wall_s": selected["train_seconds"]}


def on_clocks(clocks: dict[str, Callable[[], float]], fn: Callable[..., Any],
              *args: Any) -> tuple[Any, dict[str, float]]:
    """``fn(*args)`` and the seconds it took on each of ``clocks``."""
    started = {clock: read() for clock, read in clocks.items()}
    out = fn(*args)
    return out, {clock: read() - started[clock] for clock, read in clocks.items()}


@dataclass
class PeerRun:
    """The peer's loop run as a run of it goes (:func:`to_checkpoint_rounds`): ``step`` over ``batches``, cycling,
    and after each epoch of ``steps_per_epoch`` steps (and after the last step) what the peer's own trainer does at
    an epoch's end (write a checkpoint, or validate and keep a better model). ``epoch_ends(folder)`` sets up a run
    in ``folder`` (its fresh state, before the run's clock starts, as ours' setup is not timed either) and returns
    its epoch-end handler; the handler is called with a path of its own and returns where it wrote (``None``: that
    path). By default it does nothing."""

    step: Callable[[Any], Any]
    batches: list
    steps_per_epoch: int
    epoch_ends: Callable[[Path], Callable[[Path], Path | None]] = lambda folder: lambda path: None

    def __call__(self, steps: int, folder: Path, clocks: dict[str, Callable[[], float]],
                 epoch_end: Callable[[Path], Path | None]) -> dict[str, Any]:
        """``steps`` steps into ``folder``, ``epoch_end`` (made by ``epoch_ends(folder)``) at each epoch's end: the
        epoch ends' count, their time on each of ``clocks`` and the size of what the last one wrote."""
        total, count, size = dict.fromkeys(clocks, 0.0), 0, 0
        for k in range(steps):
            self.step(self.batches[k % len(self.batches)])
            if (k + 1) % self.steps_per_epoch == 0 or k + 1 == steps:
                count += 1
                path = folder / f"epoch_{count}"
                wrote, took = on_clocks(clocks, epoch_end, path)
                total = {clock: total[clock] + took[clock] for clock in total}
                path = wrote or path
                size = sum(f.stat().st_size for f in [path, *path.rglob("*")] if f.is_file()) if path.exists() else 0
        return {"count": count, **{f"{clock}_s": t for clock, t in total.items()}, "bytes": size}


def to_checkpoint_rounds(config: str | os.PathLike, overrides: Sequence[str], data_root: str | None, peer: PeerRun,
                         repeats: int, folder: Path, device: torch.device = CPU, precision: str = "fp32",
                         retaining: Sequence[str] = ()) -> dict[str, Any]:
    """Ours trained as a user does (:func:`train_to_checkpoint` of ``config`` with ``overrides``, a fresh run folder
    each time) and ``peer`` run to the same step, ``repeats`` times, the order alternating (ours first, so the first
    round gives the step). A round's row: ``<side>_<clock>_s``, ours the training time its selected checkpoint holds
    (validations and checkpoints included, setup not), the peer's measured around its run after its setup
    (``peer.epoch_ends``; on a thread of its own where ``retaining``, as in :func:`alternate`), and the peer's epoch
    ends (``peer_epoch_ends``). Returns the first training's fields (command, checkpoint, steps) with ``rounds``."""
    clocks, rounds, first = synced_clocks(device), [], None
    for r in range(repeats):
        row: dict[str, Any] = {}
        for name in ("ours", "peer") if r % 2 == 0 else ("peer", "ours"):
            if retaining:
                retain_freed_memory(name in retaining)
            if name == "ours":
                trained = train_to_checkpoint(config, overrides, data_root, folder / f"ours{r}", device, precision)
                first = first or trained
                if trained["selected_step"] != first["selected_step"]:
                    raise RuntimeError(f"the training of round {r} selected step {trained['selected_step']}, the "
                                       f"first {first['selected_step']}: not the same run")
                row |= {"ours_cpu_s": trained["cpu_s"], "ours_wall_s": trained["wall_s"]}
                continue
            run = folder / f"peer{r}"
            run.mkdir(parents=True)
            epoch_end = peer.epoch_ends(run)
            ends, took = on_clocks(clocks, on_its_thread, name, retaining, peer, first["selected_step"], run, clocks,
                                   epoch_end)
            row |= {f"peer_{clock}_s": t for clock, t in took.items()} | {"peer_epoch_ends": ends}
            shutil.rmtree(run)  # what its epochs wrote, outside the time
        rounds.append(row)
    return {k: v for k, v in first.items() if k not in ("cpu_s", "wall_s")} | {"rounds": rounds}


def median_step(record: dict[str, Any], side: str) -> float:
    """``side``'s (``ours`` or ``peer``) median seconds per step over the record's rounds, on the record's clock."""
    return statistics.median(r[f"{side}_{record['clock']}_s"] for r in record["rounds"])


def checkpoint_ratios(to_checkpoint: dict[str, Any], clock: str) -> list[float]:
    """Peer / ours of each round of a record's ``to_checkpoint`` on ``clock``, sorted."""
    return sorted(r[f"peer_{clock}_s"] / r[f"ours_{clock}_s"] for r in to_checkpoint["rounds"])


def checkpoint_sentence(record: dict[str, Any]) -> str:
    """The record's ``to_checkpoint`` (:func:`to_checkpoint_rounds`): both sides' measured times to the checkpoint
    ours selects and their ratio over the rounds; the peer selects nothing (its ``peer_epoch_end_what`` says what
    its run does at an epoch's end)."""
    t, clock = record["to_checkpoint"], record["clock"]
    rows = t["rounds"]
    ours, peer = (statistics.median(r[f"{side}_{clock}_s"] for r in rows) for side in ("ours", "peer"))
    ends = statistics.median(r["peer_epoch_ends"][f"{clock}_s"] for r in rows)
    ratios = checkpoint_ratios(t, clock)
    last = rows[-1]["peer_epoch_ends"]
    size = f"{last['bytes'] / 2**20:.0f} MiB" if last["bytes"] >= 2**20 else f"{last['bytes'] / 2**10:.0f} KiB"
    cost = [f"the last wrote {size}"] * bool(last["bytes"])
    cost += [f"{ends:.1f} s of its time"] * (ends >= 0.05)
    costs = f" ({'; '.join(cost)})" if cost else ""
    return (f"\nTo the checkpoint it selects: ours trained as a user does (`{t['command']}`, at the config's seed, in "
            f"this process after the rounds), its `run.eval_checkpoint: {t['checkpoint']}` at step "
            f"{t['selected_step']:,} of {t['steps_run']:,}, {len(rows)} runs alternating with the peer's: ours "
            f"{ours:.1f} s median ({clock} clock) of training to it, validations and checkpoints included, setup not; "
            f"the peer's loop run as a run of it for as many steps, with {last['count']} epoch end(s) as "
            f"{record['peer_epoch_end_what']}{costs}: {peer:.1f} s median. Peer / ours: "
            f"**{statistics.median(ratios):.2f}x** median, {ratios[0]:.2f} to {ratios[-1]:.2f} over the {len(rows)} "
            f"rounds.")


def our_step(task: Any, device: torch.device = CPU, precision: str = "fp32") -> Callable[[Any], float]:
    """One training step of ours per call: ``task.train_step`` in the engine's ``Step`` (:class:`StepRunner`,
    CPU and fp32 unless told), the step counter counting on; returns the loss."""
    runner, counter = StepRunner(task, device, precision), iter(range(10**9))

    def step(batch: Any) -> float:
        return float(runner(batch, 0, next(counter))["loss"])

    return step


def pull_levers(task: Any, compile: bool = False) -> list[str]:
    """The bench-only levers on our side and their names for the record: ``compile``, the task's network
    (``task.train_model``) under ``torch.compile``, compiled at its first step."""
    levers = []
    if compile:
        task.train_model = torch.compile(task.train_model)
        levers.append("torch.compile (CPU inductor) of the network")
    return levers


def optimizer_kernel(optimizer: torch.optim.Optimizer) -> str:
    """``fused`` when every param group of ``optimizer`` runs PyTorch's fused kernel (the pipeline's default,
    :func:`contrasuite.core.task.optim.use_fused_kernel`), else ``loop``; a record keeps it as ``ours_optimizer``."""
    return "fused" if all(group.get("fused") for group in optimizer.param_groups) else "loop"


def optimizer_words(record: dict[str, Any], name: str, loop_ops: str) -> str:
    """How the two sides' optimizer ``name`` runs in ``record``: ours on the fused kernel and the peer on PyTorch's
    CPU default (``ours_optimizer: fused``), or, in records made before the fused default, the same loop on both."""
    if record.get("ours_optimizer") == "fused":
        return (f"{name} (ours on PyTorch's fused kernel, the pipeline's default, `_fused_{name.lower()}_`; the peer on "
                f"PyTorch's CPU default, a per-tensor loop: {loop_ops})")
    return f"the same {name} (PyTorch's CPU default, a per-tensor loop: {loop_ops})"


SAME_ROWS = "Rows of the same kernels differ between the sides by the machine's load, not by the code."
CHANNELS_LAST_ROWS = ("Ours lays its convolution weights out channels-last (`run.memory_format: auto` on the CPU, "
                      "`pipelines/memory_format.py`): its convolutions run oneDNN's NHWC kernels, the peer's the NCHW "
                      "ones of a network as built; the convolution rows differ by that, the others by the machine's load.")
"""The rows' words for a record whose convolution weights ran channels-last (``ours_layout``, :func:`weight_layout`)."""
WINDOW_SUM_ROWS = (" Its 5x5 depthwise convolutions' weight gradients are summed window by window "
                   "(`domains/depthwise_conv.py`: `_DepthwiseConvBackward` with its `mul` and `sum`), where oneDNN's "
                   "channels-last kernel for them pads each channel's filter to a 16 x 16 block.")
"""Added to the rows' words for a record whose depthwise weight gradients were window sums (``ours_depthwise_grad``)."""


def window_summed(record: dict[str, Any]) -> bool:
    """Whether the record's depthwise weight gradients of ours were window sums (``ours_depthwise_grad``)."""
    return record.get("ours_depthwise_grad") == "window_sums"


def differences(record: dict[str, Any]) -> str:
    """What our step does differently from the peer's in a record whose optimizer ran fused, in words: the weights'
    layout when ``ours_layout`` is channels-last, the depthwise weight gradients' kernel when ``ours_depthwise_grad``
    says window sums, the optimizer's kernel, where freed memory goes when
    ``ours_host_allocator`` retains it, and the engine's checks."""
    differ = [*["the convolutions' memory layout"] * (record.get("ours_layout") == "channels_last"),
              *["the depthwise weight gradients' kernel"] * window_summed(record), "the optimizer's kernel",
              *["where freed memory goes"] * (record.get("ours_host_allocator") == "retain"), "the engine's checks"]
    return f"{', '.join(differ[:-1])} and {differ[-1]}"


def defaults_closing(record: dict[str, Any]) -> str:
    """The close of a "where the time goes" paragraph for a record whose optimizer ran fused (:func:`optimizer_words`):
    what the two steps differ by (:func:`differences`) and the defaults the ratio therefore measures."""
    defaults = [*["channels-last weights on the CPU"] * (record.get("ours_layout") == "channels_last"),
                *["window-summed depthwise weight gradients"] * window_summed(record), "the fused optimizer",
                *["freed memory retained"] * (record.get("ours_host_allocator") == "retain")]
    measures = (f"the pipeline's defaults ({', '.join(defaults)}) give at the same network, weights and precision"
                if len(defaults) > 1 else "the pipeline's default fused optimizer gives at the same network and precision")
    return f" So the two steps differ by {differences(record)}: the ratio is what {measures}."


def weight_layout(modules: Iterable[torch.nn.Module]) -> str:
    """``channels_last`` when a 4-D weight of ``modules`` is laid out so (``run.memory_format``), else ``contiguous``."""
    convs = [p for m in modules for p in m.parameters() if p.dim() == 4]
    return "channels_last" if any(p.is_contiguous(memory_format=torch.channels_last) and not p.is_contiguous()
                                  for p in convs) else "contiguous"


def where_words(record: dict[str, Any], where: str, name: str, loop_ops: str, loop_closing: str,
                closing: str | None = None, rows: str | None = None) -> str:
    """A bench's ``where`` text (with ``{optimizer}`` for :func:`optimizer_words` and ``{rows}`` for what the
    rows of the same operators differ by: ``rows`` when given, else by the weights' layout or by the machine's load)
    and its close: ``closing`` when given, else :func:`defaults_closing` for a record on the fused optimizer,
    ``loop_closing`` for records made before the fused default."""
    if rows is None:
        rows = CHANNELS_LAST_ROWS if record.get("ours_layout") == "channels_last" else SAME_ROWS
    text = where.format(optimizer=optimizer_words(record, name, loop_ops),
                        rows=rows + (WINDOW_SUM_ROWS if window_summed(record) else ""))
    if closing is None:
        closing = defaults_closing(record) if record.get("ours_optimizer") == "fused" else loop_closing
    return text + closing


def ours_text(subject: str, levers: Sequence[str] = (), detail: str = "") -> str:
    """The record's ``ours``: the step of ``subject`` (a config), ``detail`` (``, ...``) and the levers pulled."""
    return (f"contrasuite {subject} train_step in the engine's Step (StepRunner){detail}"
            + (f", with {' and '.join(levers)} (bench-only levers)" if levers else ""))


def plain_loop_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, loss_of: Callable[[Any], torch.Tensor],
                    scheduler: Any = None, zero_grad_first: bool = False) -> Callable[[Any], float]:
    """A peer's training step as its examples write the loop: ``model.train()``, ``loss = loss_of(batch)``,
    ``loss.backward()``, the optimizer's step and the ``scheduler``'s, then ``optimizer.zero_grad()`` (before
    ``loss_of`` instead with ``zero_grad_first``); the step returns the loss."""

    def step(batch: Any) -> float:
        model.train()
        if zero_grad_first:
            optimizer.zero_grad()
        loss = loss_of(batch)
        loss.backward()
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        if not zero_grad_first:
            optimizer.zero_grad()
        return float(loss.detach())

    return step


def retaining_sides(loaded: Any, device: torch.device = CPU, ours: Sequence[str] = ("ours",)) -> tuple[str, ...]:
    """The sides of ours (``ours``) that run with freed memory retained: all of them when the config's (``loaded``)
    ``run.host_allocator`` retains on ``device`` (:func:`~contrasuite.pipelines.host_allocator.wants_retain`), as
    the trainer would, else none. The peer always runs on the C library's defaults."""
    return tuple(ours) if wants_retain(loaded.run.host_allocator, device) else ()


def host_allocator_fields(retaining: Sequence[str]) -> dict[str, str]:
    """The record's ``ours_host_allocator``: ``retain`` or ``system`` (:func:`retaining_sides`)."""
    return {"ours_host_allocator": "retain" if retaining else "system"}


_PEER_THREAD: list[ThreadPoolExecutor] = []


def on_its_thread(name: str, retaining: Sequence[str], fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` on this thread for our sides, and for every side when none retains memory (``retaining``); on
    the peer's own thread otherwise (one worker, made at first use with this thread's torch threads). glibc gives
    that thread an arena of its own, so the peer neither reuses the blocks ours retains nor leaves its own for ours:
    each side maps, unmaps and trims as in a process of its own (measured: a ResNet-18 step faulted as often, and
    took as long, as in a fresh process)."""
    if not retaining or name in retaining:
        return fn(*args)
    if not _PEER_THREAD:
        _PEER_THREAD.append(ThreadPoolExecutor(1, initializer=torch.set_num_threads, initargs=(torch.get_num_threads(),)))
    return _PEER_THREAD[0].submit(fn, *args).result()


def settle(name: str, side: Callable[[Any], Any], batch: Any, retaining: Sequence[str]) -> None:
    """With sides that retain memory (``retaining``), set the C library for side ``name`` (retaining, or glibc's
    defaults with the free heap returned) and run one untimed step (:func:`on_its_thread`), so the side is timed
    in its own steady state."""
    if retaining:
        retain_freed_memory(name in retaining)
        on_its_thread(name, retaining, side, batch)


def alternate(sides: dict[str, Callable[[Any], Any]], batches: list, repeats: int, steps: int,
              clocks: dict[str, Callable[[], float]] = CLOCKS, retaining: Sequence[str] = ()) -> list[dict[str, Any]]:
    """``repeats`` rounds of ``steps`` steps per side, the order of ``sides`` alternating between rounds (reversed
    in odd rounds); every side steps through the same batches, cycling, round ``r`` starting at batch ``r * steps``.
    A round's row: ``<side>_<clock>_s``, seconds per step on each of ``clocks``, and ``<side>_faults``, the process's
    page faults per step. With ``retaining`` (:func:`retaining_sides`) each side's round starts with
    :func:`settle`: those sides retain freed memory, the others run on glibc's defaults on a thread of their own
    (:func:`on_its_thread`)."""
    rounds = []
    for r in range(repeats):
        row: dict[str, Any] = {}
        for name in list(sides) if r % 2 == 0 else list(sides)[::-1]:
            settle(name, sides[name], batches[r * steps % len(batches)], retaining)
            round_batches = [batches[(r * steps + i) % len(batches)] for i in range(steps)]
            faults = page_faults()
            _, took = on_clocks(clocks, on_its_thread, name, retaining, lambda side, todo: [side(b) for b in todo],
                                sides[name], round_batches)
            row |= {f"{name}_{clock}_s": t / steps for clock, t in took.items()}
            row[f"{name}_faults"] = (page_faults() - faults) / steps
        rounds.append(row)
    return rounds


def synced_clocks(device: torch.device) -> dict[str, Callable[[], float]]:
    """:data:`CLOCKS`, each read after ``torch.cuda.synchronize()`` on a CUDA ``device`` (so a round's time holds
    the GPU work it queued)."""
    if device.type != "cuda":
        return CLOCKS

    def synced(read: Callable[[], float]) -> Callable[[], float]:
        return lambda: (torch.cuda.synchronize(device), read())[1]

    return {clock: synced(read) for clock, read in CLOCKS.items()}


def summarize(rounds: list[dict[str, Any]], clock: str) -> dict[str, float]:
    """Each round's ``ratio`` (peer / ours on ``clock``, set in the row) and their median, smallest and largest."""
    ratios = [r[f"peer_{clock}_s"] / r[f"ours_{clock}_s"] for r in rounds]
    for r, ratio in zip(rounds, ratios):
        r["ratio"] = ratio
    return {"ratio_median": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios)}


def loss_check(ours: float, peer: float, tolerance: float = LOSS_TOLERANCE, **extra: Any) -> dict[str, Any]:
    """The equal-work check: the two first-batch losses equal within ``tolerance`` relative (absolute below 1)."""
    diff = abs(ours - peer)
    return {"ours": ours, "peer": peer, "abs_diff": diff, "tolerance_rel": tolerance,
            "equal": diff <= tolerance * max(1.0, abs(ours)), **extra}


def outcome(first_ours: float, first_peer: float, rounds: list[dict[str, Any]], clock: str,
            **check: Any) -> dict[str, Any]:
    """A comparison's record fields: ``loss_check`` (``check``: more of its fields), ``rounds`` and the ratios."""
    return {"loss_check": loss_check(first_ours, first_peer, **check), "rounds": rounds, **summarize(rounds, clock)}


def profile_sides(sides: dict[str, Callable[[Any], Any]], batches: list, steps: int,
                  device: torch.device = CPU, retaining: Sequence[str] = ()) -> dict[str, dict[str, Any]]:
    """``torch.profiler`` over ``steps`` more steps of each of ``sides``, one step each in turn, the order alternating
    as in :func:`alternate` (so both share the machine's load), cycling ``batches``: per side, each operator's self
    time on the CPU thread (the profiler's wall time, not process CPU time) in ms per step (``ops``) and their sum
    (``cpu_self_ms``); on a GPU also the kernels' time per step (``cuda_kernel_ms``). With ``retaining``, each
    profiled step follows :func:`settle` and runs on the side's thread, as in :func:`alternate`."""
    from torch.profiler import ProfilerActivity, profile

    cuda = device.type == "cuda"
    ops: dict[str, dict[str, float]] = {name: {} for name in sides}
    kernels = dict.fromkeys(sides, 0.0)

    def profiled(side: Callable[[Any], Any], batch: Any) -> Any:  # the profiler records the thread it starts on
        with profile(activities=[ProfilerActivity.CPU] + [ProfilerActivity.CUDA] * cuda) as prof:
            side(batch)
            if cuda:
                torch.cuda.synchronize(device)
        return prof.key_averages()

    for i in range(steps):
        for name in list(sides) if i % 2 == 0 else list(sides)[::-1]:
            settle(name, sides[name], batches[i % len(batches)], retaining)
            for e in on_its_thread(name, retaining, profiled, sides[name], batches[i % len(batches)]):
                if e.self_cpu_time_total > 0:
                    ops[name][e.key] = ops[name].get(e.key, 0.0) + e.self_cpu_time_total / 1000 / steps
                kernels[name] += e.self_device_time_total / 1000 / steps
    out = {}
    for name, times in ops.items():
        rounded = {op: round(ms, 4) for op, ms in times.items()}
        out[name] = {"cpu_self_ms": sum(rounded.values()), **({"cuda_kernel_ms": kernels[name]} if cuda else {}),
                     "ops": rounded}
    return out


PEAK_SIZES = (512, 1024, 2048)
"""The square fp32 products :func:`matmul_peak` times: the machine's best rate over them is the ceiling's rate."""


def matmul_peak(sizes: Sequence[int] = PEAK_SIZES, repeats: int = 5) -> float:
    """This process's best fp32 matrix-product rate on the CPU (FLOP/s, ``2 n^3`` a product): the fastest of ``repeats``
    products of two ``n x n`` matrices for each of ``sizes``, on the wall clock, at the threads set now. The best of
    several, so another job on the machine lowers it less than it lowers a step's time."""
    best = 0.0
    for n in sizes:
        a, b = torch.randn(n, n), torch.randn(n, n)
        torch.mm(a, b)
        for _ in range(repeats):
            start = time.perf_counter()
            torch.mm(a, b)
            best = max(best, 2 * n**3 / (time.perf_counter() - start))
    return best


def compute_bound(step: Callable[[Any], Any], batch: Any) -> dict[str, Any]:
    """The arithmetic of one more step of ``step`` on ``batch`` and the rate the machine does it at: the FLOPs that
    ``torch.utils.flop_counter.FlopCounterMode`` counts (products and convolutions, forward and backward, as run:
    a direct convolution's ``2 * output * in_channels * k^2``), in all and per operator, and :func:`matmul_peak`.
    At that rate this arithmetic takes ``flop / peak`` seconds (:func:`ceiling_text`)."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter:
        step(batch)
    return {"flop_per_step": counter.get_total_flops(), "matmul_peak_flops": matmul_peak(),
            "flop_by_op": {str(op): n for op, n in counter.get_flop_counts()["Global"].items()}}


def ceiling_text(record: dict[str, Any]) -> str:
    """The compute bound of a record with ``compute`` (:func:`compute_bound`) in words: our step's arithmetic, the
    peak, the rate each side reached (median seconds per step on the record's clock) and the largest ratio any step
    of the same arithmetic could reach at the peak against the peer's time on this machine (no ceiling where ours
    ran faster than the peak); empty for a record without it."""
    compute = record.get("compute")
    if not compute:
        return ""
    clock = record["clock"]
    ours, peer = median_step(record, "ours"), median_step(record, "peer")
    flop, peak = compute["flop_per_step"], compute["matmul_peak_flops"]
    parts = ", ".join(f"`{op}` {n / 1e9:.1f}" for op, n in sorted(compute["flop_by_op"].items(), key=lambda kv: -kv[1]))
    return (f"\n\nCompute bound (`torch.utils.flop_counter` over one more step of ours): our step does "
            f"{flop / 1e9:.1f} GFLOP ({parts}). This machine's fp32 matrix product in the same process, on the same "
            f"threads, peaks at {peak / 1e9:.1f} GFLOP/s (the best of {', '.join(f'{n}²' for n in PEAK_SIZES)} "
            f"products), so this arithmetic at that rate takes {flop / peak:.3g} s. Ours ran it at "
            f"{flop / ours / 1e9:.1f} GFLOP/s ({flop / ours / peak:.0%} of the peak), the peer "
            f"{flop / peer / 1e9:.1f} (our arithmetic over its {peer:.3g} s a step): a step doing it all at the peak "
            f"would be **{peer * peak / flop:.2f}**x the peer's speed, "
            + ("the ceiling of the ratio at this precision on this machine short of less arithmetic." if flop / ours <= peak
               else "less than ours already is: this step's kernels outrun the matrix product, so its peak is no "
                    "ceiling here.") + products_text(record))


PRODUCT_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::mkldnn_convolution",
               "aten::convolution_backward")
"""The profiler's names of the operators doing the arithmetic :func:`compute_bound` counts (their self time)."""


def products_text(record: dict[str, Any]) -> str:
    """The bound at the rate ours' products actually ran, from the record's profile (:func:`profile_sides`): the
    self time of ours' :data:`PRODUCT_OPS`, and the ratio if every other operator of ours took no time, i.e. the
    peer's profiled step over that time; empty without a per-operator profile of both sides."""
    profile = record.get("profile") or {}
    ours, peer = profile.get("ours", {}), profile.get("peer", {}).get("cpu_self_ms")
    ops = ours.get("ops")
    products = sum(ops.get(op, 0.0) for op in PRODUCT_OPS) if ops else 0.0
    if not products or not peer:
        return ""
    names = ", ".join(f"`{op}`" for op in PRODUCT_OPS if ops.get(op))
    rate = record["compute"]["flop_per_step"] / products / 1e6
    return (f" In the profile, ours' products themselves ({names}) took {products:,.1f} ms of its "
            f"{ours['cpu_self_ms']:,.1f} ms a step, at {rate:.1f} GFLOP/s: with every other operator of ours free, "
            f"at that rate, the ratio would be **{peer / products:.2f}**x (the peer's profiled {peer:,.1f} ms over "
            "them).")


# -- the record -------------------------------------------------------------------------------------------

def run_variant(args: argparse.Namespace) -> list[str]:
    """``args.device`` off the CPU and ``args.precision`` other than fp32, for a bench that has them (none for one
    that runs fp32 on the CPU only)."""
    return [v for v in (getattr(args, "device", "cpu"), getattr(args, "precision", "fp32")) if v not in ("cpu", "fp32")]


def section_name(base: str, args: argparse.Namespace, levers: dict[str, str]) -> str:
    """``base`` with ``+name`` for each of :func:`run_variant` and of ``levers`` switched on in ``args``: a record's
    (and its section's) name."""
    return base + "".join(f"+{name}" for name in [*run_variant(args), *(n for n in levers if getattr(args, n))])


def settings(args: argparse.Namespace) -> dict[str, Any]:
    """The record's run settings: the precision and device (fp32 on the CPU for a bench without ``args.precision``
    and ``args.device``; the GPU's name on CUDA), the threads, clock, steps per round and rounds."""
    device = getattr(args, "device", "cpu")
    gpu = {"gpu": torch.cuda.get_device_name(device)} if device.startswith("cuda") else {}
    return {"precision": getattr(args, "precision", "fp32"), "device": device, **gpu, "threads": torch.get_num_threads(),
            "clock": args.clock, "steps_per_round": args.steps, "repeats": args.repeats}


def peer_version(module: str) -> str:
    """``module.__version__``, or ``?``."""
    try:
        return __import__(module).__version__
    except (ImportError, AttributeError):
        return "?"


def machine(bench: str, argv: Sequence[str]) -> dict[str, Any]:
    """The record's last fields: torch, the machine and its load now, the date and the command that ran."""
    return {"torch": torch.__version__, "machine": cpu_name(), "cpu_count": os.cpu_count(),
            "load_average_1min": round(os.getloadavg()[0], 2), "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
            "command": f"contrasuite bench {bench} " + shlex.join(argv)}


def peer_record(bench: str, args: argparse.Namespace, argv: Sequence[str], lever_flags: dict[str, str],
                levers: Sequence[str], fields: dict[str, Any], measured: dict[str, Any] | None = None,
                variant: str = "") -> dict[str, Any]:
    """The record of ``contrasuite bench <bench> argv``: its section (``bench``, then ``variant`` (``+name``) and the
    ``lever_flags`` on), ``against``, the ``levers`` pulled, the bench's own ``fields``, :func:`settings`, ``measured``
    (:func:`outcome`, when the record is one comparison) and :func:`machine`."""
    return {"section": section_name(bench + variant, args, lever_flags), "against": "peer", "levers": list(levers),
            **fields, **settings(args), **(measured or {}), **machine(bench, argv)}


# -- the page ---------------------------------------------------------------------------------------------

def heading(title: str, record: dict[str, Any]) -> str:
    """The section's title line, naming the record's levers if it has any."""
    levers = record.get("levers")
    return f"## {title}" + (f" (levers: {', '.join(levers)}; not what the pipeline runs)" if levers else "")


def check_text(check: dict[str, Any]) -> str:
    """The equal-work check in words: both first losses, their difference and the verdict."""
    return (f"ours {check['ours']:.6f}, peer {check['peer']:.6f} (|diff| {check['abs_diff']:.1e}: "
            f"{'equal' if check['equal'] else 'NOT equal'} within {check['tolerance_rel']:g} relative)")


def host_memory_lines(record: dict[str, Any], label: str = "") -> list[str]:
    """The ``host memory`` bullet (``label`` after the words) of a record whose rounds count page faults (none for
    older records): where each side's memory came from (``ours_host_allocator``) and both sides' faults per step,
    median over the rounds."""
    rounds = record.get("rounds")
    if not rounds or "ours_faults" not in rounds[0]:
        return []
    ours, peer = (statistics.median(r[f"{side}_faults"] for r in rounds) for side in ("ours", "peer"))
    where = ("ours retains freed memory between steps (`run.host_allocator: auto` on the CPU), the peer runs on "
             "glibc's default thresholds on a thread of its own (its own glibc arena: none of our retained blocks), "
             "as in a process of its own; each side's round starts with one untimed step after the switch"
             if record.get("ours_host_allocator") == "retain" else "both sides on glibc's defaults")
    return [f"- host memory{label}: {where}; page faults per step, ours {ours:,.0f}, peer {peer:,.0f} (median over rounds)"]


def machine_lines(record: dict[str, Any]) -> list[str]:
    """The section's ``machine`` bullet, :func:`host_memory_lines` and the ``command`` bullet."""
    return [f"- machine: {record['machine']}, {record['cpu_count']} cores (shared; 1-min load "
            f"{record['load_average_1min']} at the end), torch {record['torch']}, {record['device']}"
            f"{' (' + record['gpu'] + ')' if 'gpu' in record else ''}, "
            f"{record['threads']} thread(s), {record['precision']}, {record['clock']} clock, {record['date_utc']} UTC",
            *host_memory_lines(record), f"- command: `{record['command']}`"]


def round_cells(row: dict[str, Any], clock: str, scale: float, digits: int) -> str:
    """A round's cells: ours and peer per step on ``clock``, then on the wall clock (seconds times ``scale``, with
    ``digits`` decimals), and the ratio."""
    times = [scale * row[f"{side}_{c}_s"] for c in (clock, "wall") for side in ("ours", "peer")]
    return " | ".join([*(f"{t:.{digits}f}" for t in times), f"{row['ratio']:.2f}"])


def rounds_table(rounds: list[dict[str, Any]], clock: str, unit: str = "ms", digits: int = 1) -> str:
    """The per-round table (markdown), times per step in ``unit`` (``ms`` or ``s``)."""
    scale = {"ms": 1000, "s": 1}[unit]
    out = [f"| round | ours {unit}/step ({clock}) | peer {unit}/step ({clock}) | ours {unit}/step (wall) | "
           f"peer {unit}/step (wall) | peer / ours |", "|---|---|---|---|---|---|"]
    out += [f"| {i + 1} | {round_cells(r, clock, scale, digits)} |" for i, r in enumerate(rounds)]
    return "\n".join(out)


def ratio_sentence(record: dict[str, Any], steps: str = "steps") -> str:
    """The headline under the rounds: the median ratio, its range and the rounds (``steps``: the word for them)."""
    return (f"\nRatio (peer / ours, above 1: ours faster): **{record['ratio_median']:.2f}** median, "
            f"{record['ratio_min']:.2f} to {record['ratio_max']:.2f} over {record['repeats']} alternating rounds of "
            f"{record['steps_per_round']} {steps}.")


def comparison_section(record: dict[str, Any], title: str, same_work: str, unit: str = "ms", digits: int = 1,
                       steps: str = "steps", note: str | None = None) -> str:
    """The page section of a one-comparison record (markdown): ``title`` (:func:`heading`), the ``ours`` and
    ``peer`` bullets, the bench's ``same work`` bullet (``same_work``, after ``- same work: ``), the machine and
    command, the rounds (:func:`rounds_table` in ``unit`` with ``digits``), the ratio (:func:`ratio_sentence`), the
    time to the selected checkpoint (:func:`checkpoint_sentence`, when the record has it) and ``note`` (a last line,
    when given)."""
    lines = [heading(title, record), "", f"- ours: {record['ours']}", f"- peer: {record['peer']}",
             f"- same work: {same_work}", *machine_lines(record), "",
             rounds_table(record["rounds"], record["clock"], unit, digits), ratio_sentence(record, steps),
             *([checkpoint_sentence(record)] if "to_checkpoint" in record else [])]
    return "\n".join(lines + ([] if note is None else [note]))


def profile_table(profiles: dict[str, dict[str, Any]], rows: int = PROFILE_ROWS, differences: int | None = None) -> str:
    """Markdown of :func:`profile_sides`'s ``ours`` and ``peer``: the ``rows`` operators of largest CPU self time on
    either side, then the ``differences`` (default ``rows``) others of largest difference, each side's ms per step
    (``-``: not run on that side) and ours minus peer; then all operators together (and the GPU kernels when profiled
    on a GPU)."""
    ours, peer = profiles["ours"]["ops"], profiles["peer"]["ops"]
    ops = ours.keys() | peer.keys()
    top = sorted(ops, key=lambda op: -max(ours.get(op, 0), peer.get(op, 0)))[:rows]
    by_difference = sorted(ops - set(top), key=lambda op: -abs(ours.get(op, 0) - peer.get(op, 0)))
    top += by_difference[:rows if differences is None else differences]
    lines = ["| operator | ours ms/step | peer ms/step | ours - peer |", "|---|---|---|---|"]
    for op in top:
        cells = [f"{side[op]:.2f}" if op in side else "-" for side in (ours, peer)]
        lines.append(f"| `{op}` | {cells[0]} | {cells[1]} | {ours.get(op, 0) - peer.get(op, 0):+.2f} |")
    totals = [("all operators", "cpu_self_ms"), ("CUDA kernels (GPU time)", "cuda_kernel_ms")]
    for label, key in totals:
        if key in profiles["ours"]:
            mine, theirs = profiles["ours"][key], profiles["peer"][key]
            lines.append(f"| {label} | {mine:.2f} | {theirs:.2f} | {mine - theirs:+.2f} |")
    return "\n".join(lines)


def checks_text(profiles: dict[str, dict[str, Any]]) -> str:
    """How much of our step the engine's checks take: the CPU self time of :data:`CHECK_OPS`, ours beyond the
    peer's (an operator the peer runs more of counts 0), per step and as a share of all our operators."""
    ours, peer = profiles["ours"]["ops"], profiles["peer"]["ops"]
    extra = sum(max(0.0, ours.get(op, 0) - peer.get(op, 0)) for op in CHECK_OPS)
    return (f"The operators of the engine's checks ({', '.join(f'`{op}`' for op in CHECK_OPS)}), ours beyond the "
            f"peer's: {extra:.2f} ms per step, {100 * extra / profiles['ours']['cpu_self_ms']:.2f}% of our operators' "
            "time.")


def profile_note(record: dict[str, Any], where: str, profiles: dict[str, dict[str, Any]] | None = None) -> str:
    """The section's "where the time goes" paragraph: ``where`` (the bench's words) and, when the record holds a
    profile (``profiles``, else the record's ``profile``), :func:`checks_text` and its :func:`profile_table`."""
    profiles = profiles or record.get("profile")
    if not profiles:
        return f"\nWhere the time goes: {where}" + ceiling_text(record)
    steps = record["steps_per_round"]
    return (f"\nWhere the time goes (`torch.profiler` over {steps} more step{'s' * (steps != 1)} per side after the "
            f"rounds, the sides in turn; each operator's self time on this thread, in wall time, so another job on "
            f"the machine inflates it; the {PROFILE_ROWS} largest on either side, then the {PROFILE_ROWS} largest "
            f"differences): {where}\n\n{checks_text(profiles)}\n\n{profile_table(profiles)}{ceiling_text(record)}")


def write_section(page: Path, name: str, text: str) -> None:
    """Replace the section between ``<!-- section:name -->`` markers of ``page`` in place, or add it: a variant's
    section (``base+variant``, e.g. a lever's) after the last section of its base's family (the base and its
    variants, so sections rendered in page order come back in that order) when the page has the base, any other at
    the end. A missing page is made, starting with :data:`PAGE_HEAD`."""
    start, end = f"<!-- section:{name} -->", f"<!-- /section:{name} -->"
    body = page.read_text() if page.exists() else PAGE_HEAD
    block = f"{start}\n{text.rstrip()}\n{end}"
    base = name.split("+")[0]
    family = [s for s in re.findall(r"<!-- /section:([^ ]+) -->", body) if s.split("+")[0] == base]
    base_end = f"<!-- /section:{family[-1]} -->" if base in family else None
    if start in body and end in body:
        head, rest = body.split(start, 1)
        body = head + block + rest.split(end, 1)[1]
    elif base_end:
        head, rest = body.split(base_end, 1)
        body = head + base_end + "\n\n" + block + rest
    else:
        body = body.rstrip() + "\n\n" + block + "\n"
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(body)


SUMMARY = ("<!-- summary -->", "<!-- /summary -->")
"""The markers of :data:`PAGE`'s overview table (:func:`write_summary`)."""


def compared(record: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """A kept record's comparisons, each with words for what it compares and its fields (``ratio_*``, and
    ``to_checkpoint`` where the time to the checkpoint was measured with it); none for a record of another kind."""
    levers = "".join(f", {lever}" for lever in record.get("levers", []))
    if "comparisons" in record:  # one per step kind (code_search) or mode and precision (super_resolution)
        return [(c.get("step") or f"{c['mode']}, ours {c['precision']}", c) for c in record["comparisons"]]
    if "variants" in record:  # translation: ours in fp32 and in bf16 against the official fp32, per variant
        found = [(f"{v['mode']}, ours {p}", part) for v in record["variants"]
                 for p, part in (("fp32", v), ("bf16", v["bf16"]))]
        if "to_checkpoint" in record:  # trained in fp32, the first variant's (CUT)
            found[0] = (found[0][0], {**found[0][1], "to_checkpoint": record["to_checkpoint"]})
        return found
    return [(f"ours {record['precision']}{levers}", record)] if "ratio_median" in record else []


def summary_table(records: Iterable[dict[str, Any]]) -> str:
    """The overview of :data:`PAGE` (markdown): a row per comparison of each record (:func:`compared`): its
    section, what it compares, peer / ours per step and, where measured, to the checkpoint ours selects (median,
    then the smallest and largest round), the device and the date."""
    def ratio(median: float, low: float, high: float) -> str:
        return f"**{median:.2f}** ({low:.2f}-{high:.2f})"

    rows = ["| section | compared | per step | to the checkpoint | device, threads | date (UTC) |",
            "|---|---|---|---|---|---|"]
    for record in records:
        for what, c in compared(record):
            field = lambda name: c.get(name, record.get(name))  # noqa: E731 (the comparison's, else its record's)
            to = checkpoint_ratios(c["to_checkpoint"], field("clock")) if "to_checkpoint" in c else None
            rows.append(f"| `{record['section']}` | {what} | {ratio(c['ratio_median'], c['ratio_min'], c['ratio_max'])} "
                        f"| {ratio(statistics.median(to), to[0], to[-1]) if to else '-'} "
                        f"| {field('device')}, {field('threads')} | {field('date_utc')} |")
    return "\n".join(rows)


def write_summary(page: Path, records: Path = RECORDS) -> None:
    """Put the overview of every kept record under ``records`` (:func:`summary_table`, in file-name order) between
    :data:`SUMMARY`'s markers of ``page``, or before its first section when it has none."""
    kept = [json.loads(f.read_text()) for f in sorted(records.glob("*.json"))]
    block = (f"{SUMMARY[0]}\nPeer / ours over the kept records (above 1: ours faster; each section below has the "
             "rounds, the work compared and the machine). graph's time to the checkpoint each side selects is "
             "measured per dataset by `docs/results/records/graph_perf/time_to_checkpoint.sh` (docs/domains/graph.md)."
             f"\n\n{summary_table(kept)}\n{SUMMARY[1]}")
    body = page.read_text()
    if SUMMARY[0] in body:
        head, rest = body.split(SUMMARY[0], 1)
        body = head + block + rest.split(SUMMARY[1], 1)[1]
    else:
        head, sep, rest = body.partition("<!-- section:")
        body = head + block + "\n\n" + sep + rest
    page.write_text(body)


# -- the command ------------------------------------------------------------------------------------------

def peer_flags(parser: Any, record: Path, levers: dict[str, str], batches: int,
               steps: int | None = None, peer: str = "the peer's loop", profile: bool = False,
               to_checkpoint: bool = False) -> None:
    """The flags every ``--against peer`` bench has, on ``parser`` (or an argument group): ``--override``, ``--batches``
    (default ``batches``), ``--repeats``, ``--clock``, a switch ``--<lever>`` for each of ``levers`` (name: what it
    does), ``--output`` (default ``record``), ``--report`` and ``--page``. With ``steps``, for a bench that has no
    other mode, first ``--against`` (``peer``, the default: ``peer`` in words), ``--data-root``, ``--steps`` (default
    ``steps``) and ``--threads`` (default 1). With ``profile``, ``--profile`` (:func:`profile_sides` into the
    record); with ``to_checkpoint``, ``--to-checkpoint`` (:func:`train_to_checkpoint` into the record)."""
    if steps is not None:
        parser.add_argument("--against", choices=("peer",), default="peer", help=f"peer: {peer}")
        parser.add_argument("--data-root", default=os.environ.get("CONTRASUITE_DATA"))
        parser.add_argument("--steps", type=int, default=steps, help="timed steps per side per round")
        parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (0: leave as is)")
    parser.add_argument("--override", action="append", default=[], help="a config override (repeatable)")
    parser.add_argument("--batches", type=int, default=batches, help="distinct batches of epoch 0 both sides cycle through")
    parser.add_argument("--repeats", type=int, default=3, help="alternating rounds (--steps steps per side each)")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="cpu")
    if profile:
        parser.add_argument("--profile", action="store_true",
                            help="add both sides' operators (torch.profiler over --steps more steps) to the record")
    if to_checkpoint:
        parser.add_argument("--to-checkpoint", action="store_true",
                            help="after the rounds, train the config as a user does and add the time to the checkpoint "
                                 "it selects, against the peer's steps to it, to the record")
    for name, what in levers.items():
        parser.add_argument(f"--{name.replace('_', '-')}", action="store_true", help=f"lever: {what} (bench-only)")
    parser.add_argument("--output", type=Path, default=record, help="the JSON record")
    parser.add_argument("--report", action="store_true", help="render the record at --output into --page; run nothing")
    parser.add_argument("--page", type=Path, default=PAGE)


def official_flags(parser: argparse.ArgumentParser, what: str, folder: Path, folder_help: str) -> Any:
    """The argument group ``--against official`` of a bench whose peer is the official code, with ``--against``
    (``official``: ``what``; ``peer``, the same) and ``--official`` (``folder_help``, default ``folder``); the bench adds
    its own flags to the group returned, then :func:`peer_flags`."""
    group = parser.add_argument_group("--against official (module docstring)")
    group.add_argument("--against", choices=("official", "peer"), default=None,
                       help=f"official: {what} (peer: the same; this bench's peer is the official code)")
    group.add_argument("--official", type=Path, default=folder, help=folder_help)
    return group


def peer_main(args: argparse.Namespace, argv: Sequence[str],
              run: Callable[[argparse.Namespace, Sequence[str]], dict[str, Any]],
              render: Callable[[dict[str, Any]], str]) -> int:
    """``--report``: the record at ``--output`` rendered into its section of ``--page``, nothing run; else
    ``run(args, argv)`` on ``--threads`` threads (0: as they are), its record written to ``--output`` and printed."""
    if args.report:
        record = json.loads(args.output.read_text())
        write_section(args.page, record["section"], render(record))
        write_summary(args.page)
        print(f"wrote {args.page}")
        return 0
    if args.threads:
        torch.set_num_threads(args.threads)
    record = run(args, argv)
    write_output(args.output, record)
    print(render(record))
    print(f"wrote {args.output}")
    return 0
