"""Heterogeneous graph datasets in the HeCo/MEOW layout, described by YAML and built as ``HeteroData``.

A dataset folder holds typed edge lists (``pa.txt``: one ``src dst`` pair a line, 0-based per node
type), node features (``*_feat.npz``: scipy sparse, or a dense ``.npy`` even under an ``.npz`` name,
as DBLP's ``t_feat.npz``), target-node ``labels.npy`` and the splits ``{train,val,test}_{n}.npy``.
What the files mean comes from a :class:`DatasetSpec` (the ``dataset:`` block of a config), so a new
dataset in this layout needs a YAML file and no code.

Meta-path graphs are path counts, ``A_P = A_{t0 t1} A_{t1 t2} ... A_{t(L-1) tL}``, built with
torch_geometric's ``AddMetaPaths(weighted=True)``: MEOW prunes them by PathSim, which needs counts,
not booleans.

A missing file is downloaded from ``spec.url`` and checked against ``spec.sha256``; without a URL, a
network or a matching checksum the error names the file and the path where it was expected.
"""

from __future__ import annotations

import shutil
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np
import scipy.sparse as sp
import torch
from torch import Tensor
from torch_geometric.data import HeteroData
from torch_geometric.transforms import AddMetaPaths

from contrasuite.domains.archives import sha256_of

EdgeType = tuple[str, str, str]


@dataclass
class NodeTypeSpec:
    """One node type: ``features`` is a file (else one-hot inputs, a learned row per node); ``count`` else inferred."""

    name: str = ""
    features: Optional[str] = None
    count: Optional[int] = None
    row_normalize: bool = False
    """Divide each feature row by its sum (MEOW's and HeCo's ``preprocess_features``); zero rows stay 0."""


@dataclass
class EdgeSpec:
    """An edge list file of ``src dst`` lines from node type ``src`` to node type ``dst``."""

    file: str = ""
    src: str = ""
    dst: str = ""


@dataclass
class MetaPathSpec:
    """A meta-path as node types from and back to the target, e.g. ``[paper, author, paper]``."""

    name: str = ""
    path: list[str] = field(default_factory=list)
    reference: Optional[str] = None
    """Optional precomputed count adjacency (``pap.npz``) the tests compare with."""


@dataclass
class DatasetSpec:
    """What a dataset folder holds; see the module docstring."""

    name: str = ""
    """Folder under ``<data_root>/graph/`` (or ``root`` when given)."""
    root: Optional[str] = None
    target: str = ""
    node_types: list[NodeTypeSpec] = field(default_factory=list)
    edges: list[EdgeSpec] = field(default_factory=list)
    metapaths: list[MetaPathSpec] = field(default_factory=list)
    labels: str = "labels.npy"
    label_offset: int = 0
    """Subtracted from the stored labels (0 when they are already 0-based)."""
    splits: list[int] = field(default_factory=lambda: [20, 40, 60])
    url: Optional[str] = None
    """Base URL a missing file is downloaded from (``url + '/' + file``)."""
    sha256: dict[str, str] = field(default_factory=dict)


def dataset_dir(spec: DatasetSpec, data_root: str | Path) -> Path:
    """``spec.root`` when given, else ``<data_root>/graph/<name>``."""
    return Path(spec.root) if spec.root else Path(data_root) / "graph" / spec.name


