"""CoSQA, the retrieval benchmark the code_search configs evaluate on (``contrasuite data``; docs/data.md).

The training pairs are mined from installed packages (``contrasuite code-search mine``), not downloaded.
"""

from __future__ import annotations

from typing import Any, Mapping

from contrasuite.domains.code_search.data import COSQA_CORPUS, COSQA_FOLDER, COSQA_QUERIES
from contrasuite.domains.data_sources import DataFile, Dataset

_RAW = "https://raw.githubusercontent.com/Jun-jie-Huang/CoCLR/HEAD/data/search"
DATASETS = (
    Dataset(
        name="cosqa",
        files=(DataFile(f"{COSQA_FOLDER}/{COSQA_QUERIES}",
                        "ccdfffee7ae1f1cf1a0406566a61c984f4fbce678c8ea108eedd03d11bff9518", 358032, f"{_RAW}/{COSQA_QUERIES}"),
               DataFile(f"{COSQA_FOLDER}/{COSQA_CORPUS}",
                        "be8a910ca03cb9f1b38a0eba6dc8109eeb8040a40aaba1a467a7b8426d261f3f", 2090564, f"{_RAW}/{COSQA_CORPUS}")),
        source="GitHub Jun-jie-Huang/CoCLR data/search/ (CoSQA, Huang et al., ACL 2021)",
        licence="as the source repository (no licence stated)",
        layout="500 real web queries, each with the index of its Python function (cosqa-retrieval-dev-500.json), "
               "ranked against the 6,267-function corpus (code_idx_map.txt, code -> index); metric MRR",
    ),
)


def uses(config: Mapping[str, Any]) -> tuple[str, ...]:
    """CoSQA unless ``config.eval.cosqa`` is false or names another folder."""
    section = config.get("config", {}).get("eval", {})
    reads = section.get("cosqa", True) and section.get("cosqa_folder", COSQA_FOLDER) == COSQA_FOLDER
    return ("cosqa",) if reads else ()
