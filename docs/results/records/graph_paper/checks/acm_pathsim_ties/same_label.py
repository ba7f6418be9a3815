"""How label-homogeneous each meta-path graph of the paper configs is, by which tied nodes its top-k keeps.

    python docs/results/records/graph_paper/checks/acm_pathsim_ties/same_label.py > same_label.txt

For every meta-path of ``configs/graph/{meow,adameow}_<dataset>.yaml``: the share of the kept (node, neighbour)
edges whose two nodes have the same label, with ``torch`` and ``numpy`` ties (``graphs.pathsim_topk``), first in
the dataset files' node order, then with the nodes renumbered at random (3 orders, mean), which no tie rule can
read labels from. Uses the labels of every node: a diagnostic of the graph, never used for training.
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


def main() -> None:
    data_root = os.environ.get("CONTRASUITE_DATA", "data")
    print("config | meta-path | nei_max | " + " | ".join(f"{t}, file order | {t}, random orders" for t in TIES))
    for dataset in ("acm", "dblp", "imdb"):
        for method in ("meow", "adameow"):
            cfg = load_config(f"configs/graph/{method}_{dataset}.yaml").config
            data = load_hetero(cfg.dataset, data_root)
            labels = data[cfg.dataset.target].y
            counts = metapath_counts(data, list(cfg.dataset.metapaths))
            for i, path in enumerate(cfg.dataset.metapaths):
                dense, k = counts[path.name].to_dense(), cfg.model.nei_max[i]
                cells = []
                for ties in TIES:
                    shuffled = []
                    for seed in range(ORDERS):
                        order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(seed))
                        shuffled.append(same_label(dense[order][:, order], labels[order], k, ties))
                    cells += [f"{same_label(dense, labels, k, ties):.4f}", f"{sum(shuffled) / ORDERS:.4f}"]
                print(f"{method}_{dataset} | {path.name} | {k} | " + " | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
