"""``contrasuite bench graph``: AdaMEOW's pair weights, memory and time per epoch; --against official: a MEOW or AdaMEOW epoch against the official code.

On ``configs/graph/adameow_<dataset>.yaml`` (full batch: every target node at once), it measures

* the bytes autograd keeps for the ``N x N`` pair weights (``saved_tensors_hooks`` around one call of
  the weight MLP, which runs on row chunks with a hand-written backward,
  ``core/negatives/learned_weights.py``), beside the naive form's ``N x N x d`` input and ``N x N x
  hidden`` activation;
* the median seconds of ``--epochs`` full training steps (the task's ``train_step`` with the engine's
  ``Step``) and the process's peak resident memory.

Output: one JSON object on stdout (and ``--json FILE``). Load average and thread count go with it, since
a shared machine makes the time slower.

``--against official`` (issue 41): our MEOW epoch (``--method meow``, the default) or AdaMEOW epoch
(``--method adameow``) against the official code's (github.com/jianxiangyu/MEOW, folder ``code_meow`` or
``code_adameow``, with its CPU patch, :data:`PATCHES`), in one process, on the same threads, in fp32, alternating
rounds (``pipelines/bench/against_peer.py``):

* ours: ``configs/graph/<method>_<dataset>.yaml``'s ``train_step`` in the engine's ``Step`` (one full-batch
  step is one epoch);
* official: the folder given by ``--official`` (default :data:`OFFICIAL`; the bench says so in one line and
  stops when it is absent, and exits 2 when it does not carry its patch) imported as its ``main.py`` sets it up
  (seeds, ``load_data``, ``pathsim``, the masks drawn once, the model, Adam with the lr and weight decay of its
  ``utils/params.py``) and one epoch per call as ``main.py``'s loop body (``zero_grad``, the forward, with
  MEOW's faiss k-means, ``backward``, ``step``, the patience bookkeeping), its prints sent to ``/dev/null``
  (AdaMEOW's ``main.py`` prints the epoch and loss in its loop; those two prints are not run). Nothing is written
  into the folder (``main.py``'s evaluation and saved embeddings are not run).

Equal work: the same dataset files, the same node count, model width and (MEOW) K clusterings (k, iterations,
restarts), the same full-batch InfoNCE and ProtoNCE, or (AdaMEOW) the same pair-weight MLP, weighted InfoNCE and
Adam settings; the record keeps each side's node count, pruned meta-path edges and parameter count. The first
losses are shown but are not expected to agree to the digit: the two sides draw their own weights, dropout and
masks, and MEOW's sides cluster differently (faiss' k-means from random points, ours from k-means++). AdaMEOW's
official patch computes the pair weights' first layer before the pair sum (no ``N x N x d`` tensors); the record
also times that form against the unpatched lines on :data:`PAIR_ROWS` random rows (:func:`pair_weight_seconds`). The time to the selected checkpoint is not measured here (it needs whole runs): see
``docs/domains/graph.md`` and ``docs/results/records/graph_perf/``. The record goes to
``docs/results/records/bench_pipelines/graph_official.json`` (ACM; ``graph_official_<dataset>.json`` for the
others), its section ``graph`` (``graph+<dataset>``) of ``docs/results/bench_pipelines.md``; AdaMEOW's to
``graph_official_adameow.json`` (``graph_official_adameow_<dataset>.json``), section ``graph+adameow``
(``graph+adameow+<dataset>``).

    contrasuite bench graph --against official --dataset acm
    contrasuite bench graph --against official --method adameow --dataset acm
    contrasuite bench graph --against official --report
    contrasuite bench graph --against official --method adameow --report
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
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence, TextIO

import numpy as np
import torch
import torch.nn.functional as F

from contrasuite.domains.graph.task import GraphTask
from contrasuite.pipelines.api import (
    RECORDS, ROOT, StepRunner, alternate, cpu_task, heading, host_allocator_fields, load_config, machine_lines,
    official_flags, optimizer_kernel, our_step, ours_text, peer_flags, peer_main, peer_record, retaining_sides,
    round_cells, setup_task, summarize,
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


METHODS = ("meow", "adameow")
OFFICIAL = {"meow": Path("/tmp/official/meow/code_meow"), "adameow": Path("/tmp/official/adameow_cpu/code_adameow")}
"""Where ``--official`` looks by default, per ``--method``: the folder ``code_<method>`` of an export of the official
repository with its CPU patch (:data:`PATCHES`; ``docs/results/records/official/meow/run_official_meow.sh export``, and for
AdaMEOW ``docs/results/records/official/adameow/README.md``, make them)."""
PATCHES = {"meow": "docs/results/records/official/meow/code_meow_cpu.patch",
           "adameow": "docs/results/records/official/adameow/code_adameow_cpu.patch"}
"""The CPU patch of each official folder, relative to the root of jianxiangyu/MEOW at :data:`COMMIT`."""
COMMIT = "6a072d7"
PAIR_ROWS = 1000
"""Rows of the pair-weight check (AdaMEOW's patch 3): small enough for the unpatched form's ``N x N x d`` tensors."""


def official_section(dataset: str, method: str = "meow") -> str:
    """The record's section of bench_pipelines.md: ``graph`` for MEOW on ACM, ``graph+adameow`` for AdaMEOW, with
    ``+<dataset>`` for the other datasets."""
    base = "graph" if method == "meow" else f"graph+{method}"
    return base if dataset == "acm" else f"{base}+{dataset}"


def official_record(dataset: str, method: str = "meow") -> Path:
    stem = "graph_official" if method == "meow" else f"graph_official_{method}"
    return RECORDS / (f"{stem}.json" if dataset == "acm" else f"{stem}_{dataset}.json")


@contextlib.contextmanager
def official_imports(folder: Path, dataset: str, out: TextIO) -> Iterator[None]:
    """Inside: an official ``folder`` importable as its ``main.py`` sees it (first on ``sys.path``, the working folder,
    ``sys.argv[1]`` the dataset, which its ``utils/params.py`` reads), no bytecode written into it, prints sent to
    ``out``. After: all of it restored, and the folder's ``utils`` and ``module`` packages dropped from
    ``sys.modules`` (the official objects keep what they use alive), so another official folder imports cleanly."""
    folder = folder.resolve()
    saved = {name: sys.modules.pop(name) for name in list(sys.modules) if name.split(".")[0] in ("utils", "module")}
    argv, cwd, bytecode = sys.argv, os.getcwd(), sys.dont_write_bytecode
    try:
        sys.dont_write_bytecode = True
        sys.path.insert(0, str(folder))
        sys.argv = [str(folder / "main.py"), dataset]
        os.chdir(folder)  # load_data reads ../data/<dataset>/
        with contextlib.redirect_stdout(out):
            yield
    finally:
        os.chdir(cwd)
        sys.argv, sys.dont_write_bytecode = argv, bytecode
        sys.path.remove(str(folder))
        for name in [n for n in sys.modules if n.split(".")[0] in ("utils", "module")]:
            del sys.modules[name]
        sys.modules.update(saved)


def main_inputs(utils: Any) -> tuple[argparse.Namespace, list, list, list, list[int]]:
    """An official ``main.py``'s first lines, run inside :func:`official_imports` with its ``utils`` package: its
    parameters (``utils/params.py``), numpy's, Python's and torch's seeds, ``load_data``, and the feature widths;
    returns ``args, nei_index, feats, adjs, dims``."""
    args = utils.set_params()
    np.random.seed(args.seed)
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    nei_index, feats, adjs, _label, _train, _val, _test = utils.load_data(args.dataset, args.ratio, args.type_num)
    dims = [64, 64, 64] if args.dataset == "aminer" else [f.shape[1] for f in feats]
    return args, nei_index, feats, adjs, dims


def official_epoch(model: torch.nn.Module, optimizer: torch.optim.Optimizer, loss_of: Callable[[], torch.Tensor],
                   out: TextIO) -> Callable[[Any], float]:
    """One epoch of an official ``main.py``'s training loop per call: ``train``, ``zero_grad``, the forward
    (``loss_of``), ``backward``, ``step`` and the patience bookkeeping (``best``, ``cnt_wait``), prints sent to ``out``."""
    state = {"best": 1e9, "wait": 0}

    def step(batch: Any) -> float:
        with contextlib.redirect_stdout(out):
            model.train()
            optimizer.zero_grad()
            loss = loss_of()
            loss.backward()
            optimizer.step()
            if state["best"] > loss:
                state["best"], state["wait"] = loss, 0
            else:
                state["wait"] += 1
        return float(loss.detach())

    return step


def adam_facts(optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """The optimizer's class, learning rate and weight decay (its first parameter group)."""
    group = optimizer.param_groups[0]
    return {"optimizer": type(optimizer).__name__, "lr": group["lr"], "weight_decay": group["weight_decay"]}


def official_meow(folder: Path, dataset: str, threads: int) -> tuple[Callable[[Any], float], dict[str, Any]]:
    """The official MEOW set up as its ``main.py`` does, and one epoch of its training loop per call
    (module docstring); with what the record keeps of it."""
    devnull = open(os.devnull, "w")
    with official_imports(folder, dataset, devnull):
        utils, meow = importlib.import_module("utils"), importlib.import_module("module.meow")
        pre, faiss = importlib.import_module("module.preprocess"), importlib.import_module("faiss")
        if threads:
            faiss.omp_set_num_threads(threads)
        args, nei_index, feats, adjs, dims = main_inputs(utils)
        adjs = pre.pathsim(adjs, args.nei_max)
        mask_feat = pre.mask_features(feats[0], args.feat_mask)
        adjs_norm = [pre.normalize_adj(a) for a in adjs]
        mask_adjs = pre.mask_edges(adjs, len(adjs), args.adj_mask)
        model = meow.MEOW(dims, len(adjs), args.hidden_dim, args.embed_dim, args.tau, adjs_norm, args.lam_proto,
                          args.dropout, nei_index, args.dataset)
        optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=args.l2_coef)
    def forward() -> Any:  # faiss's OpenMP threads are set per calling thread (the peer may step on its own)
        if threads:
            faiss.omp_set_num_threads(threads)
        return model(feats, mask_feat, mask_adjs, adjs_norm, args.num_cluster)

    step = official_epoch(model, optimizer, forward, devnull)
    facts = {"nodes": int(feats[0].shape[0]), "dim": int(args.embed_dim),
             "metapath_edges": [int(a.count_nonzero()) for a in adjs],
             "parameters": sum(p.numel() for p in model.parameters()),
             "num_clusters": list(args.num_cluster), "kmeans": "faiss.Clustering, niter 20, nredo 5, IndexFlatIP",
             "faiss": getattr(faiss, "__version__", "?")}
    return step, facts


