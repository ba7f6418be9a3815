"""``contrasuite bench objectives --compile``: each objective under ``torch.compile`` against itself eager.

Issue 41 names ``torch.compile`` (CPU inductor) as a lever worth measuring for the objectives. For each
objective and ``N`` the bench builds our step (:func:`~contrasuite.pipelines.bench.objectives.ours`, the
paired or two-view call on the bench's unit-norm features), compiles a copy with ``torch.compile``
(``dynamic=False``: one graph per shape, as a training run with a fixed batch sees), checks at the first
call of each (objectives with running state, WEINCE's, start from the same state) that the compiled loss
and input gradients equal the eager ones, then times the two back to back in each repeat
(:func:`~contrasuite.pipelines.bench.objectives.interleaved_ms`). ``eager / compiled`` above 1: the
compiled objective is faster. The first compiled call's wall time (tracing, inductor's code generation and
the C++ build; the machine's compile cache left as it is), the graph breaks dynamo counted and the graphs
it compiled over all calls (more than the breaks make: recompiles, when a guard fails between calls) are
kept beside it. A lever, not what the pipelines run: no shipped config compiles its objective.

The record (``--output``, JSON) holds the rows and the machine; ``--report`` renders it into its section of
``docs/results/bench_pipelines.md``.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from contrasuite.pipelines.bench import against_peer
from contrasuite.pipelines.bench.objectives import Step, features, interleaved_ms, ours

SECTION = "objectives+compile"
"""Its section of the page: a variant (``+compile``) of the ``objectives`` bench (``contrasuite bench`` names)."""
RECORD = against_peer.RECORDS / "objectives_compile.json"
PRECISION = "fp32"
"""The bench's only precision: :func:`~contrasuite.pipelines.bench.objectives.features` are fp32."""
TOLERANCE = 1e-4
"""Relative difference of loss and input gradients (to the largest eager gradient) allowed between the
compiled and the eager objective: inductor fuses and reorders fp32 reductions."""


@dataclass
class CompiledRow:
    objective: str
    form: str
    n: int
    eager_ms: float
    compiled_ms: float
    ratio: float
    """Median over repeats of eager / compiled time."""
    ratio_min: float
    ratio_max: float
    compile_s: float
    graph_breaks: int
    graphs: int
    """Graphs dynamo compiled over the first call and the timed ones."""
    loss_rel_diff: float
    grad_rel_diff: float

    @property
    def equal(self) -> bool:
        return max(self.loss_rel_diff, self.grad_rel_diff) <= TOLERANCE


def loss_and_grads(step: Step, a: torch.Tensor, b: torch.Tensor) -> tuple[float, torch.Tensor]:
    """``step``'s loss and the gradients of both inputs, concatenated."""
    a.grad = b.grad = None
    loss = step(a, b)
    loss.backward()
    return float(loss.detach()), torch.cat([a.grad.flatten(), b.grad.flatten()])


def compare(name: str, form: str, n: int, dim: int, repeats: int, device: torch.device,
            clock: Callable[[], float]) -> CompiledRow:
    """One objective at one ``N``: compile, check against eager, time both (module docstring)."""
    import torch._dynamo

    torch._dynamo.reset()  # every objective compiles from scratch, within dynamo's recompile limit
    torch._dynamo.utils.counters.clear()
    a, b = features(n, dim, device)
    eager = ours(name, form, device)
    compiled = torch.compile(ours(name, form, device), dynamic=False)
    eager_loss, eager_grad = loss_and_grads(eager, a, b)  # both at their first call: objectives with running
    start = time.perf_counter()                           # state (WEINCE's) are compared from the same state
    compiled_loss, compiled_grad = loss_and_grads(compiled, a, b)
    compile_s = time.perf_counter() - start
    breaks = sum(torch._dynamo.utils.counters["graph_break"].values())
    loss_rel = abs(compiled_loss - eager_loss) / max(abs(eager_loss), 1e-12)
    grad_rel = float((compiled_grad - eager_grad).abs().max() / eager_grad.abs().max().clamp_min(1e-12))
    eager_t, compiled_t = interleaved_ms([eager, compiled], a, b, repeats, clock)
    ratios = [e / c for e, c in zip(eager_t, compiled_t)]
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    return CompiledRow(name, form, n, statistics.median(eager_t), statistics.median(compiled_t),
                       statistics.median(ratios), min(ratios), max(ratios), round(compile_s, 2), breaks, graphs,
                       loss_rel, grad_rel)


