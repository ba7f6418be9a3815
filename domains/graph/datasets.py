"""The heterogeneous graphs the graph configs read (``contrasuite data``; docs/data.md).

Each file's URL and SHA-256 come from the dataset descriptions the configs extend
(``configs/graph/datasets/<name>.yaml``, ``dataset.url`` and ``dataset.sha256``), the same ones the loader
downloads a missing file with, so the checksums are written once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import yaml

from contrasuite.domains.data_sources import DataFile, Dataset

DESCRIPTIONS = Path(__file__).resolve().parents[2] / "configs" / "graph" / "datasets"
"""``configs/graph/datasets`` of a checkout, ``contrasuite/configs/graph/datasets`` of a wheel."""
_BYTES = {"acm": 3296280, "dblp": 4783565, "imdb": 1255823}
_TARGETS = {"acm": "papers (3 classes)", "dblp": "authors (4 classes)", "imdb": "movies (3 classes)"}


def _dataset(name: str) -> Dataset:
    spec = yaml.safe_load((DESCRIPTIONS / f"{name}.yaml").read_text())["config"]["dataset"]
    url = spec["url"].rstrip("/")
    return Dataset(
        name=f"graph-{name}",
        files=tuple(DataFile(f"graph/{name}/{file}", digest, None, f"{url}/{file}")
                    for file, digest in sorted(spec["sha256"].items())),
        source="GitHub jianxiangyu/MEOW data/ (the same data as liun-online/HeCo)",
        licence="as the source repository (no licence stated)",
        layout=f"HeCo/MEOW layout, target nodes {_TARGETS[name]}: typed edge lists (*.txt, 'src dst' a line), "
               "features *_feat.npz, labels.npy, splits {train,val,test}_{20,40,60}.npy, reference meta-path "
               "adjacencies and neighbour lists",
        total_bytes=_BYTES[name],
    )


DATASETS = tuple(_dataset(name) for name in _BYTES)


def uses(config: Mapping[str, Any]) -> tuple[str, ...]:
    """``graph-<config.dataset.name>`` when that is a declared dataset."""
    name = f"graph-{config.get('config', {}).get('dataset', {}).get('name', '')}"
    return (name,) if any(d.name == name for d in DATASETS) else ()