def pair_weight_seconds(mlp: torch.nn.Sequential, rows: int, repeats: int = 3) -> dict[str, Any]:
    """Forward and backward of the official pair weights ``MLP(z_a_i + z_j)`` (``mlp``: its Linear, Tanh, Linear,
    Sigmoid) on ``rows`` random rows, median seconds of ``repeats`` each: ``unpatched``, as ``weight_InfoNce`` writes
    it (the ``rows x rows x d`` tensors of repeated rows through the whole MLP), and ``patched`` (patch 3: the first,
    linear layer on each side, ``W z_a_i + (W z_j + b)``); with their largest difference."""
    generator = torch.Generator().manual_seed(0)
    d = mlp[0].in_features
    z_a, z = (F.normalize(torch.randn(rows, d, generator=generator), dim=1).requires_grad_() for _ in range(2))

    def unpatched() -> torch.Tensor:
        pair = torch.stack([z_a[i].unsqueeze(0).repeat(rows, 1) for i in range(rows)]).reshape(rows * rows, -1)
        return mlp(pair + z.unsqueeze(0).repeat(rows, 1, 1).reshape(rows * rows, -1)).reshape(rows, rows)

    def patched() -> torch.Tensor:
        left, right = F.linear(z_a, mlp[0].weight), F.linear(z, mlp[0].weight, mlp[0].bias)
        return mlp[3](mlp[2](mlp[1](left.unsqueeze(1) + right.unsqueeze(0)))).reshape(rows, rows)

    seconds, weights = {}, {}
    for name, form in (("unpatched", unpatched), ("patched", patched)):
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            weights[name] = form()
            weights[name].sum().backward()
            times.append(time.perf_counter() - started)
        seconds[f"{name}_s"] = sorted(times)[len(times) // 2]
    diff = float((weights["unpatched"] - weights["patched"]).detach().abs().max())
    return {"rows": rows, "dim": d, "repeats": repeats, **seconds, "max_abs_diff": diff}


def official_adameow(folder: Path, dataset: str, threads: int) -> tuple[Callable[[Any], float], dict[str, Any]]:
    """The official AdaMEOW set up as its ``main.py`` does, and one epoch of its training loop per call
    (module docstring); with what the record keeps of it."""
    devnull = open(os.devnull, "w")
    with official_imports(folder, dataset, devnull):
        utils, adameow = importlib.import_module("utils"), importlib.import_module("module.adameow")
        pre = importlib.import_module("module.preprocess")
        args, nei_index, feats, adjs, dims = main_inputs(utils)
        mask_feat = pre.mask_features(feats[0], args.feat_mask)
        adjs = pre.pathsim(adjs, args.nei_max)
        mask_adjs = pre.mask_edges(adjs, len(adjs), args.adj_mask)
        adjs_norm = [pre.normalize_adj(a) for a in adjs]
        model = adameow.AdaMEOW(dims, len(adjs), args.hidden_dim, args.embed_dim, args.tau, adjs_norm, args.dropout,
                                nei_index, feats[0], args.dataset)
        optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=args.l2_coef)
    step = official_epoch(model, optimizer, lambda: model(feats, mask_feat, adjs_norm, mask_adjs), devnull)
    facts = {"nodes": int(feats[0].shape[0]), "dim": int(args.embed_dim),
             "metapath_edges": [int(a.count_nonzero()) for a in adjs],
             "parameters": sum(p.numel() for p in model.parameters()),
             "pair_hidden": model.MLP[0].out_features, **adam_facts(optimizer),
             "pair_weights": pair_weight_seconds(model.MLP, PAIR_ROWS)}
    return step, facts


