"""``contrasuite bench metric_learning``: our training step against pytorch-metric-learning's own loop (``--against peer``).

Both sides train the same network on the same batches in fp32, in one process, on the same threads:

* ours: the task's ``train_step`` inside the engine's ``Step`` (:class:`StepRunner`), on
  ``configs/metric_learning/<--config>.yaml`` (default ``emoji_multi_similarity``: the reduced emoji
  protocol, blocks 5-15 of EfficientNet-Lite0 + a 128-d head on the cached frozen stem, m-per-class
  batches of 64, our Multi-Similarity loss with its miner, AdamW);
* peer: the hand loop of pytorch-metric-learning's examples, ``optimizer.zero_grad(); emb = model(x);
  pairs = miners.MultiSimilarityMiner(epsilon)(emb, labels); loss = losses.MultiSimilarityLoss(alpha, beta,
  base)(emb, labels, pairs); loss.backward(); optimizer.step()``, on a copy of the same network made
  before either side steps, with an AdamW of the same parameter groups (learning rates, weight decay).

The first step of each side is on the same batch from the same weights: its two losses are the equal-work
check (``loss_check``). Then ``--repeats`` rounds, each timing ``--steps`` steps of one side and then of the
other (the order alternates between rounds, both sides cycle through the same ``--batches`` batches of
epoch 0), so both share whatever load the machine has. The ratio of a round is peer time / our time (above 1:
ours is faster); the headline is the median over rounds, with the smallest and largest. ``--clock cpu``
(default) times this process's CPU time, which another job on the machine disturbs far less than the wall
clock; both clocks are kept in the record.

Levers (``--compile``, ``--fused-adamw``; bench-only, not what the pipeline runs): our network under
``torch.compile`` (CPU inductor; compiled during our first step, which is then the warm-up), and our AdamW's
groups switched to the fused kernel (``fused=True``; the shipped task uses PyTorch's CPU default, the
per-tensor loop). The peer stays as its examples run it. A record with levers names them and is rendered as
its own section.

The record (JSON, ``--output``) is what ``--report`` renders into its section of
``docs/results/bench_pipelines.md``; the page is never typed by hand.

    contrasuite bench metric_learning --against peer --threads 1
    contrasuite bench metric_learning --report
"""

from __future__ import annotations

import argparse
import copy
import os
import platform
import shlex
import statistics
import sys
import tempfile
import time
from itertools import islice
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from contrasuite.pipelines.api import ROOT, StepRunner, load_config, setup_task, write_output

SECTION = "metric_learning"
RECORD = ROOT / "docs" / "results" / "records" / "bench_pipelines" / "metric_learning_peer.json"
PAGE = ROOT / "docs" / "results" / "bench_pipelines.md"
LOSS_TOLERANCE = 1e-4
"""Largest relative difference of the two first-batch losses for the comparison to count as equal work."""
CLOCKS: dict[str, Callable[[], float]] = {"cpu": time.process_time, "wall": time.perf_counter}


def setup(config: str, overrides: Sequence[str], data_root: str | None, run_dir: Path) -> tuple[Any, Any]:
    """The task set up as the trainer does (fp32, CPU) and its loaded config."""
    loaded = load_config(ROOT / "configs" / "metric_learning" / f"{config}.yaml", list(overrides), data_root=data_root)
    task = setup_task(loaded.task_class(), loaded.config, device=torch.device("cpu"), precision="fp32",
                      data_root=Path(loaded.run.data_root or "."), run_dir=run_dir, seed=loaded.run.seed)
    return task, loaded


def peer_loop(task: Any) -> tuple[Callable[[tuple[torch.Tensor, torch.Tensor]], float], str]:
    """pytorch-metric-learning's loop on a copy of the task's network (module docstring) and its description."""
    from pytorch_metric_learning import losses, miners

    terms = [dict(t) for t in task.cfg.objective.terms]
    if len(terms) != 1 or terms[0]["name"] not in ("multi_similarity", "pml_multi_similarity"):
        raise SystemExit(f"--against peer compares the Multi-Similarity loss; this config's terms are {terms}")
    term = terms[0]
    kw = {k: term[k] for k in ("alpha", "beta", "base") if k in term}
    loss_fn, miner = losses.MultiSimilarityLoss(**kw), miners.MultiSimilarityMiner(epsilon=term.get("epsilon", 0.1))
    model = copy.deepcopy(task.train_model)  # before any step: the same weights as ours
    twin = dict(zip(map(id, task.train_model.parameters()), model.parameters()))
    groups = []
    for group in task.optimizer.param_groups:
        params = [twin[id(p)] for p in group["params"] if id(p) in twin]  # the objective's own (none here) are not the net's
        if params:
            groups.append({"params": params, "lr": group["lr"], "weight_decay": group["weight_decay"]})
    optimizer = torch.optim.AdamW(groups)

    def step(batch: tuple[torch.Tensor, torch.Tensor]) -> float:
        data, labels = batch
        model.train()
        optimizer.zero_grad()
        embeddings = model(data)
        indices_tuple = miner(embeddings, labels)
        loss = loss_fn(embeddings, labels, indices_tuple)
        loss.backward()
        optimizer.step()
        return float(loss.detach())

    return step, (f"pytorch-metric-learning {_version('pytorch_metric_learning')}: MultiSimilarityLoss({kw}) + "
                  f"MultiSimilarityMiner(epsilon={term.get('epsilon', 0.1)}), hand loop, AdamW")


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what ``platform`` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _version(module: str) -> str:
    try:
        return __import__(module).__version__
    except (ImportError, AttributeError):
        return "?"


