"""``contrasuite bench objectives``: forward+backward time and peak memory of every registered objective.

Each objective runs at each ``N`` on random ``D``-dimensional features ``randn / sqrt(D)`` (rows of
norm about 1) in two call forms:

* ``paired``: ``obj(a, b)`` with ``a, b [N, D]`` and diagonal positives; baseline: the bare
  ``logsumexp(a @ b.T / t)`` forward+backward on ``N x N``;
* ``two_view``: ``obj(cat(a, b), labels=...)`` (SimCLR's ``2N`` batch); baseline: the bare
  ``2N x 2N`` ``logsumexp``. Objectives that need separate candidates (CLIP, SigLIP) skip it.

Ratios are against the baseline measured in the same process, and against the public
implementation where one exists (pytorch-metric-learning's NTXentLoss, CircleLoss,
MultiSimilarityLoss + MultiSimilarityMiner; open_clip's ClipLoss, SigLipLoss), run on the same
inputs, and only where its loss equals ours on them (otherwise the row says so). The baselines and
our objectives of one ``(N, form)`` run back to back in each repeat (after one warm-up each), so they
share whatever load the machine has; each public implementation runs back to back with ours alone
(some allocate far more, which slowed whatever ran next); a time ratio is the median over repeats of the
per-repeat ratio, and ``ms`` the median time. Time is wall-clock; ``--clock cpu`` takes this process's
CPU time instead (CPU device only), which on a machine shared with other jobs is far less noisy.
``--host-allocator`` (default ``auto``) keeps freed memory in the process on the CPU, as a training run does
(:mod:`contrasuite.pipelines.host_allocator`), so a large temporary is not mapped and faulted in afresh each call.
Peak memory is, on CUDA,
``torch.cuda.max_memory_allocated`` above the starting level. On a Linux CPU it is the peak resident
set above the starting level during one forward+backward, measured in a forked child
(:func:`contrasuite.pipelines.memory.peak_resident_bytes`); elsewhere on the CPU, the peak of live bytes
replayed from the profiler's memory events (:func:`contrasuite.pipelines.memory.peak_bytes`). The two
agree to 0.3 MiB on the dense objectives at N = 4096; on tiled ones the resident set is 1 MiB lower
to 11 MiB higher (over two runs; page granularity and memory the profiler's events do not count).
The profiler's event list of a tiled objective at N = 65,536 ran a 24 GB machine out of memory.

Objectives whose definition computes more than one ``N x N`` similarity matrix and reduction
(``SAME_WORK``: DHEL's and KCL's two same-view energies, CLIP's two directions) also get
``time / same work``: the ratio to ``k`` bare logsumexps, ``logsumexp(a @ a.T / t) + logsumexp(b @ b.T
/ t)`` for ``k = 2``, timed in the same repeats. ``time / bare`` stays the headline ratio.

``--tiled`` benchmarks the objectives that take ``tile_size`` (:mod:`contrasuite.core.tiling`) at large
``N`` (default 4096, 16384, 65536), paired form only: each tiled objective beside the same objective
dense, run back to back in each repeat, where the dense one fits (its estimated peak,
``DENSE_BYTES_PER_PAIR x N^2``, within ``--dense-max-gib``); ``time / dense`` and ``mem / dense`` as above.

``--compile`` times each objective under ``torch.compile`` against itself eager instead
(:mod:`contrasuite.pipelines.bench.compiled_objectives`).

Why unit-scale inputs: the objectives L2-normalise (cosine), so their logits ``s / t`` lie in
``[-1/t, 1/t]``; the baseline ``a @ b.T / t`` on plain ``randn`` rows would have logits of size
``sqrt(D) / t`` (about 100), and most of its ``exp(l - max)`` would underflow. On x86 CPUs an
``exp`` whose result underflows takes a slow path (measured 6 to 15x slower per element), which
doubled the baseline's time at N = 1024 and made every ratio look better than it is. With rows of
norm about 1 the baseline sees logits in the same range as a cosine objective.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

from contrasuite.core.objectives import OBJECTIVES
from contrasuite.core.pairs import two_view
from contrasuite.pipelines import memory
from contrasuite.pipelines.host_allocator import HOST_ALLOCATORS, use_host_allocator

TEMPERATURE = 0.1
PML_NTXENT_LIMIT_GIB = 1.0
SAME_WORK = {"dhel": 2, "kcl": 2, "clip": 2}
"""``N x N`` similarity matrices with a reduction each that the objective's formula needs: DHEL's
anchor-side and positive-side energies (both in the official code), KCL's two within-view energies,
CLIP's image-to-text and text-to-image cross-entropies (two matmuls, as open_clip)."""
Step = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
DENSE_BYTES_PER_PAIR = 24
"""Estimated dense peak bytes per (anchor, candidate) pair, the largest measured at N = 4096 over the
tiled objectives (CLIP's two directions: about 5.5 fp32 ``N x N`` buffers), rounded up."""


