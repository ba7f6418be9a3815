"""Retrieval metrics: Recall@K, MAP@R and MRR, torch only, chunked over queries.

Similarity is cosine by default (``normalize=True``), which ranks like pytorch-metric-learning's
default (L2 distance on normalised embeddings). Each chunk of queries is scored against the whole
gallery, so memory is ``chunk_size x G``.

* Recall@K (deep metric learning, Song et al. 2016; also "precision@1" at K=1): the fraction of
  queries with at least one same-label item among their K nearest gallery items.
  ``gallery=None`` is the leave-one-out protocol of the unseen-class benchmarks (CUB, Cars, SOP):
  every test item queries all other test items.
* MAP@R (Musgrave et al., "A Metric Learning Reality Check", ECCV 2020): for a query with ``R``
  same-label gallery items, ``MAP@R = (1/R) sum_{i=1..R} P(i) rel(i)`` over its R nearest items, with
  ``P(i)`` the precision at rank i; averaged over queries (pytorch-metric-learning's
  ``AccuracyCalculator`` ``mean_average_precision_at_r``). Queries with ``R = 0`` are skipped.
* MRR: mean of ``1 / rank`` of the correct item in a score matrix; ties count against the query
  (rank = number of items scoring at least as high), as in CodeSearchNet's evaluation.
"""

from __future__ import annotations

from typing import Iterator, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor


def _chunks(n: int, chunk_size: int) -> Iterator[slice]:
    if chunk_size <= 0:
        raise ValueError(f"chunk_size must be > 0, got {chunk_size}")
    for start in range(0, n, chunk_size):
        yield slice(start, min(n, start + chunk_size))


def _prepare(query: Tensor, query_labels: Tensor, gallery: Tensor | None, gallery_labels: Tensor | None,
             normalize: bool) -> tuple[Tensor, Tensor, Tensor, bool]:
    if query.dim() != 2 or query_labels.shape != (query.shape[0],):
        raise ValueError(f"query must be [Q, D] with query_labels [Q], got {tuple(query.shape)}, {tuple(query_labels.shape)}")
    leave_one_out = gallery is None
    if leave_one_out:
        gallery, gallery_labels = query, query_labels
    elif gallery_labels is None or gallery.dim() != 2 or gallery_labels.shape != (gallery.shape[0],) or gallery.shape[1] != query.shape[1]:
        raise ValueError("gallery must be [G, D] (same D as query) with gallery_labels [G]")
    q, g = query.detach().float(), gallery.detach().float()
    if normalize:
        q, g = F.normalize(q, dim=1), F.normalize(g, dim=1)
    return q, g, gallery_labels.to(query.device), leave_one_out


def _scores(q: Tensor, g: Tensor, rows: slice, leave_one_out: bool) -> Tensor:
    """Similarities of a query chunk; in leave-one-out mode each query's own entry is pushed last."""
    s = q[rows] @ g.T
    if leave_one_out:
        idx = torch.arange(rows.start, rows.stop, device=s.device)
        s[idx - rows.start, idx] = torch.finfo(s.dtype).min
    return s


@torch.no_grad()
def recall_at_k(query: Tensor, query_labels: Tensor, gallery: Tensor | None = None, gallery_labels: Tensor | None = None,
                ks: Sequence[int] = (1, 2, 4, 8), *, normalize: bool = True, chunk_size: int = 1024) -> dict[int, float]:
    """``{K: Recall@K}``; ``gallery=None`` runs the leave-one-out protocol (see the module docstring)."""
    q, g, g_labels, loo = _prepare(query, query_labels, gallery, gallery_labels, normalize)
    k_max = max(ks)
    available = g.shape[0] - (1 if loo else 0)
    if k_max > available:
        raise ValueError(f"ks asks for K={k_max} neighbours but the gallery offers {available}")
    hits = {k: 0 for k in ks}
    for rows in _chunks(q.shape[0], chunk_size):
        nn_idx = _scores(q, g, rows, loo).topk(k_max, dim=1).indices
        match = g_labels[nn_idx] == query_labels[rows].to(g_labels.device)[:, None]
        first = torch.where(match.any(dim=1), match.float().argmax(dim=1), torch.full_like(nn_idx[:, 0], k_max))
        for k in ks:
            hits[k] += int((first < k).sum())
    return {k: hits[k] / q.shape[0] for k in ks}


@torch.no_grad()
def map_at_r(query: Tensor, query_labels: Tensor, gallery: Tensor | None = None, gallery_labels: Tensor | None = None,
             *, normalize: bool = True, chunk_size: int = 1024) -> float:
    """MAP@R (Musgrave et al. 2020); ``gallery=None`` is leave-one-out (the query is not its own match)."""
    q, g, g_labels, loo = _prepare(query, query_labels, gallery, gallery_labels, normalize)
    q_labels = query_labels.to(g_labels.device)
    counts = (q_labels[:, None] == g_labels[None, :]).sum(dim=1) - (1 if loo else 0)
    r_max = int(counts.max()) if counts.numel() else 0
    total, n_used = 0.0, 0
    if r_max == 0:
        raise ValueError("MAP@R: no query has a same-label item in the gallery")
    for rows in _chunks(q.shape[0], chunk_size):
        r = counts[rows]
        nn_idx = _scores(q, g, rows, loo).topk(min(r_max, g.shape[0]), dim=1).indices
        rel = (g_labels[nn_idx] == q_labels[rows][:, None]).float()
        rank = torch.arange(1, rel.shape[1] + 1, device=rel.device, dtype=rel.dtype)
        within_r = rank[None, :] <= r[:, None]
        rel = rel * within_r
        precision = rel.cumsum(dim=1) / rank
        ap = (precision * rel).sum(dim=1) / r.clamp_min(1)
        keep = r > 0
        total += float(ap[keep].sum())
        n_used += int(keep.sum())
    return total / n_used


@torch.no_grad()
def mean_reciprocal_rank(scores: Tensor, target: Tensor, *, chunk_size: int = 4096) -> float:
    """MRR of ``target [Q]`` (index of each query's correct item) in ``scores [Q, G]``; ties count against."""
    if scores.dim() != 2 or target.shape != (scores.shape[0],):
        raise ValueError(f"scores must be [Q, G] and target [Q], got {tuple(scores.shape)} and {tuple(target.shape)}")
    if ((target < 0) | (target >= scores.shape[1])).any():
        raise ValueError(f"target indices must lie in [0, {scores.shape[1]})")
    total = 0.0
    for rows in _chunks(scores.shape[0], chunk_size):
        s = scores[rows].float()
        correct = s.gather(1, target[rows, None].to(s.device))
        rank = (s >= correct).sum(dim=1).double()
        total += float((1.0 / rank).sum())
    return total / scores.shape[0]
