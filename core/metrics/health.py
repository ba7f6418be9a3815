"""Representation health: alignment, uniformity, positive/negative similarity gap, effective rank.

Inputs are ``anchors [N, D]`` and ``candidates [N, D]`` where row ``i`` of each is a positive pair
(two views); every other row is a negative. Embeddings are L2-normalised first and all math is fp32.

* Alignment (Wang & Isola, ICML 2020): ``E ||f(x) - f(x+)||^alpha`` (alpha = 2). Lower is better.
* Uniformity (Wang & Isola 2020): ``log E_{i<j} exp(-t ||f_i - f_j||^2)`` (t = 2). Lower is more uniform.
* Similarity gap: mean positive cosine minus mean negative cosine. Near 0 means no discrimination.
* Effective rank (Roy & Vetterli, EUSIPCO 2007): ``exp(H(p))`` with ``p_k = sigma_k / sum sigma`` the
  normalised singular values of the embedding matrix; 1 means collapse to a line, D means full use.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor


def _normalise(x: Tensor) -> Tensor:
    if x.dim() != 2:
        raise ValueError(f"embeddings must be [N, D], got shape {list(x.shape)}")
    return F.normalize(x.detach().float(), dim=1)


def alignment(anchors: Tensor, candidates: Tensor, alpha: float = 2.0) -> float:
    """``mean_i ||a_i - c_i||^alpha`` on unit vectors."""
    a, c = _normalise(anchors), _normalise(candidates)
    if a.shape != c.shape:
        raise ValueError(f"anchors {list(a.shape)} and candidates {list(c.shape)} must pair row by row")
    return float((a - c).norm(dim=1).pow(alpha).mean())


def uniformity(x: Tensor, t: float = 2.0) -> float:
    """``log mean_{i<j} exp(-t ||x_i - x_j||^2)`` on unit vectors (needs N >= 2)."""
    x = _normalise(x)
    if x.shape[0] < 2:
        raise ValueError("uniformity needs at least 2 embeddings")
    sq = torch.pdist(x).pow(2)
    return float(torch.logsumexp(-t * sq, dim=0) - math.log(sq.numel()))


def similarity_samples(anchors: Tensor, candidates: Tensor) -> tuple[Tensor, Tensor]:
    """Positive cosines ``[N]`` (the diagonal) and negative cosines ``[N*(N-1)]`` (off-diagonal)."""
    a, c = _normalise(anchors), _normalise(candidates)
    sim = a @ c.T
    diag = torch.eye(sim.shape[0], dtype=torch.bool, device=sim.device)
    return sim[diag], sim[~diag]


def similarity_gap(anchors: Tensor, candidates: Tensor) -> float:
    """Mean positive cosine minus mean negative cosine."""
    pos, neg = similarity_samples(anchors, candidates)
    return float(pos.mean() - neg.mean()) if neg.numel() else float(pos.mean())


def effective_rank(x: Tensor, eps: float = 1e-12) -> float:
    """``exp(-sum_k p_k log p_k)``, ``p`` = singular values of ``x`` normalised to sum 1 (in [1, min(N, D)])."""
    sigma = torch.linalg.svdvals(_normalise(x))
    p = sigma / sigma.sum().clamp_min(eps)
    entropy = -(p * torch.log(p.clamp_min(eps))).sum()
    return float(torch.exp(entropy))


def health(anchors: Tensor, candidates: Tensor) -> dict[str, float]:
    """All four statistics (uniformity and effective rank on the anchors)."""
    return {
        "alignment": alignment(anchors, candidates),
        "uniformity": uniformity(anchors),
        "similarity_gap": similarity_gap(anchors, candidates),
        "effective_rank": effective_rank(anchors),
    }