def alternate(sides: dict[str, Callable[[Any], Any]], batches: list, repeats: int, steps: int) -> list[dict[str, Any]]:
    """``repeats`` rounds of ``steps`` steps per side, the order alternating; seconds per step on both clocks."""
    names, rounds, k = list(sides), [], 0
    for r in range(repeats):
        row: dict[str, Any] = {}
        for name in names if r % 2 == 0 else names[::-1]:
            wall, cpu = time.perf_counter(), time.process_time()
            for i in range(steps):
                sides[name](batches[(k + i) % len(batches)])
            row[f"{name}_cpu_s"] = (time.process_time() - cpu) / steps
            row[f"{name}_wall_s"] = (time.perf_counter() - wall) / steps
        k += steps
        rounds.append(row)
    return rounds


def summarize(rounds: list[dict[str, Any]], clock: str, ours: str = "ours", peer: str = "peer") -> dict[str, float]:
    ratios = [r[f"{peer}_{clock}_s"] / r[f"{ours}_{clock}_s"] for r in rounds]
    for r, ratio in zip(rounds, ratios):
        r["ratio"] = ratio
    return {"ratio_median": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios)}


def loss_check(ours: float, peer: float, tolerance: float = LOSS_TOLERANCE) -> dict[str, Any]:
    diff = abs(ours - peer)
    return {"ours": ours, "peer": peer, "abs_diff": diff, "tolerance_rel": tolerance,
            "equal": diff <= tolerance * max(1.0, abs(ours))}


def run(args: argparse.Namespace, argv: Sequence[str]) -> dict[str, Any]:
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as run_dir:
        task, loaded = setup(args.config, args.override, args.data_root, Path(run_dir))
        batches = list(islice(task.batches(0), args.batches))
        ours_runner = StepRunner(task, torch.device("cpu"), "fp32")
        peer_step, peer_desc = peer_loop(task)
        counter = iter(range(10**9))
        levers = []
        if args.fused_adamw:
            for group in task.optimizer.param_groups:
                group.update(fused=True, foreach=False)
            levers.append("fused AdamW")
        if args.compile:
            task.train_model = torch.compile(task.train_model)
            levers.append("torch.compile (CPU inductor) of the network")

        def ours(batch: Any) -> float:
            return float(ours_runner(batch, 0, next(counter))["loss"])

        torch.manual_seed(1)
        first_ours = ours(batches[0])  # the first step of each: same weights, same batch (and a warm-up)
        torch.manual_seed(1)
        first_peer = peer_step(batches[0])
        rounds = alternate({"ours": ours, "peer": peer_step}, batches, args.repeats, args.steps)
    x, y = batches[0]
    record = {
        "section": SECTION + "".join(f"+{k}" for k, on in (("compile", args.compile), ("fused_adamw", args.fused_adamw)) if on),
        "against": "peer", "levers": levers,
        "ours": f"contrasuite metric_learning/{args.config} train_step in the engine's Step (StepRunner), AdamW"
                + (f", with {' and '.join(levers)} (bench-only levers)" if levers else ""),
        "peer": peer_desc, "config": args.config, "overrides": list(args.override),
        "batch": int(x.shape[0]), "input": list(x.shape[1:]), "classes_per_batch": int(y.unique().numel()),
        "distinct_batches": len(batches), "precision": "fp32", "device": "cpu", "threads": torch.get_num_threads(),
        "clock": args.clock, "steps_per_round": args.steps, "repeats": args.repeats,
        "loss_check": loss_check(first_ours, first_peer), "rounds": rounds, **summarize(rounds, args.clock),
        "torch": torch.__version__, "machine": cpu_name(), "cpu_count": os.cpu_count(),
        "load_average_1min": round(os.getloadavg()[0], 2), "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        "command": "contrasuite bench metric_learning " + shlex.join(argv),
    }
    return record


