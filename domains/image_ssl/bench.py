"""``contrasuite bench image_ssl``: our SimCLR training step against lightly's (``--against peer``).

Both sides train the same CIFAR ResNet-18 (3x3 stem, no max-pool) with SimCLR's projection head on the same
two-view batches, in fp32, in one process, on the same threads:

* ours: the task's ``train_step`` inside the engine's ``Step`` (:class:`StepRunner`) on
  ``configs/image_ssl/<--config>.yaml`` (default ``infonce``: batch 256 at 32 px, projection 512-512-128,
  InfoNCE at temperature 0.5 on the 2N two-view batch, SGD with momentum, weight decay and the warm-up/cosine
  schedule) with ``run.precision=fp32``;
* peer: lightly's ``NTXentLoss(temperature)`` and its ``ProjectionHead`` in a plain loop, ``z0, z1 =
  model(cat(x0, x1)).chunk(2); loss = criterion(z0, z1); loss.backward(); optimizer.step()``, on a copy of the
  same encoder and head weights made before either side steps, with an SGD of the same settings and the same
  schedule. The head is lightly's ``ProjectionHead`` built with SimCLR v1's blocks, ``Linear(512, 512) -> BN ->
  ReLU -> Linear(512, 128)`` (ours); lightly's ``SimCLRProjectionHead`` adds a BatchNorm after the last layer,
  which would be other work and another loss. Both views go through the network as one batch of 2N, as ours
  does (lightly's example calls the model once per view, which gives BatchNorm other statistics and so another
  loss).

The peer's views are made by our task's augmentation of the same batch (same seed), inside its step as in
ours, so both steps do the same data work. The first step of each side, from the same weights on the same
views, gives the equal-work check (``loss_check``). Then ``--repeats`` rounds of ``--steps`` steps per side,
the order alternating between rounds; a round's ratio is peer time / our time (above 1: ours is faster),
the headline the median over rounds with the smallest and largest. ``--clock cpu`` (default) is this
process's CPU time; both clocks are kept in the record (``--output``), which ``--report`` renders into its
section of ``docs/results/bench_pipelines.md``.

Levers (bench-only, not what the pipeline runs; the peer stays as lightly's examples run it):
``--channels-last`` (our network's weights in channels-last memory format), ``--fused-sgd`` (our SGD groups
switched to ``fused=True``; the shipped task uses PyTorch's CPU default, the per-tensor loop) and
``--compile`` (our network under ``torch.compile``, CPU inductor, compiled during our first step). A record
with levers names them and is rendered as its own section.

lightly is installed with ``pip install --no-deps lightly``: its ``hydra-core`` requirement would downgrade
omegaconf, the project's config library, and the loss and heads import neither hydra nor lightning.

    contrasuite bench image_ssl --against peer --threads 1
    contrasuite bench image_ssl --report
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
from torch import nn

from contrasuite.pipelines.api import ROOT, StepRunner, load_config, setup_task, write_output

SECTION = "image_ssl"
RECORD = ROOT / "docs" / "results" / "records" / "bench_pipelines" / "image_ssl_peer.json"
PAGE = ROOT / "docs" / "results" / "bench_pipelines.md"
LOSS_TOLERANCE = 1e-4
"""Largest relative difference of the two first-step losses for the comparison to count as equal work."""
CLOCKS: dict[str, Callable[[], float]] = {"cpu": time.process_time, "wall": time.perf_counter}


class LightlySimCLR(nn.Module):
    """Backbone + lightly's projection head: ``forward(x) -> z`` (lightly's SimCLR model layout)."""

    def __init__(self, backbone: nn.Module, head: nn.Module) -> None:
        super().__init__()
        self.backbone, self.projection_head = backbone, head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.projection_head(self.backbone(x).flatten(start_dim=1))


def peer_loop(task: Any) -> tuple[Callable[[Any], float], str]:
    """lightly's loop on a copy of the task's network (module docstring) and its description."""
    import lightly
    from lightly.loss import NTXentLoss
    from lightly.models.modules.heads import ProjectionHead

    cfg = task.cfg
    terms = [dict(t) for t in cfg.objective.terms]
    if cfg.objective.views != "two_view" or len(terms) != 1 or terms[0]["name"] != "infonce" or task.key_model is not None:
        raise SystemExit(f"--against peer compares SimCLR's two-view InfoNCE; this config's terms are {terms}")
    temperature = terms[0].get("temperature", 0.5)
    ours_head = task.model.head.net
    first, bn, last = ours_head[0], ours_head[1], ours_head[3]
    head = ProjectionHead([(first.in_features, first.out_features, nn.BatchNorm1d(bn.num_features), nn.ReLU()),
                           (last.in_features, last.out_features, None, None, last.bias is not None)])
    head.load_state_dict(dict(zip(head.state_dict(), ours_head.state_dict().values())))  # same layers, same order
    model = LightlySimCLR(copy.deepcopy(task.model.encoder), head).to(task.ctx.device)
    criterion = NTXentLoss(temperature=temperature)
    o = cfg.optim
    if o.name != "sgd":
        raise SystemExit(f"--against peer mirrors an SGD config; this one has config.optim.name={o.name!r}")
    optimizer = torch.optim.SGD(model.parameters(), lr=o.lr, momentum=o.momentum, weight_decay=o.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, task.scheduler.lr_lambdas[0])

    def step(batch: Any) -> float:
        x0, x1 = task._views(batch)  # the same augmentation of the same images as ours, in the step as ours
        model.train()
        z0, z1 = model(torch.cat([x0, x1])).chunk(2)
        loss = criterion(z0, z1)
        loss.backward()
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        return float(loss.detach())

    return step, (f"lightly {lightly.__version__}: NTXentLoss(temperature={temperature:g}) + ProjectionHead"
                  f"({first.in_features}-{first.out_features}-{last.out_features}, BN, ReLU), plain loop, SGD")


def alternate(sides: dict[str, Callable[[Any], Any]], batches: list, repeats: int, steps: int) -> list[dict[str, Any]]:
    """``repeats`` rounds of ``steps`` steps per side, the order alternating; seconds per step on both clocks."""
    names, rounds = list(sides), []
    for r in range(repeats):
        row: dict[str, Any] = {}
        for name in names if r % 2 == 0 else names[::-1]:
            wall, cpu = time.perf_counter(), time.process_time()
            for i in range(steps):
                sides[name](batches[(r * steps + i) % len(batches)])
            row[f"{name}_cpu_s"] = (time.process_time() - cpu) / steps
            row[f"{name}_wall_s"] = (time.perf_counter() - wall) / steps
        rounds.append(row)
    return rounds


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def run(args: argparse.Namespace, argv: Sequence[str]) -> dict[str, Any]:
    overrides = ["run.precision=fp32", f"config.batch_size={args.batch}", f"config.data.train_subset={args.subset}",
                 *args.override]
    loaded = load_config(ROOT / "configs" / "image_ssl" / f"{args.config}.yaml", overrides, data_root=args.data_root)
    device = torch.device("cpu")
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as run_dir:
        task = setup_task(loaded.task_class(), loaded.config, device=device, precision="fp32",
                          data_root=Path(loaded.run.data_root or "."), run_dir=Path(run_dir), seed=loaded.run.seed)
        batches = [b for _, b in zip(range(args.batches), task.batches(0))]
        peer_step, peer_desc = peer_loop(task)  # before our first step: the same weights
        runner, counter = StepRunner(task, device, "fp32"), iter(range(10**9))
        levers = []
        if args.channels_last:
            task.model.to(memory_format=torch.channels_last)
            levers.append("channels-last weights")
        if args.fused_sgd:
            for group in task.optimizer.param_groups:
                group.update(fused=True, foreach=False)
            levers.append("fused SGD")
        if args.compile:
            task.train_model = torch.compile(task.train_model)
            levers.append("torch.compile (CPU inductor) of the network")

        def ours(batch: Any) -> float:
            return float(runner(batch, 0, next(counter))["loss"])

        first_ours, first_peer = ours(batches[0]), peer_step(batches[0])  # also each side's warm-up
        rounds = alternate({"ours": ours, "peer": peer_step}, batches, args.repeats, args.steps)
    ratios = [r[f"peer_{args.clock}_s"] / r[f"ours_{args.clock}_s"] for r in rounds]
    for r, ratio in zip(rounds, ratios):
        r["ratio"] = ratio
    diff = abs(first_ours - first_peer)
    m = task.cfg.model
    flags = (("channels_last", args.channels_last), ("fused_sgd", args.fused_sgd), ("compile", args.compile))
    return {
        "section": SECTION + "".join(f"+{k}" for k, on in flags if on), "against": "peer", "levers": levers,
        "ours": f"contrasuite image_ssl/{args.config} (run.precision=fp32) train_step in the engine's Step (StepRunner)"
                + (f", with {' and '.join(levers)} (bench-only levers)" if levers else ""),
        "peer": peer_desc, "config": args.config, "overrides": overrides, "encoder": m.encoder,
        "head": [m.proj_hidden, m.proj_dim], "batch": int(task.cfg.batch_size), "image_size": int(task.cfg.data.image_size),
        "data": f"{task.data_source}, {len(task.train_images)}-image training subset",
        "distinct_batches": len(batches), "precision": "fp32", "device": "cpu", "threads": torch.get_num_threads(),
        "clock": args.clock, "steps_per_round": args.steps, "repeats": args.repeats,
        "loss_check": {"ours": first_ours, "peer": first_peer, "abs_diff": diff, "tolerance_rel": LOSS_TOLERANCE,
                       "equal": diff <= LOSS_TOLERANCE * max(1.0, abs(first_ours))},
        "rounds": rounds, "ratio_median": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios),
        "torch": torch.__version__, "machine": cpu_name(), "cpu_count": os.cpu_count(),
        "load_average_1min": round(os.getloadavg()[0], 2), "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        "command": "contrasuite bench image_ssl " + shlex.join(argv),
    }


def render(record: dict[str, Any]) -> str:
    """The page section of one record (markdown)."""
    check, clock = record["loss_check"], record["clock"]
    lines = [
        "## image_ssl: our SimCLR step vs lightly"
        + (f" (levers: {', '.join(record['levers'])}; not what the pipeline runs)" if record.get("levers") else ""), "",
        f"- ours: {record['ours']}", f"- peer: {record['peer']}",
        f"- same work: {record['encoder']} with a {record['head'][0]}-{record['head'][1]} projection head (a copy of "
        f"our weights before either steps), batch {record['batch']} (two views: {2 * record['batch']} images of "
        f"{record['image_size']} px per step), {record['data']}, {record['distinct_batches']} distinct batches, "
        f"our augmentation inside both steps; first-step loss ours {check['ours']:.6f}, peer {check['peer']:.6f} "
        f"(|diff| {check['abs_diff']:.1e}: {'equal' if check['equal'] else 'NOT equal'} within "
        f"{check['tolerance_rel']:g} relative)",
        f"- machine: {record['machine']}, {record['cpu_count']} cores (shared; 1-min load {record['load_average_1min']} "
        f"at the end), torch {record['torch']}, {record['device']}, {record['threads']} thread(s), {record['precision']}, "
        f"{clock} clock, {record['date_utc']} UTC",
        f"- command: `{record['command']}`", "",
        f"| round | ours s/step ({clock}) | peer s/step ({clock}) | ours s/step (wall) | peer s/step (wall) | peer / ours |",
        "|---|---|---|---|---|---|",
    ]
    for i, r in enumerate(record["rounds"]):
        lines.append(f"| {i + 1} | {r[f'ours_{clock}_s']:.2f} | {r[f'peer_{clock}_s']:.2f} | {r['ours_wall_s']:.2f} | "
                     f"{r['peer_wall_s']:.2f} | {r['ratio']:.2f} |")
    lines.append(f"\nRatio (peer / ours, above 1: ours faster): **{record['ratio_median']:.2f}** median, "
                 f"{record['ratio_min']:.2f} to {record['ratio_max']:.2f} over {record['repeats']} alternating rounds of "
                 f"{record['steps_per_round']} step(s).")
    return "\n".join(lines)


PAGE_HEAD = """# Pipelines against their official code or closest peer (issue 41)

