"""``contrasuite bench graph``: AdaMEOW's learned pair weights, memory and time per epoch.

On ``configs/graph/adameow_<dataset>.yaml`` (full batch: every target node at once), it measures

* the bytes autograd keeps for the ``N x N`` pair weights (``saved_tensors_hooks`` around one call of
  the weight MLP, which runs on row chunks with a hand-written backward,
  ``core/negatives/learned_weights.py``), beside the naive form's ``N x N x d`` input and ``N x N x
  hidden`` activation;
* the median seconds of ``--epochs`` full training steps (the task's ``train_step`` with the engine's
  ``Step``) and the process's peak resident memory.

Output: one JSON object on stdout (and ``--json FILE``). Load average and thread count go with it, since
a shared machine makes the time slower.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import time
from pathlib import Path
from typing import Any, Sequence

import torch

from contrasuite.domains.graph.task import GraphTask
from contrasuite.pipelines.api import ROOT, StepRunner, load_config, setup_task

DATASETS = ("acm", "dblp", "imdb")


def pair_weight_memory(dataset: str, data_root: str | None, epochs: int = 3) -> dict[str, Any]:
    """The record described in the module docstring, for ``adameow_<dataset>.yaml``."""
    loaded = load_config(ROOT / "configs" / "graph" / f"adameow_{dataset}.yaml", data_root=data_root)
    device = torch.device("cpu")
    task = setup_task(GraphTask(), loaded.config, device=device, data_root=loaded.run.data_root)
    saved = [0]

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved[0] += t.numel() * t.element_size()
        return t

    task.model.train()
    coarse, fine = task.views(0)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        weights = task.weigher(fine, coarse)
    n, d = fine.shape
    hidden = task.weigher.first.out_features
    del weights, coarse, fine
    train_step = StepRunner(task, device, "fp32")
    times = []
    for epoch in range(epochs):  # a batch is an epoch: the full graph
        started = time.perf_counter()
        train_step(epoch, epoch, epoch)
        times.append(time.perf_counter() - started)
    return {
        "dataset": dataset, "nodes": n, "dim": d, "hidden": hidden,
        "weights_saved_for_backward_MiB": round(saved[0] / 2**20, 1),
        "naive_pair_input_MiB": round(n * n * d * 4 / 2**20, 1),
        "naive_hidden_MiB": round(n * n * hidden * 4 / 2**20, 1),
        "peak_rss_MiB": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "seconds_per_epoch": round(sorted(times)[len(times) // 2], 2),
        "threads": torch.get_num_threads(), "cpu": platform.processor() or platform.machine(),
        "load_average_1min": round(os.getloadavg()[0], 1), "cpu_count": os.cpu_count(),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="contrasuite bench graph", description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", choices=DATASETS, default="dblp")
    parser.add_argument("--epochs", type=int, default=3, help="timed training steps (the median is reported)")
    parser.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: leave as is)")
    parser.add_argument("--data-root", default=None)
    parser.add_argument("--json", type=Path, default=None, help="also write the record to this file")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    record = pair_weight_memory(args.dataset, args.data_root, args.epochs)
    print(json.dumps(record), flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(record, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