def render(record: dict[str, Any]) -> str:
    """The page section of one record (markdown)."""
    check = record["loss_check"]
    lines = [
        "## metric_learning: our step vs pytorch-metric-learning's loop"
        + (f" (levers: {', '.join(record['levers'])}; not what the pipeline runs)" if record.get("levers") else ""), "",
        f"- ours: {record['ours']}", f"- peer: {record['peer']}",
        f"- same work: the same network (a copy before either steps), batches of {record['batch']} cached stem features "
        f"{record['input']} ({record['classes_per_batch']} classes, real emoji data, config `{record['config']}`), "
        f"{record['distinct_batches']} distinct batches cycled by both; first-batch loss ours {check['ours']:.6f}, "
        f"peer {check['peer']:.6f} (|diff| {check['abs_diff']:.1e}: {'equal' if check['equal'] else 'NOT equal'} "
        f"within {check['tolerance_rel']:g} relative)",
        f"- machine: {record['machine']}, {record['cpu_count']} cores (shared; 1-min load {record['load_average_1min']} at the end), "
        f"torch {record['torch']}, {record['device']}, {record['threads']} thread(s), {record['precision']}, "
        f"{record['clock']} clock, {record['date_utc']} UTC",
        f"- command: `{record['command']}`", "",
        _table(record["rounds"], record["clock"]),
        f"\nRatio (peer / ours, above 1: ours faster): **{record['ratio_median']:.2f}** median, "
        f"{record['ratio_min']:.2f} to {record['ratio_max']:.2f} over {record['repeats']} alternating rounds of "
        f"{record['steps_per_round']} steps.",
        "" if record.get("levers") else
        "\nWhere the time goes (torch.profiler and cProfile of both loops): the network's forward and backward, the same "
        "kernels on both sides, are almost all of the step; AdamW runs PyTorch's CPU default, a per-tensor loop, on both; "
        "ours adds the engine's per-step checks (the global gradient norm, which `clip_grad_norm_` also multiplies "
        "into every gradient, and the norms of the updated weights). The levers section measures what fusing the "
        "optimizer and compiling the network would give.",
    ]
    return "\n".join(lines)


def _table(rounds: list[dict[str, Any]], clock: str, ours: str = "ours", peer: str = "peer") -> str:
    out = [f"| round | ours ms/step ({clock}) | peer ms/step ({clock}) | ours ms/step (wall) | peer ms/step (wall) | peer / ours |",
           "|---|---|---|---|---|---|"]
    for i, r in enumerate(rounds):
        out.append(f"| {i + 1} | {1000 * r[f'{ours}_{clock}_s']:.1f} | {1000 * r[f'{peer}_{clock}_s']:.1f} | "
                   f"{1000 * r[f'{ours}_wall_s']:.1f} | {1000 * r[f'{peer}_wall_s']:.1f} | {r['ratio']:.2f} |")
    return "\n".join(out)


PAGE_HEAD = """# Pipelines against their official code or closest peer (issue 41)

Each section is rendered from a kept record under `docs/results/records/bench_pipelines/` by the bench's
`--report` flag (`contrasuite bench <domain> --report`); no number here is typed by hand. A ratio is the
peer's time per training step over ours, measured in one process on the same data, threads and precision,
the two sides alternating; above 1 means ours is faster.
"""


def write_section(page: Path, name: str, text: str) -> None:
    """Replace (or append) the section between ``<!-- name -->`` markers of ``page``, making the page if missing."""
    start, end = f"<!-- section:{name} -->", f"<!-- /section:{name} -->"
    body = page.read_text() if page.exists() else PAGE_HEAD
    block = f"{start}\n{text.rstrip()}\n{end}"
    if start in body and end in body:
        before, rest = body.split(start, 1)
        body = before + block + rest.split(end, 1)[1]
    elif f"<!-- /section:{name.split('+')[0]} -->" in body:  # a lever's section goes after its base section
        base_end = f"<!-- /section:{name.split('+')[0]} -->"
        head, rest = body.split(base_end, 1)
        body = head + base_end + "\n\n" + block + rest
    else:
        body = body.rstrip() + "\n\n" + block + "\n"
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(body)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="contrasuite bench metric_learning", description=__doc__.splitlines()[0])
    parser.add_argument("--against", choices=("peer",), default="peer", help="peer: pytorch-metric-learning's loop")
    parser.add_argument("--config", default="emoji_multi_similarity", help="a configs/metric_learning/ name")
    parser.add_argument("--override", action="append", default=[], help="a config override (repeatable)")
    parser.add_argument("--data-root", default=os.environ.get("CONTRASUITE_DATA"))
    parser.add_argument("--batches", type=int, default=8, help="distinct batches of epoch 0 both sides cycle through")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per side per round")
    parser.add_argument("--repeats", type=int, default=3, help="alternating rounds")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (0: leave as is)")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="cpu")
    parser.add_argument("--compile", action="store_true", help="lever: our network under torch.compile (bench-only)")
    parser.add_argument("--fused-adamw", action="store_true", help="lever: our AdamW with fused=True (bench-only)")
    parser.add_argument("--output", type=Path, default=RECORD, help="the JSON record")
    parser.add_argument("--report", action="store_true", help="render the record at --output into --page; run nothing")
    parser.add_argument("--page", type=Path, default=PAGE)
    args = parser.parse_args(argv)
    if args.report:
        import json

        record = json.loads(args.output.read_text())
        write_section(args.page, record["section"], render(record))
        print(f"wrote {args.page}")
        return 0
    if args.threads:
        torch.set_num_threads(args.threads)
    record = run(args, argv)
    write_output(args.output, record)
    print(render(record))
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