def run(ns: Sequence[int], dim: int, repeats: int, names: Sequence[str], forms: Sequence[str],
        device: torch.device, clock: Callable[[], float]) -> list[CompiledRow]:
    rows = []
    for n in ns:
        for form in forms:
            for name in names:
                rows.append(compare(name, form, n, dim, repeats, device, clock))
                print(row_line(rows[-1]), flush=True)
    return rows


def record(rows: list[CompiledRow], settings: dict[str, Any], argv: Sequence[str]) -> dict[str, Any]:
    """The JSON record: the section, the settings, the rows and :func:`against_peer.machine`."""
    return {"section": SECTION, **settings, "rows": [asdict(r) for r in rows],
            **against_peer.machine("objectives", argv)}


TABLE_HEAD = ("| objective | form | N | eager ms | compiled ms | eager / compiled (median) | min | max | first call s | "
              "graph breaks | graphs compiled | same loss and gradients |\n|---|---|---|---|---|---|---|---|---|---|---|---|")


def row_line(r: CompiledRow) -> str:
    check = "yes" if r.equal else f"NO (loss {r.loss_rel_diff:.1e}, gradients {r.grad_rel_diff:.1e} relative)"
    return (f"| {r.objective} | {r.form} | {r.n} | {r.eager_ms:.2f} | {r.compiled_ms:.2f} | **{r.ratio:.2f}** | "
            f"{r.ratio_min:.2f} | {r.ratio_max:.2f} | {r.compile_s:.1f} | {r.graph_breaks} | {r.graphs} | {check} |")


def named(rows: list[CompiledRow]) -> str:
    """``circle (paired, 1024), ...``."""
    return ", ".join(f"{r.objective} ({r.form}, {r.n})" for r in rows)


HOST_MEMORY = {
    "retain": "freed memory retained between calls, as in a training run on the CPU (`run.host_allocator`)",
    "system": ("glibc's defaults, every large temporary mapped and faulted in afresh (a training run on the CPU "
               "retains freed memory instead, `run.host_allocator`; eager objectives, with more temporaries, gain more)"),
}
"""The record's ``host_allocator`` in words (records made before it ran on glibc's defaults)."""


def section(rec: dict[str, Any]) -> str:
    """The page's section of the record ``rec``."""
    rows = [CompiledRow(**r) for r in rec["rows"]]
    faster = [r for r in rows if r.ratio_min > 1]
    slower = [r for r in rows if r.ratio_max < 1]
    return "\n".join([
        "## objectives: torch.compile (CPU inductor) against eager (a lever; not what the pipelines run)",
        "",
        f"- same work: each registered objective with its registry defaults, on the bench's inputs (`a, b [N, "
        f"{rec['dim']}]`, rows of norm about 1, seed N; `contrasuite bench objectives`), forward and backward; the "
        f"compiled copy (`torch.compile(step, dynamic=False)`) checked against eager on the same inputs before timing "
        f"(loss and input gradients within {TOLERANCE:g} relative)",
        *against_peer.machine_lines({"precision": PRECISION, **rec}),
        f"- host memory: {HOST_MEMORY[rec.get('host_allocator', 'system')]}",
        "",
        f"{rec['repeats']} repeats per row, eager and compiled back to back in each (after a warm-up each); "
        f"the ratio is the median of the per-repeat ratios, min and max beside it. First call: the wall time of "
        f"the first compiled forward and backward (tracing, code generation and the C++ build).",
        "",
        TABLE_HEAD,
        *(row_line(r) for r in rows),
        "",
        f"Compiled faster in every repeat: {len(faster)} of {len(rows)} rows"
        + (f" ({named(faster)})" if faster else "")
        + f"; slower in every repeat: {len(slower)}"
        + (f" ({named(slower)})" if slower else "") + ".",
    ])


def report(path: Path, page: Path) -> None:
    """Render the record at ``path`` into its section of ``page``."""
    against_peer.write_section(page, SECTION, section(json.loads(path.read_text())))
