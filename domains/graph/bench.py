"""``contrasuite bench graph``: AdaMEOW's pair weights, memory and time per epoch; --against official: MEOW's epoch against the official code.

On ``configs/graph/adameow_<dataset>.yaml`` (full batch: every target node at once), it measures

* the bytes autograd keeps for the ``N x N`` pair weights (``saved_tensors_hooks`` around one call of
  the weight MLP, which runs on row chunks with a hand-written backward,
  ``core/negatives/learned_weights.py``), beside the naive form's ``N x N x d`` input and ``N x N x
  hidden`` activation;
* the median seconds of ``--epochs`` full training steps (the task's ``train_step`` with the engine's
  ``Step``) and the process's peak resident memory.

Output: one JSON object on stdout (and ``--json FILE``). Load average and thread count go with it, since
a shared machine makes the time slower.

``--against official`` (issue 41): our MEOW epoch against the official code's (github.com/jianxiangyu/MEOW,
folder ``code_meow``, with the CPU patch of ``docs/results/records/official/meow/``), in one process, on the
same threads, in fp32, alternating rounds (``pipelines/bench/against_peer.py``):

* ours: ``configs/graph/meow_<dataset>.yaml``'s ``train_step`` in the engine's ``Step`` (one full-batch
  step is one epoch);
* official: the folder given by ``--official`` (default ``/tmp/official/meow/code_meow``; the bench says so
  in one line and stops when it is absent) imported as its ``main.py`` sets it up (seeds, ``load_data``,
  ``pathsim``, the masks drawn once, ``MEOW``, Adam) and one epoch per call as ``main.py``'s loop body
  (``zero_grad``, the forward with its faiss k-means, ``backward``, ``step``, the patience bookkeeping), its
  prints sent to ``/dev/null``. Nothing is written into the folder (``main.py``'s evaluation and saved
  embeddings come after training and are not run).

Equal work: the same dataset files, the same node count, model width and K clusterings (k, iterations,
restarts), the same full-batch InfoNCE and ProtoNCE; the record keeps each side's node count, pruned
meta-path edges and parameter count. The first losses are shown but are not expected to agree to the digit:
the two sides draw their own dropout and masks and cluster differently (faiss' k-means from random points,
ours from k-means++). The time to the selected checkpoint is not measured here (it needs whole runs): see
``docs/domains/graph.md`` and ``docs/results/records/graph_perf/``. The record goes to
``docs/results/records/bench_pipelines/graph_official.json`` (ACM; ``graph_official_<dataset>.json`` for the
others), its section ``graph`` (``graph+<dataset>``) of ``docs/results/bench_pipelines.md``.

    contrasuite bench graph --against official --dataset acm
    contrasuite bench graph --against official --report
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import platform
import random
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch

from contrasuite.domains.graph.task import GraphTask
from contrasuite.pipelines.api import (
    RECORDS, ROOT, StepRunner, alternate, cpu_task, heading, load_config, machine_lines, official_flags, our_step,
    ours_text, peer_flags, peer_main, peer_record, round_cells, setup_task, summarize,
)

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


OFFICIAL = Path("/tmp/official/meow/code_meow")
"""Where ``--official`` looks by default: the folder ``code_meow`` of an export of the official repository
(``docs/results/records/official/meow/run_official_meow.sh`` makes it)."""


def official_section(dataset: str) -> str:
    """The record's section of bench_pipelines.md: ``graph`` for ACM, ``graph+<dataset>`` after it for the others."""
    return "graph" if dataset == "acm" else f"graph+{dataset}"


def official_record(dataset: str) -> Path:
    return RECORDS / ("graph_official.json" if dataset == "acm" else f"graph_official_{dataset}.json")


