"""Unseen-class retrieval evaluation: embed a split, rank the gallery for every query, score.

Protocol (Oh Song et al. 2016; Musgrave et al., "A Metric Learning Reality Check", ECCV 2020):
every image of the split queries all *other* images of the split (In-Shop: queries search the
gallery). Scores are cosine similarities, or negative geodesic distances on the Poincare ball for a
hyperbolic head (Ermolov et al. 2022). Metrics:

* ``recall@K``: percent of queries with a same-class image among their top ``K``;
* ``map@r``: ``1/R sum_{i<=R} P(i) rel(i)`` with ``R`` the number of same-class gallery images
  (mean average precision at R; pytorch-metric-learning's ``mean_average_precision_at_r``), in percent.

Both are percentages, like the other domains' rates (before issue 42 they were fractions).

Queries without any same-class gallery image are left out, as in PML's ``AccuracyCalculator``.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from contrasuite.core.similarity.poincare import pairwise_poincare_distance, to_ball

Scorer = Callable[[Tensor, Tensor], Tensor]


def cosine_scores(queries: Tensor, gallery: Tensor) -> Tensor:
    return F.normalize(queries.float(), dim=1) @ F.normalize(gallery.float(), dim=1).T


def scoring_of(objective: nn.Module) -> dict[str, Any]:
    """How retrieval ranks ``objective``'s embeddings: ``{"score": "cosine"}``, or, when it has a hyperbolic
    term (``hyperbolic()``), ``{"score": "poincare", "c": c, "clip_r": r}``: ``-d_c`` between ``to_ball(x, c, r)``."""
    hyp = objective.hyperbolic() if hasattr(objective, "hyperbolic") else None
    return {"score": "cosine"} if hyp is None else {"score": "poincare", "c": hyp.c, "clip_r": hyp.clip_r}


def scorer(scoring: Mapping[str, Any]) -> Scorer:
    """The scores a :func:`scoring_of` description names."""
    if scoring["score"] == "cosine":
        return cosine_scores
    if scoring["score"] != "poincare":
        raise ValueError(f"unknown retrieval score {scoring['score']!r} (cosine or poincare)")
    c, clip_r = scoring["c"], scoring["clip_r"]

    def poincare_scores(queries: Tensor, gallery: Tensor) -> Tensor:
        q, g = to_ball(queries.float(), c, clip_r), to_ball(gallery.float(), c, clip_r)
        return -pairwise_poincare_distance(q, g, c)

    return poincare_scores


def scorer_for(objective: nn.Module) -> Scorer:
    """Cosine, or ``-d_c`` on the Poincare ball when ``objective`` has a hyperbolic term (:func:`scoring_of`)."""
    return scorer(scoring_of(objective))


def retrieval_metrics(
    queries: Tensor,
    query_labels: Tensor,
    gallery: Tensor,
    gallery_labels: Tensor,
    *,
    same_set: bool,
    ks: Sequence[int] = (1, 2, 4, 8),
    scorer: Scorer = cosine_scores,
    chunk: int = 1024,
) -> dict[str, float]:
    """Recall@K and MAP@R in percent; ``same_set``: queries are the gallery, each query's own entry is excluded."""
    if same_set and len(queries) != len(gallery):
        raise ValueError(f"same_set needs queries == gallery, got {len(queries)} and {len(gallery)}")
    device = queries.device
    query_labels, gallery_labels = query_labels.to(device), gallery_labels.to(device)
    relevant = (query_labels[:, None] == gallery_labels[None, :]).sum(dim=1) - int(same_set)
    keep = relevant > 0
    depth = min(len(gallery) - int(same_set), max(max(ks), int(relevant.max().clamp_min(1))))
    hits = {k: 0.0 for k in ks}
    ap_sum = 0.0
    for start in range(0, len(queries), chunk):
        stop = min(start + chunk, len(queries))
        scores = scorer(queries[start:stop], gallery).float()
        if same_set:
            rows = torch.arange(stop - start, device=device)
            scores[rows, rows + start] = -torch.inf  # drop self from the ranking (not a loss: plain sort)
        top = scores.topk(depth, dim=1).indices
        match = (gallery_labels[top] == query_labels[start:stop, None]).float()
        k_keep = keep[start:stop]
        for k in ks:
            hits[k] += float(match[:, :k].amax(dim=1)[k_keep].sum())
        r = relevant[start:stop].clamp_min(1)
        ranks = torch.arange(1, depth + 1, dtype=torch.float32, device=device)
        within_r = (ranks[None, :] <= r[:, None]).float()
        precision = match.cumsum(dim=1) / ranks
        ap = (precision * match * within_r).sum(dim=1) / r
        ap_sum += float(ap[k_keep].sum())
    n = max(int(keep.sum()), 1)
    out = {f"recall@{k}": 100.0 * hits[k] / n for k in ks}
    out["map@r"] = 100.0 * ap_sum / n
    return out
