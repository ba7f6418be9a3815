"""``contrasuite bench gpu``: everything only a GPU can show, in one go, into one JSON and one markdown page.

On one device (``--device cuda``, default):

1. a one-process NCCL (gloo on the CPU) process group: init time and an all-reduce that must equal 1;
2. the objectives bench (:mod:`contrasuite.pipelines.bench.objectives`) in fp32 and under bf16 autocast:
   dense at ``--dense-n`` and dense beside tiled at ``--n`` (default up to N = 65,536);
3. ``--steps`` training steps (default 20) of every full-scale config (``contrasuite smoke``'s list) at its
   own batch on its own data (``--subset``: the smoke subsets and batches), in bf16 and in fp32: steps per second after two warm-up steps, and peak memory of the last
   step (``torch.cuda.max_memory_allocated`` above the start).

The page says what device measured it, so its numbers go into ``docs/results`` marked as measured on that
GPU. ``--device cpu`` with tiny settings is how CI checks that the command runs through.
"""

from __future__ import annotations

import argparse
import functools
import json
import platform
import socket
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Sequence

import torch
import torch.distributed as dist

from contrasuite.core.task.precision import autocast_for
from contrasuite.pipelines.bench import objectives as objective_bench
from contrasuite.pipelines.config import find_config
from contrasuite.pipelines.run_dir import git_commit
from contrasuite.pipelines.smoke import full_scale_configs, measure

PRECISIONS = ("bf16", "fp32")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (for a one-process group)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def process_group_check(device: torch.device) -> dict[str, Any]:
    """Init a one-process group (nccl on CUDA, gloo on the CPU), all-reduce a one, tear it down."""
    backend = "nccl" if device.type == "cuda" else "gloo"
    started = time.perf_counter()
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    try:
        init_seconds = time.perf_counter() - started
        value = torch.ones(1, device=device)
        dist.all_reduce(value)
        return {"backend": backend, "init_seconds": init_seconds, "all_reduce_ok": float(value.item()) == 1.0}
    finally:
        dist.destroy_process_group()


def objective_rows(device: torch.device, dense_ns: list[int], tiled_ns: list[int], dim: int, repeats: int,
                   tile_size: int) -> list[dict[str, Any]]:
    """Dense and tiled objective rows in fp32 and under bf16 autocast, each tagged with its precision."""
    rows: list[dict[str, Any]] = []
    for precision in PRECISIONS:
        with autocast_for(precision, device):
            dense = objective_bench.run(dense_ns, dim, repeats, repeats, list(objective_bench.OBJECTIVES), device) if dense_ns else []
            tiled = objective_bench.run_tiled(tiled_ns, dim, repeats, repeats, objective_bench.tiled_names(), tile_size,
                                              8.0, device) if tiled_ns else []
        rows += [{"kind": "dense", "precision": precision, **asdict(r)} for r in dense]
        rows += [{"kind": "tiled", "precision": precision, **asdict(r)} for r in tiled]
    return rows


def pipeline_rows(configs: list[Path], device: str, steps: int, subset: bool, data_root: str | None) -> list[dict[str, Any]]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="contrasuite-bench-gpu-") as tmp:
        for path in configs:
            for precision in PRECISIONS:
                r = measure(path, Path(tmp), data_root=data_root, device=device, precision=precision, steps=steps,
                            smoke_batch=subset, subset=subset, evaluate=False)
                rows.append(asdict(r))
                rate = f"{r.steps_per_second:.2f} steps/s" if r.steps_per_second else "-"
                print(f"{r.state:4s} {r.config} {precision}: {rate}, peak {r.step_peak_bytes / 2**30:.2f} GiB {r.note}",
                      flush=True)
    return rows


