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

Every file is checked before torch_geometric sees it (a negative or too large node id crashes its native
code): a line that is not two integers, a node id outside ``[0, number of nodes of its type)``, a NaN or
inf feature, a truncated or corrupt array file is :class:`~contrasuite.core.task.errors.CorruptData` naming
the file (and the line or node); a spec the files contradict is a ``ConfigValueError`` naming the key.
"""

from __future__ import annotations

import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np
import scipy.sparse as sp
import torch
from torch import Tensor
from torch_geometric.data import HeteroData
from torch_geometric.transforms import AddMetaPaths

from contrasuite.core.task.errors import ConfigValueError, CorruptData, DataError
from contrasuite.domains.archives import download

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
    try:
        return download(url, path, expected)
    except DataError as err:
        raise FileNotFoundError(f"{where}; {err}; place the file there by hand") from None


_UNREADABLE = (ValueError, OSError, EOFError, KeyError, zipfile.BadZipFile, zlib.error)
"""What NumPy and SciPy raise for a truncated, corrupt or foreign ``.npy``/``.npz`` file."""


def _read_array(path: Path) -> np.ndarray:
    """A ``.npy`` array, or a scipy sparse ``.npz`` densified (whatever the suffix); a file that cannot be read
    as one is :class:`CorruptData` naming it."""
    try:
        loaded = np.load(path, allow_pickle=False)
        if isinstance(loaded, np.ndarray):
            return loaded
        loaded.close()
        matrix = sp.load_npz(path)
        if hasattr(matrix, "check_format"):
            matrix.check_format(full_check=True)  # compressed indices in range, else toarray writes out of bounds
        return matrix.toarray()
    except _UNREADABLE as err:
        raise CorruptData(f"{path}: cannot be read as a NumPy array (corrupt or truncated file?): "
                          f"{type(err).__name__}: {err}") from None


def _numeric(array: np.ndarray, path: Path, what: str, ndims: tuple[int, ...]) -> np.ndarray:
    """``array`` if it is a numeric array with one of ``ndims`` dimensions, else :class:`CorruptData`."""
    if array.ndim not in ndims or not (np.issubdtype(array.dtype, np.number) or array.dtype == np.bool_):
        raise CorruptData(f"{path}: expected {what} as a {' or '.join(f'{n}-D' for n in ndims)} numeric array, "
                          f"got shape {array.shape} of {array.dtype}")
    return array


def _read_integers(path: Path, what: str, ndims: tuple[int, ...] = (1,)) -> Tensor:
    """An array file of whole numbers (labels, split indices; stored as float too) as an int64 tensor."""
    array = _numeric(_read_array(path), path, what, ndims)
    finite = np.isfinite(array)
    whole = finite & (array == np.round(array)) if np.issubdtype(array.dtype, np.floating) else finite
    if not whole.all():
        first = np.argwhere(~whole)[0]
        raise CorruptData(f"{path}: {what} must be whole numbers; entry {tuple(int(i) for i in first)} "
                          f"is {array[tuple(first)]}")
    return torch.from_numpy(array.astype(np.int64))


def load_features(path: Path) -> Tensor:
    """A scipy sparse ``.npz`` or a dense ``.npy`` (whatever its suffix) as a dense float tensor
    ``[nodes, features]``; a NaN or inf entry is :class:`CorruptData` naming the file and the first such node."""
    matrix = _numeric(_read_array(path), path, "node features [nodes, features]", (2,))
    features = torch.as_tensor(np.asarray(matrix), dtype=torch.float32)
    bad = (~torch.isfinite(features)).nonzero()
    if len(bad):
        row, col = bad[0].tolist()
        rows = int((~torch.isfinite(features)).any(1).sum())
        raise CorruptData(f"{path}: node {row} (row {row}) has a non-finite feature {features[row, col].item()} in "
                          f"column {col} ({rows} of {features.shape[0]} rows hold NaN or inf); fix or remove them")
    return features


def row_normalize(features: Tensor) -> Tensor:
    """Each row divided by its sum; a row summing to 0 becomes 0 (MEOW's ``preprocess_features``)."""
    total = features.sum(1, keepdim=True)
    inverse = torch.where(total != 0, 1.0 / torch.where(total != 0, total, 1.0), 0.0)
    return features * inverse


def _edge_lines(path: Path) -> list[tuple[int, str]]:
    """The non-blank lines of an edge file with their 1-based line numbers."""
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        raise CorruptData(f"{path}: not a text file of 'src dst' lines (byte {err.start} is not UTF-8)") from None
    return [(number, line) for number, line in enumerate(text.splitlines(), 1) if line.strip()]


def _edge_of(number: int, line: str, path: Path) -> tuple[int, int]:
    tokens = line.split()
    if len(tokens) != 2:
        raise CorruptData(f"{path}: line {number}: expected 2 columns 'src dst' (integer node ids), "
                          f"got {len(tokens)}: {line.strip()[:80]!r}")
    try:
        return int(tokens[0]), int(tokens[1])
    except ValueError:
        raise CorruptData(f"{path}: line {number}: node ids must be integers, got {line.strip()[:80]!r}") from None


def load_edges(path: Path) -> Tensor:
    """``[2, E]`` int64 edge index from a text file of ``src dst`` lines (blank lines skipped); a line that is
    not two integers is :class:`CorruptData` naming the file and the line."""
    pairs = [_edge_of(number, line, path) for number, line in _edge_lines(path)]
    if not pairs:
        raise CorruptData(f"{path}: no 'src dst' lines: the edge list is empty")
    try:
        return torch.from_numpy(np.array(pairs, dtype=np.int64).T).contiguous()
    except OverflowError:
        raise CorruptData(f"{path}: a node id does not fit in 64 bits") from None


def _first_outside(ids: Tensor, count: int) -> int | None:
    """Position of the first id outside ``[0, count)``, or None."""
    bad = ((ids < 0) | (ids >= count)).nonzero()
    return int(bad[0]) if len(bad) else None


def edge_type_of(spec: EdgeSpec, reverse: bool = False) -> EdgeType:
    """``(src, stem, dst)``, or ``(dst, rev_stem, src)`` for the reverse direction."""
    stem = Path(spec.file).stem
    return (spec.dst, f"rev_{stem}", spec.src) if reverse else (spec.src, stem, spec.dst)


def _check_spec(spec: DatasetSpec) -> None:
    types = {t.name for t in spec.node_types}
    for t in spec.node_types:
        if t.row_normalize and not t.features:
            raise ConfigValueError(f"config.dataset.node_types {t.name!r}: row_normalize needs a features file")
    if spec.target not in types:
        raise ConfigValueError(f"config.dataset.target {spec.target!r} is not among dataset.node_types {sorted(types)}")
    for e in spec.edges:
        for side in (e.src, e.dst):
            if side not in types:
                raise ConfigValueError(f"config.dataset.edges {e.file!r}: node type {side!r} not in "
                                       f"dataset.node_types {sorted(types)}")
    if not spec.metapaths:
        raise ConfigValueError("config.dataset.metapaths is empty: give at least one meta-path")
    for m in spec.metapaths:
        if len(m.path) < 3 or m.path[0] != spec.target or m.path[-1] != spec.target:
            raise ConfigValueError(f"config.dataset.metapaths {m.name!r}: path {list(m.path)} must start and end at "
                                   f"{spec.target!r}")


NodeCount = tuple[int, str]
"""A node type's number of nodes and where it comes from (for messages)."""


def _node_count(t: NodeTypeSpec, features: Optional[Tensor], labels: Tensor, spec: DatasetSpec,
                edges: dict[str, Tensor]) -> NodeCount:
    """The rows of the features file, else ``count``, else the labels (target), else the largest edge id + 1."""
    if features is not None:
        if t.count is not None and t.count != features.shape[0]:
            raise ConfigValueError(f"config.dataset.node_types {t.name!r}: count {t.count} but {t.features} has "
                                   f"{features.shape[0]} rows")
        return features.shape[0], f"the rows of {t.features}"
    if t.count is not None:
        return t.count, "config.dataset.node_types count"
    if t.name == spec.target:
        return labels.shape[0], f"the labels in {spec.labels}"
    ids = [edges[e.file][row] for e in spec.edges for row, side in ((0, e.src), (1, e.dst)) if side == t.name]
    return max((int(i.max()) + 1 for i in ids), default=0), "the largest id in its edge files + 1"


def _check_edge_ids(edge_index: Tensor, path: Path, e: EdgeSpec, counts: dict[str, NodeCount]) -> None:
    """Every id of column ``src`` (``dst``) in ``[0, nodes of that type)``, else CorruptData naming the line."""
    for row, (column, side) in enumerate((("src", e.src), ("dst", e.dst))):
        count, origin = counts[side]
        bad = _first_outside(edge_index[row], count)
        if bad is not None:
            line = _edge_lines(path)[bad][0]
            raise CorruptData(f"{path}: line {line}: {column} node id {int(edge_index[row, bad])} is outside "
                              f"[0, {count}): there are {count} {side!r} nodes ({origin})")


def _target_labels(stored: Tensor, path: Path, spec: DatasetSpec, count: NodeCount) -> Tensor:
    """The labels ``stored`` in ``path`` minus ``label_offset`` (one-hot rows as their argmax), one per target
    node, none negative."""
    labels = stored - spec.label_offset
    if labels.dim() == 2:  # one-hot labels
        labels = labels.argmax(1)
    if labels.shape[0] != count[0]:
        raise CorruptData(f"{path}: {labels.shape[0]} labels for {count[0]} {spec.target!r} nodes ({count[1]})")
    if len(labels) and labels.min() < 0:
        node = int(labels.argmin())
        raise CorruptData(f"{path}: node {node} has label {int(labels[node]) + spec.label_offset}, negative after "
                          f"subtracting config.dataset.label_offset={spec.label_offset}")
    return labels


def _load_split(path: Path, target: str, count: NodeCount) -> Tensor:
    """A split's target-node indices, each in ``[0, count)``."""
    index = _read_integers(path, "node indices")
    bad = _first_outside(index, count[0])
    if bad is not None:
        raise CorruptData(f"{path}: entry {bad} is node {int(index[bad])}, outside [0, {count[0]}): there are "
                          f"{count[0]} {target!r} nodes ({count[1]})")
    return index


def load_hetero(spec: DatasetSpec, data_root: str | Path) -> HeteroData:
    """The dataset as ``HeteroData``: features ``x`` (or only ``num_nodes``), both edge directions,
    target ``y`` and the split index tensors ``train_20``, ``val_20``, ``test_20``, ...

    Every file is checked here, before any torch_geometric call (see the module docstring)."""
    _check_spec(spec)
    folder = dataset_dir(spec, data_root)
    data = HeteroData()
    edge_files = {e.file: ensure_file(folder, e.file, spec) for e in spec.edges}
    edges = {name: load_edges(path) for name, path in edge_files.items()}
    labels_file = ensure_file(folder, spec.labels, spec)
    stored_labels = _read_integers(labels_file, "labels", (1, 2))
    counts: dict[str, NodeCount] = {}
    for t in spec.node_types:
        store = data[t.name]
        if t.features:
            store.x = load_features(ensure_file(folder, t.features, spec))
            if t.row_normalize:
                store.x = row_normalize(store.x)
        counts[t.name] = _node_count(t, store.get("x"), stored_labels, spec, edges)
        store.num_nodes = counts[t.name][0]
    for e in spec.edges:
        _check_edge_ids(edges[e.file], edge_files[e.file], e, counts)
        data[edge_type_of(e)].edge_index = edges[e.file]
        data[edge_type_of(e, reverse=True)].edge_index = edges[e.file].flip(0).contiguous()
    target = data[spec.target]
    target.y = _target_labels(stored_labels, labels_file, spec, counts[spec.target])
    for n in spec.splits:
        for part in ("train", "val", "test"):
            path = ensure_file(folder, f"{part}_{n}.npy", spec)
            target[f"{part}_{n}"] = _load_split(path, spec.target, counts[spec.target])
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
    return reach_incidence(data, [edge_type])


def reach_incidence(data: HeteroData, edge_types: list[EdgeType]) -> Tensor:
    """Sparse ``[N_first, N_last]`` incidence whose rows average over the nodes reached through ``edge_types`` in
    turn, each counted once however many paths reach it (empty rows stay 0): MEOW's ``nei_*`` files (binary
    "reached through the path") divided by their row sums, e.g. ``nei_apcp`` for author -> paper -> conference ->
    paper. One hop: the neighbours' mean."""
    reached = None
    for src, rel, dst in edge_types:
        index = data[(src, rel, dst)].edge_index
        hop = torch.sparse_coo_tensor(index, torch.ones(index.shape[1]), (data[src].num_nodes, data[dst].num_nodes))
        reached = hop.coalesce() if reached is None else torch.sparse.mm(reached, hop.coalesce()).coalesce()
    shape = (data[edge_types[0][0]].num_nodes, data[edge_types[-1][2]].num_nodes)
    indices = reached.indices()  # the path counts dropped: reached or not
    degree = torch.zeros(shape[0]).index_add_(0, indices[0], torch.ones(indices.shape[1]))
    values = 1.0 / degree[indices[0]]
    return torch.sparse_coo_tensor(indices, values, shape).coalesce()