def own_facts(task: GraphTask) -> dict[str, Any]:
    """What the record keeps of our side: nodes, width, pruned meta-path edges, parameters, and the negatives'
    settings (the clusterings under MEOW; the pair-weight MLP and the optimizer under AdaMEOW)."""
    neg = task.cfg.negatives
    facts = {"nodes": int(task.features[task.cfg.dataset.target].shape[0]), "dim": task.cfg.model.dim,
             "metapath_edges": [int(g.rows.numel()) for g in task.graphs], "context": task.cfg.model.context,
             "parameters": sum(p.numel() for module in task.modules().values() for p in module.parameters())}
    if task.weigher is not None:
        optimizer = task.optimizers()["model"]
        return {**facts, "pair_hidden": task.weigher.first.out_features, **adam_facts(optimizer),
                "optimizer_kernel": optimizer_kernel(optimizer)}
    return {**facts, "num_clusters": list(neg.num_clusters),
            "kmeans": f"torch k-means++ then Lloyd, {neg.kmeans_iters} iterations, {neg.kmeans_restarts} restarts"}


SETUPS = {"meow": official_meow, "adameow": official_adameow}


def against_official(args: argparse.Namespace, argv: Sequence[str]) -> dict[str, Any]:
    """Our MEOW (or AdaMEOW) epoch against the official one (module docstring): the record."""
    config = ROOT / "configs" / "graph" / f"{args.method}_{args.dataset}.yaml"
    with tempfile.TemporaryDirectory() as run_dir:
        task, loaded = cpu_task(config, args.override, args.data_root, Path(run_dir))
        ours = our_step(task)
        peer, facts = SETUPS[args.method](args.official, args.dataset, args.threads)
        first = {"ours": ours(0), "peer": peer(0)}  # also the warm-up of each
        batches = list(range(1, args.batches + 1))  # our batch is the epoch (it seeds MEOW's k-means)
        retaining = retaining_sides(loaded)
        rounds = alternate({"ours": ours, "peer": peer}, batches, args.repeats, args.steps, retaining=retaining)
    extra = f", faiss {facts['faiss']}" if args.method == "meow" else ""
    fields = {"ours": ours_text(f"graph/{args.method}_{args.dataset}", detail=", one full-batch step = one epoch"),
              "peer": (f"official code_{args.method} (github.com/jianxiangyu/MEOW {COMMIT} with {PATCHES[args.method]}), "
                       f"main.py's training loop body{extra}"),
              "method": args.method, "dataset": args.dataset, "config": f"{args.method}_{args.dataset}",
              "overrides": list(args.override), "ours_facts": own_facts(task), "official_facts": facts,
              "first_loss": first, **host_allocator_fields(retaining)}
    record = peer_record("graph", args, argv, {}, [], fields, {"rounds": rounds, **summarize(rounds, args.clock)})
    record.update(section=official_section(args.dataset, args.method), against="official")
    return record