def markdown(result: dict[str, Any]) -> str:
    env, group = result["environment"], result["process_group"]
    lines = [f"# `contrasuite bench gpu` on {env['device_name']}", "",
             f"Measured on {env['device_name']} ({env['device']}), torch {env['torch']}, CUDA {env['cuda']}, "
             f"{env['date']}, code {env.get('git_commit') or 'not recorded'}. Command: `{result['command']}`.", "",
             f"Process group: {group['backend']}, init {group['init_seconds']:.2f} s, all-reduce "
             f"{'ok' if group['all_reduce_ok'] else 'WRONG'}.", ""]
    if result["objectives"]:
        lines += ["## Objectives (forward + backward)", "",
                  "| kind | precision | objective | form | N | ms | peak MB | time / baseline |", "|---|---|---|---|---|---|---|---|"]
    for r in result["objectives"]:
        ratio = r.get("time_vs_bare") or r.get("time_vs_dense")
        lines.append(f"| {r['kind']} | {r['precision']} | {r['objective']} | {r.get('form', '-')} | {r['n']} | "
                     f"{r['ms']:.2f} | {r.get('peak_mb') or 0:.0f} | {f'{ratio:.2f}' if ratio else '-'} |")
    if result["pipelines"]:
        lines += [""] * bool(result["objectives"]) + [f"## Pipelines: {result['steps']} steps at each config's own batch", "",
                  "| config | precision | state | steps/s | peak GiB (last step) | params (M) | note |", "|---|---|---|---|---|---|---|"]
    for r in result["pipelines"]:
        rate = f"{r['steps_per_second']:.2f}" if r["steps_per_second"] else "-"
        lines.append(f"| {r['config']} | {r['precision'] or '-'} | {r['state']} | {rate} | "
                     f"{r['step_peak_bytes'] / 2**30:.2f} | {r['params'] / 1e6:.2f} | {r['note'][:120]} |")
    return "\n".join(lines) + "\n"


def write_result(result: dict[str, Any], out_dir: Path) -> None:
    """``bench_gpu.json`` and its page ``bench_gpu.md`` in ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "bench_gpu.json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    (out_dir / "bench_gpu.md").write_text(markdown(result))


def page(results: Sequence[dict[str, Any]]) -> str:
    """One page of several kept results (``--report``), in the order given."""
    return "\n---\n\n".join(markdown(r) for r in results)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="contrasuite bench gpu", description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu (to check the command itself)")
    parser.add_argument("--dense-n", default="256,1024,4096", help="dense objective batch sizes ('' to skip)")
    parser.add_argument("--n", default="4096,16384,65536", help="tiled (and dense where it fits) batch sizes ('' to skip)")
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--tile-size", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=20, help="training steps per config and precision")
    parser.add_argument("--configs", nargs="*", default=None, help="configs (default: every full-scale config)")
    parser.add_argument("--subset", action="store_true", help="the tasks' smoke subsets and batches (a quick check)")
    parser.add_argument("--data-root", default=None)
    parser.add_argument("--out-dir", type=Path, default=Path("bench-gpu"))
    parser.add_argument("--report", type=Path, nargs="+", default=None,
                        help="kept bench_gpu.json files: render them into --page, run nothing")
    parser.add_argument("--page", type=Path, default=Path("docs/results/bench_gpu.md"))
    args = parser.parse_args(argv)
    if args.report:
        args.page.write_text(page([json.loads(f.read_text()) for f in args.report]))
        print(f"wrote {args.page}")
        return 0
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("contrasuite bench gpu: no CUDA device here (use --device cpu to check the command)", file=sys.stderr)
        return 2
    if args.steps < 3:
        parser.error("--steps must be >= 3 (two warm-up steps, then the measured ones)")
    ints = lambda text: [int(x) for x in text.split(",") if x]  # noqa: E731
    configs = [find_config(c) for c in args.configs] if args.configs is not None else full_scale_configs()
    result: dict[str, Any] = {
        "command": "contrasuite bench gpu " + " ".join(sys.argv[3:] if argv is None else argv),
        "environment": {"device": str(device), "torch": torch.__version__, "cuda": torch.version.cuda,
                        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
                        "date": time.strftime("%Y-%m-%d"), "git_commit": git_commit()},
        "process_group": process_group_check(device), "objectives": [], "steps": args.steps, "pipelines": [],
    }
    save = functools.partial(write_result, result, args.out_dir)  # after each part: a timed-out run keeps what is done
    result["objectives"] = objective_rows(device, ints(args.dense_n), ints(args.n), args.dim, args.repeats, args.tile_size)
    save()
    result["pipelines"] = pipeline_rows(configs, args.device, args.steps, args.subset, args.data_root)
    save()
    print(f"wrote {args.out_dir / 'bench_gpu.json'} and {args.out_dir / 'bench_gpu.md'}")
    return 0 if result["process_group"]["all_reduce_ok"] and all(r["state"] != "FAIL" for r in result["pipelines"]) else 1
