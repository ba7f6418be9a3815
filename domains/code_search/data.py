"""Datasets: the mined JSONL pairs (:mod:`contrasuite.domains.code_search.mine`) and CoSQA.

CoSQA (Huang et al., ACL 2021, "CoSQA: 20,000+ Web Queries for Code Search and Question Answering")
retrieval dev set as released with CoCLR (github.com/Jun-jie-Huang/CoCLR ``data/search/``):
``cosqa-retrieval-dev-500.json`` (500 web queries; ``doc`` is the query, ``retrieval_idx`` the index of
its function) ranked against ``code_idx_map.txt`` (a JSON dict code string -> index, 6,267 Python
functions). The metric is MRR over the whole corpus. Another query file of the same format (CoCLR's
``cosqa-retrieval-test-500.json``) or folder is chosen by config (``config.eval.cosqa_*``).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

from contrasuite.core.task.errors import DataError

COSQA_FOLDER = "code_search/cosqa"
"""Where CoSQA lives under the data root (``config.eval.cosqa_folder``)."""
COSQA_QUERIES = "cosqa-retrieval-dev-500.json"
COSQA_CORPUS = "code_idx_map.txt"
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
        hint = "" if manifest.is_file() else f" (no manifest.json either); create it with: contrasuite code-search mine --out {folder}"
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


def _read_json(path: Path) -> object:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise DataError(f"{path}: not valid JSON ({err})") from None


def load_cosqa(folder: Path, queries: str = COSQA_QUERIES, corpus: str = COSQA_CORPUS) -> PairSet:
    """CoSQA's ``queries`` file (a JSON list of ``{doc, retrieval_idx}``) against its ``corpus`` in ``folder``.

    A missing file is a ``FileNotFoundError`` naming the config key (``config.eval.cosqa_queries`` or
    ``config.eval.cosqa_corpus``) and the path."""
    folder = Path(folder)
    for key, name in (("cosqa_queries", queries), ("cosqa_corpus", corpus)):
        if not (folder / name).is_file():
            raise FileNotFoundError(
                f"config.eval.{key}: CoSQA file {folder / name} not found; contrasuite data fetch cosqa, or download "
                f"it from {COSQA_SOURCE} (folder: config.eval.cosqa_folder)"
            )
    mapping = _read_json(folder / corpus)
    if not isinstance(mapping, dict):
        raise DataError(f"{folder / corpus}: not a CoSQA corpus (a JSON object code -> index)")
    code = [""] * len(mapping)
    for text, idx in mapping.items():
        code[int(idx)] = text
    entries = _read_json(folder / queries)
    try:
        texts = [e["doc"] for e in entries]
        targets = [int(e["retrieval_idx"]) for e in entries]
    except (KeyError, TypeError, ValueError) as err:
        raise DataError(f"{folder / queries}: not a CoSQA retrieval file (a list of doc, retrieval_idx; {err!r})") from None
    if any(not 0 <= t < len(code) for t in targets):
        raise DataError(f"{folder / queries}: a retrieval_idx lies outside the {len(code)}-function corpus {folder / corpus}")
    return PairSet(texts, code, targets, ["cosqa"] * len(texts))
