"""The anchors' cosine similarities split into positives and negatives, for the plain-loop references of the pair
losses' tests (Circle, Multi-Similarity)."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor


def positives_and_negatives(anchors: Tensor, candidates: Tensor, pos: Tensor,
                            valid: Tensor) -> list[tuple[list[float], list[float]]]:
    """For each anchor with a positive: its cosine similarities (float64) to its valid positive candidates and to its
    valid negative ones, as plain lists."""
    z = F.normalize(anchors.double(), dim=1)
    c = F.normalize(candidates.double(), dim=1)
    rows = []
    for i in range(z.shape[0]):
        sp = [float(z[i] @ c[j]) for j in range(c.shape[0]) if valid[i, j] and pos[i, j]]
        sn = [float(z[i] @ c[j]) for j in range(c.shape[0]) if valid[i, j] and not pos[i, j]]
        if sp:
            rows.append((sp, sn))
    return rows