def official_rounds(record: dict[str, Any]) -> list[str]:
    """The rounds table and the ratio line of an ``--against official`` record (markdown lines)."""
    clock = record["clock"]
    table = [f"| round | ours s/epoch ({clock}) | official s/epoch ({clock}) | ours s/epoch (wall) | "
             "official s/epoch (wall) | official / ours |", "|---|---|---|---|---|---|"]
    table += [f"| {i + 1} | {round_cells(r, clock, 1, 2)} |" for i, r in enumerate(record["rounds"])]
    return [*table, f"\nRatio (official / ours, above 1: ours faster): **{record['ratio_median']:.2f}** median, "
            f"{record['ratio_min']:.2f} to {record['ratio_max']:.2f} over {record['repeats']} alternating rounds of "
            f"{record['steps_per_round']} epochs (after one warm-up epoch each)."]


def context_words(ours: dict[str, Any]) -> str:
    """How the record's contexts were averaged, where it says (records made before ``model.context`` do not)."""
    if ours.get("context") == "reach":
        return ("; every meta-path context averaged over the nodes its path reaches on both sides (ours "
                "`model.context: reach`, the official `nei_*` files)")
    return "; ours averaged multi-hop contexts hop by hop (`model.context: walk`)" if "context" in ours else ""


def render_meow(record: dict[str, Any]) -> str:
    """The page section of an ``--against official`` MEOW record (markdown)."""
    o, p = record["ours_facts"], record["official_facts"]
    same = (f"the same {record['dataset'].upper()} files; {o['nodes']} target nodes on both sides "
            f"(official {p['nodes']}), width {o['dim']} ({p['dim']}), pruned meta-path edges {o['metapath_edges']} "
            f"({p['metapath_edges']}), parameters {o['parameters']:,} ({p['parameters']:,}: the official second GCN layer "
            f"keeps a PReLU it does not use); K = {len(o['num_clusters'])} "
            f"clusterings of {o['num_clusters']} clusters each epoch ({p['num_clusters']}): ours {o['kmeans']}, official "
            f"{p['kmeans']}{context_words(o)}. First losses, ours {record['first_loss']['ours']:.4f}, official "
            f"{record['first_loss']['peer']:.4f}: not expected equal (own dropout, masks and k-means draws)")
    lines = [heading(f"graph: our MEOW epoch vs the official code_meow ({record['dataset'].upper()})", record), "",
             f"- ours: {record['ours']}", f"- official: {record['peer']}", f"- same work: {same}",
             *machine_lines(record), "", *official_rounds(record),
             "\nPer epoch, both sides do the same kinds of work (two GCN views, K k-means, an N x N weighted InfoNCE and "
             "ProtoNCE, one Adam step). The official code evaluates only after training; ours validates every "
             "`run.eval_every_epochs` (not part of these steps): see `docs/domains/graph.md`, Performance notes."]
    return "\n".join(lines)