def official_meow(folder: Path, dataset: str, threads: int) -> tuple[Callable[[Any], float], dict[str, Any]]:
    """The official MEOW set up as its ``main.py`` does, and one epoch of its training loop per call
    (module docstring); with what the record keeps of it."""
    folder = folder.resolve()
    saved = {name: sys.modules.pop(name) for name in list(sys.modules) if name.split(".")[0] in ("utils", "module")}
    argv, cwd, bytecode = sys.argv, os.getcwd(), sys.dont_write_bytecode
    devnull = open(os.devnull, "w")
    try:
        sys.dont_write_bytecode = True  # nothing written into the official folder
        sys.path.insert(0, str(folder))
        sys.argv = [str(folder / "main.py"), dataset]  # utils/params.py reads the dataset from argv[1]
        os.chdir(folder)  # load_data reads ../data/<dataset>/
        with contextlib.redirect_stdout(devnull):
            utils = importlib.import_module("utils")
            meow = importlib.import_module("module.meow")
            pre = importlib.import_module("module.preprocess")
            faiss = importlib.import_module("faiss")
            if threads:
                faiss.omp_set_num_threads(threads)
            args = utils.set_params()
            np.random.seed(args.seed)
            random.seed(args.seed)
            torch.manual_seed(args.seed)
            nei_index, feats, adjs, _label, _tr, _va, _te = utils.load_data(args.dataset, args.ratio, args.type_num)
            dims = [64, 64, 64] if args.dataset == "aminer" else [f.shape[1] for f in feats]
            adjs = pre.pathsim(adjs, args.nei_max)
            mask_feat = pre.mask_features(feats[0], args.feat_mask)
            adjs_norm = [pre.normalize_adj(a) for a in adjs]
            mask_adjs = pre.mask_edges(adjs, len(adjs), args.adj_mask)
            model = meow.MEOW(dims, len(adjs), args.hidden_dim, args.embed_dim, args.tau, adjs_norm, args.lam_proto,
                              args.dropout, nei_index, args.dataset)
            optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=args.l2_coef)
    finally:
        os.chdir(cwd)
        sys.argv, sys.dont_write_bytecode = argv, bytecode
        sys.path.remove(str(folder))
        for name in [n for n in sys.modules if n.split(".")[0] in ("utils", "module")]:
            del sys.modules[name]  # the official modules stay alive through the objects that use them
        sys.modules.update(saved)
    state = {"best": 1e9, "wait": 0}

    def step(batch: Any) -> float:
        with contextlib.redirect_stdout(devnull):  # main.py's loop body, its prints included
            model.train()
            optimizer.zero_grad()
            loss = model(feats, mask_feat, mask_adjs, adjs_norm, args.num_cluster)
            loss.backward()
            optimizer.step()
            if state["best"] > loss:
                state["best"], state["wait"] = loss, 0
            else:
                state["wait"] += 1
        return float(loss.detach())

    facts = {"nodes": int(feats[0].shape[0]), "dim": int(args.embed_dim),
             "metapath_edges": [int(a.count_nonzero()) for a in adjs],
             "parameters": sum(p.numel() for p in model.parameters()),
             "num_clusters": list(args.num_cluster), "kmeans": "faiss.Clustering, niter 20, nredo 5, IndexFlatIP",
             "faiss": getattr(faiss, "__version__", "?")}
    return step, facts


def against_official(args: argparse.Namespace, argv: Sequence[str]) -> dict[str, Any]:
    """Our MEOW epoch against the official one (module docstring): the record."""
    config = ROOT / "configs" / "graph" / f"meow_{args.dataset}.yaml"
    with tempfile.TemporaryDirectory() as run_dir:
        task, loaded = cpu_task(config, args.override, args.data_root, Path(run_dir))
        ours = our_step(task)
        peer, facts = official_meow(args.official, args.dataset, args.threads)
        first = {"ours": ours(0), "peer": peer(0)}  # also the warm-up of each
        batches = list(range(1, args.batches + 1))  # our batch is the epoch (it seeds the k-means)
        rounds = alternate({"ours": ours, "peer": peer}, batches, args.repeats, args.steps)
    neg = task.cfg.negatives
    own = {"nodes": int(task.features[task.cfg.dataset.target].shape[0]), "dim": task.cfg.model.dim,
           "metapath_edges": [int(g.rows.numel()) for g in task.graphs],
           "parameters": sum(p.numel() for p in task.model.parameters()),
           "num_clusters": list(neg.num_clusters),
           "kmeans": f"torch k-means++ then Lloyd, {neg.kmeans_iters} iterations, {neg.kmeans_restarts} restarts"}
    fields = {"ours": ours_text(f"graph/meow_{args.dataset}", detail=", one full-batch step = one epoch"),
              "peer": ("official code_meow (github.com/jianxiangyu/MEOW 6a072d7 with docs/results/records/official/meow/"
                       f"code_meow_cpu.patch), main.py's training loop body, faiss {facts['faiss']}"),
              "dataset": args.dataset, "config": f"meow_{args.dataset}", "overrides": list(args.override),
              "ours_facts": own, "official_facts": facts, "first_loss": first}
    record = peer_record("graph", args, argv, {}, [], fields, {"rounds": rounds, **summarize(rounds, args.clock)})
    record.update(section=official_section(args.dataset), against="official")
    return record