def ensure_file(folder: Path, name: str, spec: DatasetSpec) -> Path:
    """``folder/name``, downloaded from ``spec.url`` with its SHA-256 checked when it is missing."""
    path = folder / name
    if path.is_file():
        return path
    expected = spec.sha256.get(name)
    where = f"dataset {spec.name!r} needs {name!r} at {path}"
    if not spec.url:
        raise FileNotFoundError(f"{where}; it is missing and dataset.url is not set to download it")
    if not expected:
        raise FileNotFoundError(f"{where}; it is missing and dataset.sha256 has no checksum to verify a download")
    url = f"{spec.url.rstrip('/')}/{name}"
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir) / name
        try:
            with urllib.request.urlopen(url, timeout=60) as response, tmp.open("wb") as out:
                shutil.copyfileobj(response, out)
        except (urllib.error.URLError, OSError) as err:
            raise FileNotFoundError(f"{where}; downloading {url} failed ({err}); place the file there by hand") from None
        got = sha256_of(tmp)
        if got != expected:
            raise FileNotFoundError(f"{where}; the download from {url} has SHA-256 {got}, expected {expected}")
        folder.mkdir(parents=True, exist_ok=True)
        shutil.move(str(tmp), path)
    return path


def load_features(path: Path) -> Tensor:
    """A scipy sparse ``.npz`` or a dense ``.npy`` (whatever its suffix) as a dense float tensor."""
    loaded = np.load(path, allow_pickle=False)
    if isinstance(loaded, np.ndarray):
        matrix = loaded
    else:
        loaded.close()
        matrix = sp.load_npz(path).toarray()
    return torch.as_tensor(np.asarray(matrix), dtype=torch.float32)


def row_normalize(features: Tensor) -> Tensor:
    """Each row divided by its sum; a row summing to 0 becomes 0 (MEOW's ``preprocess_features``)."""
    total = features.sum(1, keepdim=True)
    inverse = torch.where(total != 0, 1.0 / torch.where(total != 0, total, 1.0), 0.0)
    return features * inverse


def load_edges(path: Path) -> Tensor:
    """``[2, E]`` int64 edge index from a text file of ``src dst`` lines."""
    pairs = np.loadtxt(path, dtype=np.int64, ndmin=2)
    if pairs.shape[1] != 2:
        raise ValueError(f"{path}: expected 'src dst' pairs per line, got {pairs.shape[1]} columns")
    return torch.from_numpy(pairs.T).contiguous()


def edge_type_of(spec: EdgeSpec, reverse: bool = False) -> EdgeType:
    """``(src, stem, dst)``, or ``(dst, rev_stem, src)`` for the reverse direction."""
    stem = Path(spec.file).stem
    return (spec.dst, f"rev_{stem}", spec.src) if reverse else (spec.src, stem, spec.dst)


def _check_spec(spec: DatasetSpec) -> None:
    types = {t.name for t in spec.node_types}
    for t in spec.node_types:
        if t.row_normalize and not t.features:
            raise ValueError(f"dataset.node_types {t.name!r}: row_normalize needs a features file")
    if spec.target not in types:
        raise ValueError(f"dataset.target {spec.target!r} is not among dataset.node_types {sorted(types)}")
    for e in spec.edges:
        for side in (e.src, e.dst):
            if side not in types:
                raise ValueError(f"dataset.edges {e.file!r}: node type {side!r} not in dataset.node_types {sorted(types)}")
    if not spec.metapaths:
        raise ValueError("dataset.metapaths is empty: give at least one meta-path")
    for m in spec.metapaths:
        if len(m.path) < 3 or m.path[0] != spec.target or m.path[-1] != spec.target:
            raise ValueError(f"dataset.metapaths {m.name!r}: path {list(m.path)} must start and end at {spec.target!r}")