Each section is rendered from a kept record under `docs/results/records/bench_pipelines/` by the bench's
`--report` flag (`contrasuite bench <domain> --report`); no number here is typed by hand. A ratio is the
peer's time per training step over ours, measured in one process on the same data, threads and precision,
the two sides alternating; above 1 means ours is faster.
"""


def write_section(page: Path, name: str, text: str) -> None:
    """Replace (or append) the section between ``<!-- section:name -->`` markers of ``page`` (made if missing)."""
    start, end = f"<!-- section:{name} -->", f"<!-- /section:{name} -->"
    body = page.read_text() if page.exists() else PAGE_HEAD
    block = f"{start}\n{text.rstrip()}\n{end}"
    if start in body and end in body:
        head, rest = body.split(start, 1)
        body = head + block + rest.split(end, 1)[1]
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
    parser = argparse.ArgumentParser(prog="contrasuite bench image_ssl", description=__doc__.splitlines()[0])
    parser.add_argument("--against", choices=("peer",), default="peer", help="peer: lightly's SimCLR loop")
    parser.add_argument("--config", default="infonce", help="a configs/image_ssl/ name (run.precision=fp32 is set)")
    parser.add_argument("--batch", type=int, default=256, help="config.batch_size")
    parser.add_argument("--subset", type=int, default=2560, help="config.data.train_subset (images loaded)")
    parser.add_argument("--override", action="append", default=[], help="a config override (repeatable)")
    parser.add_argument("--data-root", default=os.environ.get("CONTRASUITE_DATA"))
    parser.add_argument("--batches", type=int, default=4, help="distinct batches both sides cycle through")
    parser.add_argument("--steps", type=int, default=1, help="timed steps per side per round")
    parser.add_argument("--repeats", type=int, default=3, help="alternating rounds")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (0: leave as is)")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="cpu")
    parser.add_argument("--channels-last", action="store_true", help="lever: our weights channels-last (bench-only)")
    parser.add_argument("--fused-sgd", action="store_true", help="lever: our SGD with fused=True (bench-only)")
    parser.add_argument("--compile", action="store_true", help="lever: our network under torch.compile (bench-only)")
    parser.add_argument("--output", type=Path, default=RECORD, help="the JSON record")
    parser.add_argument("--report", action="store_true", help="render the record at --output into --page; run nothing")
    parser.add_argument("--page", type=Path, default=PAGE)
    args = parser.parse_args(argv)
    if args.report:
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
