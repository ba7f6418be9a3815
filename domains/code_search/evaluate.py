"""Retrieval evaluation: every query ranked against the whole code corpus of its split.

MRR (ties count against the query, as CodeSearchNet's evaluation) and Recall@1/5/10 from
:mod:`contrasuite.core.metrics.retrieval`, reported in percent. Scores are the encoder's dot
products (cosine when it normalises).
"""

from __future__ import annotations

import time
from typing import Sequence

import torch

from contrasuite.core.metrics.retrieval import mean_reciprocal_rank, recall_at_k
from contrasuite.domains.code_search.data import PairSet
from contrasuite.domains.code_search.encoder import BiEncoder


@torch.no_grad()
def retrieval_metrics(query_emb: torch.Tensor, code_emb: torch.Tensor, targets: Sequence[int],
                      ks: Sequence[int] = (1, 5, 10)) -> dict[str, float]:
    """``{mrr, r@K...}`` in percent for queries against the corpus ``code_emb``."""
    target = torch.as_tensor(list(targets), dtype=torch.long)
    scores = query_emb.float() @ code_emb.float().T
    out = {"mrr": 100.0 * mean_reciprocal_rank(scores, target)}
    ks = [k for k in ks if k <= code_emb.shape[0]]
    recalls = recall_at_k(query_emb, target, code_emb, torch.arange(code_emb.shape[0]), ks=ks, normalize=False)
    out.update({f"r@{k}": 100.0 * v for k, v in recalls.items()})
    return out


def evaluate_pairs(encoder: BiEncoder, pairs: PairSet, *, batch_size: int = 64, device: torch.device | str = "cpu",
                   prefix: str = "", max_code_length: int | None = None) -> dict[str, float]:
    """Embed ``pairs`` (queries and the whole corpus) and score them; adds ``{prefix}seconds``."""
    started = time.time()
    q = encoder.embed(pairs.queries, "query", batch_size, device)
    c = encoder.embed(pairs.code, "code", batch_size, device, max_code_length)
    metrics = {f"{prefix}{k}": v for k, v in retrieval_metrics(q, c, pairs.targets).items()}
    metrics[f"{prefix}seconds"] = time.time() - started
    return metrics
