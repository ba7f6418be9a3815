"""How label-homogeneous each meta-path graph of the paper configs is, by which tied nodes its top-k keeps.

    python docs/results/records/graph_paper/checks/acm_pathsim_ties/same_label.py > same_label.txt

For every meta-path of ``configs/graph/{meow,adameow}_<dataset>.yaml``: the share of the kept (node, neighbour)
edges whose two nodes have the same label, with ``torch``, ``numpy`` and ``random`` ties (``graphs.pathsim_topk``,
``random`` with seed 0), first in the dataset files' node order, then with the nodes renumbered at random (3 orders,
mean), which no tie rule can read labels from. Uses the labels of every node: a diagnostic of the graph, never
used for training.
"""

from __future__ import annotations

import os

import torch

from contrasuite.domains.graph.data import load_hetero, metapath_counts
from contrasuite.domains.graph.graphs import TIES, pathsim_topk
from contrasuite.pipelines.config import load_config

ORDERS = 3


def same_label(counts: torch.Tensor, labels: torch.Tensor, nei_max: int, ties: str) -> float:
    graph = pathsim_topk(counts, nei_max, ties)
    return (labels[graph.rows] == labels[graph.cols]).double().mean().item()


def cells(views: list[tuple[torch.Tensor, torch.Tensor]], nei_max: int) -> list[str]:
    """Per tie rule: the share in file order (``views[0]``), then its mean over the random orders (the rest)."""
    out = []
    for ties in TIES:
        shares = [same_label(dense, labels, nei_max, ties) for dense, labels in views]
        out += [f"{shares[0]:.4f}", f"{sum(shares[1:]) / ORDERS:.4f}"]
    return out


def main() -> None:
    data_root = os.environ.get("CONTRASUITE_DATA", "data")
    print("config | meta-path | nei_max | " + " | ".join(f"{t}, file order | {t}, random orders" for t in TIES))
    for dataset in ("acm", "dblp", "imdb"):
        configs = {m: load_config(f"configs/graph/{m}_{dataset}.yaml").config for m in ("meow", "adameow")}
        spec = configs["meow"].dataset                  # both extend configs/graph/datasets/<dataset>.yaml
        data = load_hetero(spec, data_root)
        labels = data[spec.target].y
        orders = [torch.randperm(len(labels), generator=torch.Generator().manual_seed(s)) for s in range(ORDERS)]
        counts = metapath_counts(data, list(spec.metapaths))
        for i, path in enumerate(spec.metapaths):
            dense = counts[path.name].to_dense()
            views = [(dense, labels)] + [(dense[o][:, o], labels[o]) for o in orders]
            rows: dict[int, list[str]] = {}             # by nei_max: MEOW and AdaMEOW often share it
            for method, cfg in configs.items():
                k = cfg.model.nei_max[i]
                rows.setdefault(k, cells(views, k))
                print(f"{method}_{dataset} | {path.name} | {k} | " + " | ".join(rows[k]), flush=True)


if __name__ == "__main__":
    main()