def load_hetero(spec: DatasetSpec, data_root: str | Path) -> HeteroData:
    """The dataset as ``HeteroData``: features ``x`` (or only ``num_nodes``), both edge directions,
    target ``y`` and the split index tensors ``train_20``, ``val_20``, ``test_20``, ..."""
    _check_spec(spec)
    folder = dataset_dir(spec, data_root)
    data = HeteroData()
    edges = {e.file: load_edges(ensure_file(folder, e.file, spec)) for e in spec.edges}
    inferred: dict[str, int] = {}
    for e in spec.edges:
        for row, side in ((0, e.src), (1, e.dst)):
            inferred[side] = max(inferred.get(side, 0), int(edges[e.file][row].max()) + 1)
    labels = torch.from_numpy(np.load(ensure_file(folder, spec.labels, spec)).astype(np.int64)) - spec.label_offset
    if labels.dim() == 2:  # one-hot labels
        labels = labels.argmax(1)
    for t in spec.node_types:
        store = data[t.name]
        if t.features:
            store.x = load_features(ensure_file(folder, t.features, spec))
            if t.row_normalize:
                store.x = row_normalize(store.x)
            count = store.x.shape[0]
        else:
            count = t.count or (labels.shape[0] if t.name == spec.target else inferred.get(t.name, 0))
        if t.count is not None and t.count != count:
            raise ValueError(f"dataset.node_types {t.name!r}: count {t.count} but {t.features} has {count} rows")
        if count < inferred.get(t.name, 0):
            raise ValueError(f"dataset {spec.name!r}: an edge file indexes {t.name!r} node {inferred[t.name] - 1} >= {count}")
        store.num_nodes = count
    for e in spec.edges:
        data[edge_type_of(e)].edge_index = edges[e.file]
        data[edge_type_of(e, reverse=True)].edge_index = edges[e.file].flip(0).contiguous()
    target = data[spec.target]
    if labels.shape[0] != target.num_nodes:
        raise ValueError(f"{spec.labels}: {labels.shape[0]} labels for {target.num_nodes} {spec.target!r} nodes")
    if labels.min() < 0:
        raise ValueError(f"{spec.labels}: labels minus dataset.label_offset={spec.label_offset} go below 0")
    target.y = labels
    for n in spec.splits:
        for part in ("train", "val", "test"):
            name = f"{part}_{n}.npy"
            target[f"{part}_{n}"] = torch.from_numpy(np.load(ensure_file(folder, name, spec)).astype(np.int64))
    return data


def metapath_edge_types(data: HeteroData, path: list[str]) -> list[EdgeType]:
    """The edge type of each hop of a node-type path; an error when a hop is missing or ambiguous."""
    hops = []
    for src, dst in zip(path[:-1], path[1:]):
        found = [et for et in data.edge_types if et[0] == src and et[2] == dst]
        if len(found) != 1:
            raise ValueError(f"meta-path {path}: hop {src}->{dst} matches edge types {found}; need exactly one")
        hops.append(found[0])
    return hops


def metapath_counts(data: HeteroData, metapaths: list[MetaPathSpec]) -> dict[str, Tensor]:
    """Path-count adjacency ``[N, N]`` (sparse COO, coalesced) of each meta-path, via ``AddMetaPaths``."""
    hops = [metapath_edge_types(data, list(m.path)) for m in metapaths]
    plain = HeteroData()
    for t in data.node_types:
        plain[t].num_nodes = data[t].num_nodes
    for et in {h for path in hops for h in path}:
        plain[et].edge_index = data[et].edge_index.contiguous()
    out = AddMetaPaths(hops, weighted=True)(plain)
    n = data[metapaths[0].path[0]].num_nodes
    result = {}
    for i, m in enumerate(metapaths):
        store = out[(m.path[0], f"metapath_{i}", m.path[-1])]
        result[m.name] = torch.sparse_coo_tensor(store.edge_index, store.edge_weight.float(), (n, n)).coalesce()
    return result


def row_normalized_incidence(data: HeteroData, edge_type: EdgeType) -> Tensor:
    """Sparse ``[N_src, N_dst]`` incidence whose rows average over neighbours (empty rows stay 0)."""
    src, _, dst = edge_type
    index = data[edge_type].edge_index
    shape = (data[src].num_nodes, data[dst].num_nodes)
    indices = torch.sparse_coo_tensor(index, torch.ones(index.shape[1]), shape).coalesce().indices()
    degree = torch.zeros(shape[0]).index_add_(0, indices[0], torch.ones(indices.shape[1]))
    values = 1.0 / degree[indices[0]]
    return torch.sparse_coo_tensor(indices, values, shape).coalesce()
