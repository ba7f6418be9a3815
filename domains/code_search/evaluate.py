"""Retrieval evaluation: every query ranked against the whole code corpus of its split.

MRR (ties count against the query, as CodeSearchNet's evaluation) and Recall@1/5/10 from
:mod:`contrasuite.core.metrics.retrieval`, reported in percent. Scores are the encoder's dot
products (cosine when it normalises). :class:`Embedder` shows each embedding stage through a progress callable and
reads and writes :mod:`contrasuite.domains.code_search.embedding_cache`.
"""

from __future__ import annotations

import time
from typing import Callable, Sequence

import torch

from contrasuite.core.metrics.retrieval import mean_reciprocal_rank, recall_at_k
from contrasuite.core.task.protocol import Progress
from contrasuite.domains.code_search.data import PairSet
from contrasuite.domains.code_search.embedding_cache import EmbeddingCache, encoder_identity, texts_key
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


class Embedder:
    """Embeds evaluation texts with one encoder state: a progress bar per stage, and the on-disk cache.

    Build one per evaluation (the weights are hashed once, at construction, when ``cache`` is set)."""

    def __init__(self, encoder: BiEncoder, *, batch_size: int = 64, device: torch.device | str = "cpu",
                 progress: Progress | None = None, cache: EmbeddingCache | None = None,
                 log: Callable[[str], None] = lambda message: None) -> None:
        self.encoder, self.batch_size, self.device = encoder, batch_size, device
        self.progress, self.cache, self.log = progress, cache, log
        self.identity = encoder_identity(encoder, device) if cache is not None else ""

    def __call__(self, texts: Sequence[str], kind: str, label: str, max_length: int | None = None) -> torch.Tensor:
        """``[len(texts), D]`` embeddings of ``texts`` as ``kind``, from the cache when it holds them."""
        max_length = max_length or self.encoder.max_length(kind)
        key = texts_key(self.identity, kind, max_length, texts) if self.cache is not None else ""
        if self.cache is not None and (emb := self.cache.load(key, len(texts))) is not None:
            self.log(f"{label}: {len(texts):,} embeddings from the cache ({self.cache.path(key)})")
            return emb
        emb = self.encoder.embed(texts, kind, self.batch_size, self.device, max_length, progress=self.progress,
                                 desc=f"{label} ({len(texts):,} texts, {max_length} tokens)")
        if self.cache is not None:
            self.cache.store(key, emb)
        return emb


def evaluate_pairs(embed: Embedder, pairs: PairSet, name: str, *, prefix: str = "",
                   max_code_length: int | None = None) -> dict[str, float]:
    """Embed ``pairs`` (queries and the whole corpus, labelled ``name``) and score them; adds ``{prefix}seconds``."""
    started = time.time()
    q = embed(pairs.queries, "query", f"{name} queries")
    c = embed(pairs.code, "code", f"{name} corpus", max_code_length)
    metrics = {f"{prefix}{k}": v for k, v in retrieval_metrics(q, c, pairs.targets).items()}
    metrics[f"{prefix}seconds"] = time.time() - started
    return metrics
