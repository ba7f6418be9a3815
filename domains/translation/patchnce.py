"""PatchNCE (Park et al., ECCV 2020, Eq. 2-5) expressed through the core pair contract.

At each encoder layer ``l``, ``S`` locations are sampled once and shared by the batch. For image
``b`` the anchors are the projected features of the *output* ``G(x)`` at those locations
(``q [S, D]``) and the candidates the projected features of the *input* ``x`` at the same locations
(``k [S, D]``, detached as in CUT); the positive of anchor ``s`` is candidate ``s`` (the diagonal, the
core contract's default) and every other location of the same image is a negative::

    l(q_s) = -log( exp(q_s.k_s / t) / sum_{s'} exp(q_s.k_s' / t) ),   t = 0.07
    L_PatchNCE = (1 / L) sum_l mean_{b, s} l(q_s)

With ``negatives="image"`` (CUT and FastCUT) the objective is called once per image, so negatives
never cross images; with ``negatives="batch"`` (CUT's ``nce_includes_all_negatives_from_minibatch``,
used for single-image training) one call takes all ``B * S`` patches. The objective is any core
objective built from config terms (InfoNCE by default; DHEL, WEINCE, DCL, ... by name).
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch
from torch import Tensor

NEGATIVE_SOURCES = ("image", "batch")


def patch_nce_layer(objective: Callable[..., Tensor], q: Tensor, k: Tensor, negatives: str = "image") -> Tensor:
    """PatchNCE at one layer: ``q, k [B, S, D]`` (anchors, candidates); the mean per-patch loss."""
    if negatives not in NEGATIVE_SOURCES:
        raise ValueError(f"config.nce.negatives must be one of {NEGATIVE_SOURCES}, got {negatives!r}")
    if q.shape != k.shape or q.dim() != 3:
        raise ValueError(f"query and key patches must both be [B, S, D], got {tuple(q.shape)} and {tuple(k.shape)}")
    k = k.detach()
    if negatives == "batch":
        return objective(q.reshape(-1, q.shape[-1]), k.reshape(-1, k.shape[-1]))
    return torch.stack([objective(q[b], k[b]) for b in range(q.shape[0])]).mean()


def patch_nce(objective: Callable[..., Tensor], queries: Sequence[Tensor], keys: Sequence[Tensor], negatives: str = "image") -> Tensor:
    """Mean over layers of :func:`patch_nce_layer`."""
    if len(queries) != len(keys) or not queries:
        raise ValueError(f"need as many query as key layers (>= 1), got {len(queries)} and {len(keys)}")
    return torch.stack([patch_nce_layer(objective, q, k, negatives) for q, k in zip(queries, keys)]).mean()
