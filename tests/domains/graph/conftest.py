"""Fixtures for the graph domain: the shared data root and a tiny generated heterogeneous graph."""

import os
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

DATA_ROOT = Path(os.environ["CONTRASUITE_DATA"])


@pytest.fixture
def data_root() -> Path:
    return DATA_ROOT


@pytest.fixture
def graph_data():
    """``graph_data(name)``: ``<data root>/graph/<name>``, or skip the test when it is absent."""

    def find(name: str) -> Path:
        folder = DATA_ROOT / "graph" / name
        if not (folder / "labels.npy").is_file():
            pytest.skip(f"graph dataset {name!r} not found under {folder} (set CONTRASUITE_DATA)")
        return folder

    return find


def write_tiny_graph(folder: Path, num_metapaths: int = 2, n: int = 60, others: int = 15, seed: int = 0) -> dict:
    """A tiny graph in the HeCo/MEOW layout with new type names; returns its ``dataset:`` block.

    Target type ``item`` (3 classes, dense ``.npy`` features under an ``.npz`` name, as DBLP's
    ``t_feat.npz``), one context type ``ctx{k}`` per meta-path ``item-ctx{k}-item`` with sparse
    features on the first; edges prefer context nodes of the item's class.
    """
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    labels = np.arange(n) % 3
    feats = rng.normal(size=(n, 8)) + np.eye(3)[labels] @ rng.normal(size=(3, 8)) * 2
    with (folder / "i_feat.npz").open("wb") as fh:
        np.save(fh, feats.astype(np.float32))
    node_types = [{"name": "item", "features": "i_feat.npz"}]
    edges, metapaths = [], []
    for k in range(num_metapaths):
        pairs = []
        for i in range(n):
            pool = [j for j in range(others) if j % 3 == labels[i]]
            for j in rng.choice(pool, size=2, replace=False):
                pairs.append((i, j))
        pairs.append((int(rng.integers(n)), int(rng.integers(others))))
        np.savetxt(folder / f"ic{k}.txt", np.array(pairs), fmt="%d")
        node = {"name": f"ctx{k}", "count": others}
        if k == 0:
            sp.save_npz(folder / "c0_feat.npz", sp.csr_matrix(rng.random((others, 5)) > 0.5, dtype=np.float32))
            node = {"name": "ctx0", "features": "c0_feat.npz"}
        node_types.append(node)
        edges.append({"file": f"ic{k}.txt", "src": "item", "dst": f"ctx{k}"})
        metapaths.append({"name": f"ic{k}i", "path": ["item", f"ctx{k}", "item"]})
    np.save(folder / "labels.npy", labels)
    order = rng.permutation(n)
    train = np.concatenate([order[labels[order] == c][:5] for c in range(3)])
    rest = np.setdiff1d(order, train)
    np.save(folder / "train_5.npy", train)
    np.save(folder / "val_5.npy", rest[: len(rest) // 2])
    np.save(folder / "test_5.npy", rest[len(rest) // 2 :])
    return {
        "name": "tiny",
        "root": str(folder),
        "target": "item",
        "node_types": node_types,
        "edges": edges,
        "metapaths": metapaths,
        "labels": "labels.npy",
        "label_offset": 0,
        "splits": [5],
    }


@pytest.fixture
def tiny_graph(tmp_path):
    return write_tiny_graph(tmp_path / "tiny")


@pytest.fixture
def make_tiny_graph():
    """``make_tiny_graph(folder, num_metapaths)``: write a tiny graph, return its ``dataset:`` block."""
    return write_tiny_graph


@pytest.fixture(autouse=True)
def one_thread():
    """Small full-batch graph ops run faster on one thread, and the CI machine is shared."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