def render_adameow(record: dict[str, Any]) -> str:
    """The page section of an ``--against official`` AdaMEOW record (markdown)."""
    o, p = record["ours_facts"], record["official_facts"]
    pair = p["pair_weights"]
    same = (f"the same {record['dataset'].upper()} files; {o['nodes']} target nodes on both sides "
            f"(official {p['nodes']}), width {o['dim']} ({p['dim']}), pruned meta-path edges {o['metapath_edges']} "
            f"({p['metapath_edges']}; the same counts, though which tied PSP neighbours each side keeps differs: "
            "`docs/results/records/official/adameow_acm.md`), parameters "
            f"{o['parameters']:,} ({p['parameters']:,}: the official second GCN layer keeps a PReLU it does not use), "
            "pair-weight MLP "
            f"{o['dim']} -> {o['pair_hidden']} -> 1 ({p['dim']} -> {p['pair_hidden']} -> 1), {o['optimizer']} lr "
            f"{o['lr']:g}, weight decay {o['weight_decay']:g} (official {p['optimizer']} {p['lr']:g}, "
            f"{p['weight_decay']:g}); the masks drawn once at setup on both sides. First losses, ours "
            f"{record['first_loss']['ours']:.4f}, official {record['first_loss']['peer']:.4f}: not expected equal "
            "(own initial weights, dropout and masks)")
    gb = p["nodes"] ** 2 * p["dim"] * 4 / 1e9
    lines = [heading(f"graph: our AdaMEOW epoch vs the official code_adameow ({record['dataset'].upper()})", record),
             "", f"- ours: {record['ours']}", f"- official: {record['peer']}", f"- same work: {same}",
             *machine_lines(record), "", *official_rounds(record),
             "\nPer epoch, both sides do the same work: the type projections and neighbour aggregation, the GCN views "
             "(coarse; each meta-path plain and masked), the attention fusion, the N x N similarities, the learned "
             "pair weights sigmoid(MLP(z_i + z_j)), the weighted InfoNCE and one Adam step "
             f"(ours on the {o['optimizer_kernel']} kernel). The official code propagates over dense N x N adjacency "
             "matrices, ours over sparse graphs; it evaluates only every 100 epochs late in training, ours every "
             "`run.eval_every_epochs` (neither is part of these steps).",
             "\n**The official side is already patched to be faster.** Patch 3 of its CPU patch computes the pair "
             "weights' first (linear) layer on each side, W z_i + (W z_j + b), instead of on the "
             f"N x N x {p['dim']} tensors of repeated rows that `weight_InfoNce` builds (three of {gb:.1f} GB at "
             f"N = {p['nodes']:,}): unpatched, the official code does not fit this machine beside its other jobs, "
             "so it cannot be timed here as written. The patched lines are also faster than the unpatched ones: "
             f"on {pair['rows']:,} random rows (forward and backward of the pair weights only, median wall seconds "
             f"of {pair['repeats']} runs in the same process) the unpatched form took {pair['unpatched_s']:.2f} s and the patched one {pair['patched_s']:.2f} s (largest difference of "
             f"the weights {pair['max_abs_diff']:.0e}). The ratio above is therefore against an official code made "
             "faster than the authors' own lines; unpatched, on a GPU with room for those tensors, see "
             "`docs/results/records/official/adameow_gpu/`."]
    return "\n".join(lines)


