"""A bad graph data file is refused before torch_geometric sees it (a negative node id used to crash its
native code): ``contrasuite train`` exits 2 with one stderr line naming the file (and the line, the id and
the allowed range, or the node), writes no checkpoint and leaves the data as it was."""

from pathlib import Path
from typing import Callable

import numpy as np
import pytest
import scipy.sparse as sp

from contrasuite.core.task.errors import ConfigValueError, CorruptData
from contrasuite.domains.graph.data import DatasetSpec, EdgeSpec, MetaPathSpec, NodeTypeSpec, load_hetero
from contrasuite.pipelines.cli import main

ACM_FILES = ("a_feat.npz", "p_feat.npz", "pa.txt", "ps.txt", "labels.npy",
             *(f"{part}_{n}.npy" for part in ("train", "val", "test") for n in (20, 40, 60)))


def _replace_line(number: int, text: str) -> Callable[[Path], None]:
    def corrupt(path: Path) -> None:
        lines = path.read_text().splitlines()
        lines[number - 1] = text
        path.write_text("\n".join(lines) + "\n")

    return corrupt


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:100])


def _nan_in_row(row: int) -> Callable[[Path], None]:
    def corrupt(path: Path) -> None:
        matrix = sp.load_npz(path).astype(np.float32).tolil()
        matrix[row, 3] = np.nan
        sp.save_npz(path, matrix.tocsr())

    return corrupt


CASES = {
    "negative id": ("pa.txt", _replace_line(7, "-5\t2795"), ["line 7", "src node id -5", "[0, 4019)", "'paper'"]),
    "id too large": ("pa.txt", _replace_line(9, "3\t7167"), ["line 9", "dst node id 7167", "[0, 7167)", "'author'"]),
    "three columns": ("pa.txt", _replace_line(3, "0\t2336\t1"), ["line 3", "2 columns", "got 3"]),
    "one column": ("ps.txt", _replace_line(5, "4"), ["line 5", "2 columns", "got 1"]),
    "not an integer": ("pa.txt", _replace_line(2, "0\t23.5"), ["line 2", "integers", "23.5"]),
    "nan feature": ("p_feat.npz", _nan_in_row(17), ["node 17", "non-finite", "nan"]),
    "truncated npz": ("a_feat.npz", _truncate, ["corrupt or truncated"]),
    "truncated labels": ("labels.npy", _truncate, ["corrupt or truncated"]),
    "truncated split": ("test_20.npy", _truncate, ["corrupt or truncated"]),
}


@pytest.fixture
def acm_root(graph_data, tmp_path) -> Path:
    """A data root holding a writable copy of the ACM files the ACM configs read."""
    source = graph_data("acm")
    folder = tmp_path / "data" / "graph" / "acm"
    folder.mkdir(parents=True)
    for name in ACM_FILES:
        (folder / name).write_bytes((source / name).read_bytes())
    return tmp_path / "data"


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("case", list(CASES))
def test_train_refuses_a_bad_acm_file_in_one_line(case, acm_root, tmp_path, capsys):
    name, corrupt, named = CASES[case]
    folder = acm_root / "graph" / "acm"
    corrupt(folder / name)
    before = _files(folder)
    runs = tmp_path / "runs"
    code = main(["train", "graph/reduced/meow_acm", "--data-root", str(acm_root), f"run.output_root={runs}",
                 "run.device=cpu", "run.progress=false"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1, lines
    assert str(folder / name) in lines[0] and all(n in lines[0] for n in named), lines[0]
    assert _files(folder) == before
    assert not [p for p in runs.rglob("*") if p.suffix in (".pt", ".csv")]


def _spec(block: dict) -> DatasetSpec:
    return DatasetSpec(**{**block, "node_types": [NodeTypeSpec(**t) for t in block["node_types"]],
                          "edges": [EdgeSpec(**e) for e in block["edges"]],
                          "metapaths": [MetaPathSpec(**m) for m in block["metapaths"]]})


def test_a_negative_id_of_a_type_counted_from_its_edges(tmp_path, make_tiny_graph):
    block = make_tiny_graph(tmp_path / "tiny", 2)
    block["node_types"][2] = {"name": "ctx1"}  # no count: the largest id in ic1.txt + 1
    _replace_line(4, "4 -2")(tmp_path / "tiny" / "ic1.txt")
    with pytest.raises(CorruptData, match=r"ic1\.txt: line 4: dst node id -2 is outside \[0, 15\)"):
        load_hetero(_spec(block), tmp_path)


def test_split_indices_and_dense_features_are_checked(tmp_path, make_tiny_graph):
    block = make_tiny_graph(tmp_path / "tiny", 2)
    folder = tmp_path / "tiny"
    np.save(folder / "val_5.npy", np.array([0, 60]))
    with pytest.raises(CorruptData, match=r"val_5\.npy: entry 1 is node 60, outside \[0, 60\)"):
        load_hetero(_spec(block), tmp_path)
    np.save(folder / "val_5.npy", np.array([0, 1]))
    features = np.load(folder / "i_feat.npz")
    features[4, 2] = np.inf
    with (folder / "i_feat.npz").open("wb") as fh:
        np.save(fh, features)
    with pytest.raises(CorruptData, match=r"i_feat\.npz: node 4 \(row 4\) has a non-finite feature inf"):
        load_hetero(_spec(block), tmp_path)


def test_an_empty_edge_file_and_a_count_the_file_contradicts(tmp_path, make_tiny_graph):
    block = make_tiny_graph(tmp_path / "tiny", 2)
    (tmp_path / "tiny" / "ic1.txt").write_text("\n")
    with pytest.raises(CorruptData, match=r"ic1\.txt: no 'src dst' lines"):
        load_hetero(_spec(block), tmp_path)
    block = make_tiny_graph(tmp_path / "tiny2", 2)
    block["node_types"][1]["count"] = 99
    with pytest.raises(ConfigValueError, match=r"config\.dataset\.node_types 'ctx0': count 99 but c0_feat\.npz has 15"):
        load_hetero(_spec(block), tmp_path)
