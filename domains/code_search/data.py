"""Datasets: the mined JSONL pairs (:mod:`contrasuite.domains.code_search.mine`) and CoSQA.

CoSQA (Huang et al., ACL 2021, "CoSQA: 20,000+ Web Queries for Code Search and Question Answering")
retrieval dev set as released with CoCLR (github.com/Jun-jie-Huang/CoCLR ``data/search/``):
``cosqa-retrieval-dev-500.json`` (500 web queries; ``doc`` is the query, ``retrieval_idx`` the index of
its function) ranked against ``code_idx_map.txt`` (a JSON dict code string -> index, 6,267 Python
functions). The metric is MRR over the whole corpus.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

COSQA_FILES = ("cosqa-retrieval-dev-500.json", "code_idx_map.txt")
COSQA_SOURCE = "https://github.com/Jun-jie-Huang/CoCLR/tree/main/data/search"


@dataclass
class PairSet:
    """Aligned queries and code; ``targets[i]`` is the index in ``code`` of query ``i``'s answer."""

    queries: list[str]
    code: list[str]
    targets: list[int]
    packages: list[str]


def load_split(folder: Path, split: str, limit: int = 0, seed: int = 0) -> PairSet:
    """One split of a mined dataset; ``limit > 0`` keeps a seeded random subset of that many pairs."""
    path = Path(folder) / f"{split}.jsonl"
    if not path.is_file():
        manifest = Path(folder) / "manifest.json"
        hint = "" if manifest.is_file() else " (no manifest.json either: run `contrasuite code-search mine --out DIR`)"
        raise FileNotFoundError(f"config.data.folder: mined split {path} not found{hint}")
    rows = []
    with open(path, encoding="utf-8") as handle:
        for n, line in enumerate(handle, 1):
            try:
                row = json.loads(line)
                rows.append((row["query"], row["code"], row["package"]))
            except (json.JSONDecodeError, KeyError) as err:
                raise ValueError(f"{path}:{n}: not a mined pair ({err})") from None
    if limit and len(rows) > limit:
        rows = [rows[i] for i in sorted(random.Random(seed).sample(range(len(rows)), limit))]
    if not rows:
        raise ValueError(f"{path} holds no pairs")
    return PairSet([r[0] for r in rows], [r[1] for r in rows], list(range(len(rows))), [r[2] for r in rows])


def load_cosqa(data_root: Path) -> PairSet:
    """CoSQA retrieval dev-500 against its 6,267-function corpus, from ``data_root/code_search/cosqa``."""
    folder = Path(data_root) / "code_search" / "cosqa"
    for name in COSQA_FILES:
        if not (folder / name).is_file():
            raise FileNotFoundError(
                f"CoSQA file {name} not found in {folder}; download it from {COSQA_SOURCE} (no network here?)"
            )
    corpus = json.loads((folder / "code_idx_map.txt").read_text(encoding="utf-8"))
    code = [""] * len(corpus)
    for text, idx in corpus.items():
        code[int(idx)] = text
    entries = json.loads((folder / "cosqa-retrieval-dev-500.json").read_text(encoding="utf-8"))
    queries = [e["doc"] for e in entries]
    targets = [int(e["retrieval_idx"]) for e in entries]
    if any(not 0 <= t < len(code) for t in targets):
        raise ValueError(f"{folder}: a retrieval_idx lies outside the {len(code)}-function corpus")
    return PairSet(queries, code, targets, ["cosqa"] * len(queries))