@dataclass
class Row:
    objective: str
    form: str
    n: int
    ms: float
    peak_mb: float
    time_vs_bare: float
    mem_vs_bare: float
    public: str = ""
    time_vs_public: float | None = None
    mem_vs_public: float | None = None
    time_vs_same_work: float | None = None


def bare(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.logsumexp(a @ b.T / TEMPERATURE, dim=1).sum()


def bare_two_view(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    z = torch.cat([a, b])
    return bare(z, z)


def bare_twice(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Two bare ``N x N`` logsumexps: the work of an objective with two energies (``SAME_WORK``)."""
    return bare(a, a) + bare(b, b)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_once(step: Step, a: torch.Tensor, b: torch.Tensor) -> None:
    a.grad = b.grad = None
    step(a, b).backward()


CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "cpu": time.process_time}
"""``wall``: elapsed time. ``cpu``: this process's CPU time (user + system, so page faults of fresh
allocations count), CPU device only; with one thread it is the compute time, unaffected by other
processes waiting for the same cores."""


def interleaved_ms(
    steps: list[Step], a: torch.Tensor, b: torch.Tensor, repeats: int, clock: Callable[[], float] = time.perf_counter
) -> list[list[float]]:
    """Times (ms) of each step in each repeat; steps run back to back so they share the machine's load."""
    for step in steps:
        run_once(step, a, b)  # warm-up
    times: list[list[float]] = [[] for _ in steps]
    for _ in range(repeats):
        for k, step in enumerate(steps):
            sync(a.device)
            start = clock()
            run_once(step, a, b)
            sync(a.device)
            times[k].append(1000 * (clock() - start))
    return times


def median_ratio(num: list[float], den: list[float]) -> float:
    """Median over repeats of the per-repeat ratio (robust to load shared by both)."""
    return statistics.median(x / y for x, y in zip(num, den))


def peak_mb(step: Step, a: torch.Tensor, b: torch.Tensor, exact: bool = False) -> float:
    """Peak MiB above the starting level during one forward+backward (module docstring); ``exact``: always
    PyTorch's allocator count (the resident-set peak adds a few MiB of page granularity)."""
    def clear() -> None:
        a.grad = b.grad = None

    if a.device.type == "cpu" and memory.RESIDENT_PEAK_WORKS and not exact:
        return memory.peak_resident_bytes(lambda: step(a, b).backward(), setup=clear) / 2**20
    clear()
    return memory.peak_bytes(lambda: step(a, b).backward(), a.device)[1] / 2**20


def ours(name: str, form: str, device: torch.device) -> Step:
    """Our objective's step, paired or on the two-view batch (every objective takes both: the contract test)."""
    obj = OBJECTIVES[name]().to(device)
    if form == "paired":
        return lambda a, b: obj(a, b)

    def two(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        z, labels = two_view(a, b)
        return obj(z, labels=labels)

    return two


def public(name: str, form: str, n: int) -> tuple[str, Step | None] | None:
    """The pytorch-metric-learning / open_clip counterpart, called on the same inputs.

    PML's ``NTXentLoss`` builds a ``[positive pairs, negative pairs]`` matrix; where that would pass
    ``PML_NTXENT_LIMIT_GIB`` the step is ``None`` and the row says it was not run.
    """
    try:
        if name in ("clip", "siglip"):
            from open_clip import loss as oc
        else:
            from pytorch_metric_learning import losses, miners
    except ImportError:
        return None
    if name in ("clip", "siglip"):
        if form != "paired":
            return None
        # As in open_clip's models: learnable log-scale (and bias) parameters, exponentiated per call, so
        # the public loss does the same work as ours, whose scale and bias are parameters too.
        log_scale = torch.nn.Parameter(torch.tensor(math.log(1 / 0.07) if name == "clip" else math.log(10.0)))
        if name == "clip":
            fn = oc.ClipLoss()
            return "open_clip ClipLoss", lambda a, b: fn(F.normalize(a, dim=1), F.normalize(b, dim=1), log_scale.exp())
        fn, bias = oc.SigLipLoss(), torch.nn.Parameter(torch.tensor(-10.0))
        return "open_clip SigLipLoss", lambda a, b: fn(F.normalize(a, dim=1), F.normalize(b, dim=1), log_scale.exp(), bias)
    builders = {
        "infonce": ("PML NTXentLoss", lambda: losses.NTXentLoss(temperature=TEMPERATURE), None),
        "circle": ("PML CircleLoss", losses.CircleLoss, None),
        "multi_similarity": ("PML MultiSimilarityLoss+Miner", losses.MultiSimilarityLoss, miners.MultiSimilarityMiner),
    }
    if name not in builders:
        return None
    if name == "infonce":
        rows = n if form == "paired" else 2 * n
        gib = rows * rows * (rows - (1 if form == "paired" else 2)) * 4 / 2**30
        if gib > PML_NTXENT_LIMIT_GIB:
            return f"PML NTXentLoss (not run: needs ~{gib:.0f} GiB)", None
    label, make_loss, make_miner = builders[name]
    loss_fn, miner = make_loss(), (make_miner() if make_miner else None)

    def call(emb, labels, ref=None, ref_labels=None):
        tuples = None if miner is None else miner(emb, labels, ref, ref_labels)
        return loss_fn(emb, labels, tuples, ref, ref_labels)

    if form == "paired":
        def paired(a, b):
            idx = torch.arange(a.shape[0], device=a.device)
            return call(a, idx, b, idx.clone())  # PML drops the diagonal when ref_labels *is* labels

        return label, paired

    def two(a, b):
        z, labels = two_view(a, b)
        return call(z, labels)

    return label, two


def checked(ref: tuple[str, Step | None] | None, step: Step, a: torch.Tensor, b: torch.Tensor) -> tuple[str, Step | None] | None:
    """Keep a public counterpart only where its loss equals ours on these inputs (else say so, untimed)."""
    if ref is None or ref[1] is None:
        return ref
    with torch.no_grad():
        mine, theirs = float(step(a, b)), float(ref[1](a, b))
    if abs(mine - theirs) > 1e-3 * max(1.0, abs(mine)):
        return f"{ref[0]} (loss {theirs:.4g} vs ours {mine:.4g} in this form: not compared)", None
    return ref


def run(
    ns: list[int],
    dim: int,
    repeats: int,
    large_repeats: int,
    names: list[str],
    device: torch.device,
    clock: Callable[[], float] = time.perf_counter,
) -> list[Row]:
    rows = []
    for n in ns:
        reps = repeats if n < 4096 else large_repeats
        a, b = features(n, dim, device)
        for form, baseline in (("paired", bare), ("two_view", bare_two_view)):
            cases: list[tuple[str, Step, tuple[str, Step | None] | None]] = []
            for name in names:
                step = ours(name, form, device)
                cases.append((name, step, checked(public(name, form, n), step, a, b)))
            same_work = [bare_twice] if any(name in SAME_WORK for name, _, _ in cases) else []
            # The public implementations are timed apart, each against ours: some allocate far more
            # (PML's NTXentLoss builds N^3 tensors), and the step after them would pay for it.
            steps = [baseline] + same_work + [c[1] for c in cases]
            times = iter(interleaved_ms(steps, a, b, reps, clock))
            mems = iter([peak_mb(s, a, b) for s in steps])
            base_t, base_m = next(times), next(mems)
            twice_t = None
            if same_work:
                twice_t, _ = next(times), next(mems)
            rows.append(Row("bare logsumexp", form, n, statistics.median(base_t), base_m, 1.0, 1.0))
            print(_line(rows[-1]), flush=True)
            for name, step, ref in cases:
                t, m = next(times), next(mems)
                row = Row(name, form, n, statistics.median(t), m, median_ratio(t, base_t), m / base_m)
                if ref is not None:
                    row.public = ref[0]
                if ref is not None and ref[1] is not None:
                    ours_t, pub_t = interleaved_ms([step, ref[1]], a, b, reps, clock)
                    row.time_vs_public, row.mem_vs_public = median_ratio(ours_t, pub_t), m / peak_mb(ref[1], a, b)
                if twice_t is not None and name in SAME_WORK:
                    row.time_vs_same_work = median_ratio(t, twice_t)
                rows.append(row)
                print(_line(row), flush=True)
    return rows


@dataclass
class TiledRow:
    objective: str
    n: int
    tile_size: int
    ms: float
    peak_mb: float
    dense_ms: float | None = None
    dense_peak_mb: float | None = None
    time_vs_dense: float | None = None
    mem_vs_dense: float | None = None


def tiled_names() -> list[str]:
    """The registered objectives that take ``tile_size``."""
    return [name for name, cls in OBJECTIVES.items() if cls.tiles]


def features(n: int, dim: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The bench's inputs ``a, b [n, dim]``: rows of norm about 1 (module docstring), seed ``n``."""
    gen = torch.Generator().manual_seed(n)
    scale = dim**-0.5
    a = (scale * torch.randn(n, dim, generator=gen)).to(device).requires_grad_()
    b = (scale * torch.randn(n, dim, generator=gen)).to(device).requires_grad_()
    return a, b


def run_tiled(
    ns: list[int],
    dim: int,
    repeats: int,
    large_repeats: int,
    names: list[str],
    tile_size: int,
    dense_max_gib: float,
    device: torch.device,
    clock: Callable[[], float] = time.perf_counter,
) -> list[TiledRow]:
    """Each tiled objective beside its dense form where that fits (module docstring)."""
    rows = []
    for n in ns:
        a, b = features(n, dim, device)
        for name in names:
            tiled = OBJECTIVES[name](tile_size=tile_size).to(device)
            steps: list[Step] = [lambda x, y, obj=tiled: obj(x, y)]
            fits = DENSE_BYTES_PER_PAIR * n * n / 2**30 <= dense_max_gib
            if fits:
                dense = OBJECTIVES[name]().to(device)
                steps.append(lambda x, y, obj=dense: obj(x, y))
            times = interleaved_ms(steps, a, b, repeats if n < 4096 else large_repeats, clock)
            mems = [peak_mb(step, a, b) for step in steps]
            row = TiledRow(name, n, tile_size, statistics.median(times[0]), mems[0])
            if fits:
                row.dense_ms, row.dense_peak_mb = statistics.median(times[1]), mems[1]
                row.time_vs_dense, row.mem_vs_dense = median_ratio(times[0], times[1]), mems[0] / mems[1]
            rows.append(row)
            print(_tiled_line(row), flush=True)
    return rows


def _tiled_line(r: TiledRow) -> str:
    dense = "not run (does not fit)" if r.dense_ms is None else f"{r.dense_ms:.1f}"
    dense_mb = "" if r.dense_peak_mb is None else f"{r.dense_peak_mb:.1f}"
    return (
        f"| {r.objective} | {r.n} | {r.tile_size} | {r.ms:.1f} | {dense} | {_fmt(r.time_vs_dense)} | "
        f"{r.peak_mb:.1f} | {dense_mb} | {_fmt(r.mem_vs_dense)} |"
    )


def tiled_markdown(rows: list[TiledRow]) -> str:
    head = (
        "| objective | N | tile | tiled ms | dense ms | time / dense | tiled peak MiB | dense peak MiB | mem / dense |\n"
        "|---|---|---|---|---|---|---|---|---|\n"
    )
    return head + "\n".join(_tiled_line(r) for r in rows) + "\n"


def _fmt(x: float | None) -> str:
    """Two decimals; three significant digits below 0.1 (ratios against a much slower public version)."""
    return "" if x is None else f"{x:.2f}" if x >= 0.1 else f"{x:.3g}"


def _line(r: Row) -> str:
    return (
        f"| {r.objective} | {r.form} | {r.n} | {r.ms:.1f} | {r.peak_mb:.1f} | {r.time_vs_bare:.2f} | "
        f"{r.mem_vs_bare:.2f} | {_fmt(r.time_vs_same_work)} | {r.public} | {_fmt(r.time_vs_public)} | "
        f"{_fmt(r.mem_vs_public)} |"
    )


def markdown(rows: list[Row]) -> str:
    head = (
        "| objective | form | N | ms (median) | peak MiB | time / bare | mem / bare | time / same work | public | "
        "time / public | mem / public |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|\n"
    )
    return head + "\n".join(_line(r) for r in rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    from contrasuite.pipelines.bench import compiled_objectives  # it builds on this module

    parser = argparse.ArgumentParser(prog="contrasuite bench objectives", description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", default="", help="comma-separated batch sizes N (default 256,1024,4096; 4096,16384,65536 with --tiled)")
    parser.add_argument("--dim", type=int, default=128, help="feature dimension D")
    parser.add_argument("--repeats", type=int, default=5, help="timed repeats per case (median)")
    parser.add_argument("--large-repeats", type=int, default=3, help="timed repeats when N >= 4096")
    parser.add_argument("--objectives", default="", help="comma-separated registry names (default: all)")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: leave as is)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or auto")
    parser.add_argument("--clock", default="wall", choices=sorted(CLOCKS), help="wall time, or this process's CPU time (CPU only)")
    parser.add_argument("--output", default="", help="write the table here (.md) or rows (.json)")
    parser.add_argument("--tiled", action="store_true", help="tiled objectives beside dense at large N (module docstring)")
    parser.add_argument("--tile-size", type=int, default=512, help="tile size of --tiled")
    parser.add_argument("--dense-max-gib", type=float, default=8.0, help="--tiled: run dense only where its estimated peak fits")
    parser.add_argument("--compile", action="store_true",
                        help="each objective under torch.compile against itself eager (pipelines/bench/compiled_objectives.py); "
                             "default N 1024,4096, --output its JSON record")
    parser.add_argument("--report", action="store_true", help="--compile: render the record at --output into --page; run nothing")
    parser.add_argument("--page", type=Path, default=compiled_objectives.against_peer.PAGE, help="the page --report writes")
    parser.add_argument("--host-allocator", choices=HOST_ALLOCATORS, default="auto",
                        help="where freed memory goes, as run.host_allocator (auto: retained on the CPU, as in training)")
    args = parser.parse_args(argv)
    if args.compile and args.tiled:
        parser.error("--compile and --tiled: choose one")
    if args.report and not args.compile:
        parser.error("--report renders a --compile record: add --compile")
    if args.compile:
        args.output = args.output or str(compiled_objectives.RECORD)
        if args.report:
            if not Path(args.output).is_file():
                parser.error(f"--report: no record at {args.output}")
            compiled_objectives.report(Path(args.output), args.page)
            return 0

    known = tiled_names() if args.tiled else list(OBJECTIVES)
    names = [s for s in args.objectives.split(",") if s] or known
    unknown = sorted(set(names) - set(known))
    if unknown:
        parser.error(f"--objectives: unknown {unknown}; known{' (tiled)' if args.tiled else ''}: {sorted(known)}")
    try:
        default_n = "4096,16384,65536" if args.tiled else "1024,4096" if args.compile else "256,1024,4096"
        ns = [int(s) for s in (args.n or default_n).split(",") if s]
    except ValueError:
        parser.error(f"--n must be comma-separated integers, got {args.n!r}")
    if args.threads:
        torch.set_num_threads(args.threads)
    device_name = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    device = torch.device(device_name)
    allocator = use_host_allocator(args.host_allocator, device)

    print(
        f"# torch {torch.__version__}, {device}, threads={torch.get_num_threads()}, clock={args.clock}, "
        f"host allocator {allocator}, "
        f"{platform.processor() or platform.machine()}"
    )
    if args.clock == "cpu" and device.type != "cpu":
        parser.error("--clock cpu measures host CPU time: use it with --device cpu")
    if args.compile:
        compiled = compiled_objectives.run(ns, args.dim, args.repeats, names, ("paired", "two_view"), device,
                                           CLOCKS[args.clock])
        settings = {"dim": args.dim, "repeats": args.repeats, "device": device.type,
                    "threads": torch.get_num_threads(), "clock": args.clock, "host_allocator": allocator}
        record = compiled_objectives.record(compiled, settings, sys.argv[1:] if argv is None else argv)
        out = Path(args.output)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(record, indent=1) + "\n")
        print(compiled_objectives.section(record))
        return 0
    if args.tiled:
        rows: list = run_tiled(
            ns, args.dim, args.repeats, args.large_repeats, names, args.tile_size, args.dense_max_gib, device, CLOCKS[args.clock]
        )
        table = tiled_markdown(rows)
    else:
        rows = run(ns, args.dim, args.repeats, args.large_repeats, names, device, CLOCKS[args.clock])
        table = markdown(rows)
    if args.output:
        out = Path(args.output)
        out.parent.mkdir(parents=True, exist_ok=True)
        if out.suffix == ".json":
            out.write_text(json.dumps([asdict(r) for r in rows], indent=1))
        else:
            out.write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