RENDERERS = {"meow": render_meow, "adameow": render_adameow}


def render_official(record: dict[str, Any]) -> str:
    """The page section of an ``--against official`` record (markdown; records made before ``--method`` are MEOW's)."""
    return RENDERERS[record.get("method", "meow")](record)


def patched(folder: Path, patch: Path) -> bool:
    """Whether the official ``folder`` (``code_<method>``) carries ``patch`` (made at the repository's root):
    ``patch -R --dry-run`` in its parent applies cleanly."""
    run = subprocess.run(["patch", "-p1", "-R", "--dry-run", "-s", "-f", "-i", str(patch)], cwd=folder.resolve().parent,
                         capture_output=True)
    return run.returncode == 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="contrasuite bench graph", description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", choices=DATASETS, default=None, help="default: dblp, acm with --against")
    parser.add_argument("--epochs", type=int, default=3, help="timed training steps (the median is reported)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch.set_num_threads (0: leave as is; default 0, 1 with --against)")
    parser.add_argument("--data-root", default=None)
    parser.add_argument("--json", type=Path, default=None, help="also write the record to this file")
    official = official_flags(parser, "our MEOW (or AdaMEOW) epoch against the official code's", None,
                              "the official code_<method> folder (default: OFFICIAL in the module)")
    official.add_argument("--method", choices=METHODS, default="meow", help="whose epoch: MEOW's or AdaMEOW's")
    official.add_argument("--steps", type=int, default=3, help="timed epochs per side per round")
    peer_flags(official, None, {}, batches=3)
    args = parser.parse_args(argv)
    if args.against or args.report:
        args.dataset = args.dataset or "acm"
        args.threads = 1 if args.threads is None else args.threads
        args.output = args.output or official_record(args.dataset, args.method)
        args.data_root = args.data_root or os.environ.get("CONTRASUITE_DATA")
        args.official = args.official or OFFICIAL[args.method]
        if not args.report and not (args.official / "main.py").is_file():
            print(f"bench graph --against official: no official code_{args.method} at {args.official} (--official), "
                  f"skipped (export it with {PATCHES[args.method]}: see its folder's README.md)")
            return 0
        if not args.report and not patched(args.official, ROOT / PATCHES[args.method]):
            print(f"bench graph --against official: {args.official} does not carry {PATCHES[args.method]} "
                  "(export it unpatched and apply that patch: see its folder's README.md)", file=sys.stderr)
            return 2
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