def render_official(record: dict[str, Any]) -> str:
    """The page section of an ``--against official`` record (markdown)."""
    o, p = record["ours_facts"], record["official_facts"]
    same = (f"the same {record['dataset'].upper()} files; {o['nodes']} target nodes on both sides "
            f"(official {p['nodes']}), width {o['dim']} ({p['dim']}), pruned meta-path edges {o['metapath_edges']} "
            f"({p['metapath_edges']}), parameters {o['parameters']:,} ({p['parameters']:,}: the official second GCN layer "
            f"keeps a PReLU it does not use); K = {len(o['num_clusters'])} "
            f"clusterings of {o['num_clusters']} clusters each epoch ({p['num_clusters']}): ours {o['kmeans']}, official "
            f"{p['kmeans']}. First losses, ours {record['first_loss']['ours']:.4f}, official "
            f"{record['first_loss']['peer']:.4f}: not expected equal (own dropout, masks and k-means draws)")
    clock = record["clock"]
    table = [f"| round | ours s/epoch ({clock}) | official s/epoch ({clock}) | ours s/epoch (wall) | "
             "official s/epoch (wall) | official / ours |", "|---|---|---|---|---|---|"]
    table += [f"| {i + 1} | {round_cells(r, clock, 1, 2)} |" for i, r in enumerate(record["rounds"])]
    lines = [heading(f"graph: our MEOW epoch vs the official code_meow ({record['dataset'].upper()})", record), "",
             f"- ours: {record['ours']}", f"- official: {record['peer']}", f"- same work: {same}",
             *machine_lines(record), "", *table,
             f"\nRatio (official / ours, above 1: ours faster): **{record['ratio_median']:.2f}** median, "
             f"{record['ratio_min']:.2f} to {record['ratio_max']:.2f} over {record['repeats']} alternating rounds of "
             f"{record['steps_per_round']} epochs (after one warm-up epoch each).",
             "\nPer epoch, both sides do the same kinds of work (two GCN views, K k-means, an N x N weighted InfoNCE and "
             "ProtoNCE, one Adam step). The official code evaluates only after training; ours validates every "
             "`run.eval_every_epochs` (not part of these steps): see `docs/domains/graph.md`, Performance notes."]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="contrasuite bench graph", description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", choices=DATASETS, default=None, help="default: dblp, acm with --against")
    parser.add_argument("--epochs", type=int, default=3, help="timed training steps (the median is reported)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch.set_num_threads (0: leave as is; default 0, 1 with --against)")
    parser.add_argument("--data-root", default=None)
    parser.add_argument("--json", type=Path, default=None, help="also write the record to this file")
    official = official_flags(parser, "our MEOW epoch against the official code_meow's", OFFICIAL,
                              "the official code_meow folder")
    official.add_argument("--steps", type=int, default=3, help="timed epochs per side per round")
    peer_flags(official, None, {}, batches=3)
    args = parser.parse_args(argv)
    if args.against or args.report:
        args.dataset = args.dataset or "acm"
        args.threads = 1 if args.threads is None else args.threads
        args.output = args.output or official_record(args.dataset)
        args.data_root = args.data_root or os.environ.get("CONTRASUITE_DATA")
        if not args.report and not (args.official / "main.py").is_file():
            print(f"bench graph --against official: no official code_meow at {args.official} (--official), skipped")
            return 0
        return peer_main(args, argv, against_official, render_official)
    args.dataset = args.dataset or "dblp"
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
