"""Similarity functions between anchors ``[N, D]`` and candidates ``[M, D]``, computed in fp32."""

from __future__ import annotations

from typing import Callable

import torch.nn.functional as F
from torch import Tensor

from contrasuite.core.numerics import full_precision, upcast


def cosine(anchors: Tensor, candidates: Tensor, scale: float = 1.0) -> Tensor:
    """``scale * <a_i, c_j> / (|a_i| |c_j|)`` in the loss dtype.

    ``scale`` (e.g. ``1 / t``) multiplies the normalised anchors ``[N, D]`` before the matmul, not the
    ``[N, M]`` result (as open_clip does): the same logits up to rounding, one ``N x M`` step fewer each
    way. Candidates that are the anchors (``candidates=None`` in the contract) are normalised once.
    """
    with full_precision(anchors):
        a = F.normalize(upcast(anchors), dim=-1)
        c = a if candidates is anchors else F.normalize(upcast(candidates), dim=-1)
        return (a * scale if scale != 1.0 else a) @ c.T


def dot(anchors: Tensor, candidates: Tensor, scale: float = 1.0) -> Tensor:
    """``scale * <a_i, c_j>`` in the loss dtype (no normalisation: Soft-InfoNCE's raw scores); ``scale``
    multiplies the anchors before the matmul, as in :func:`cosine`."""
    with full_precision(anchors):
        a = upcast(anchors)
        return (a * scale if scale != 1.0 else a) @ upcast(candidates).T


Similarity = Callable[..., Tensor]
"""``(anchors [N, D], candidates [M, D], scale=1.0) -> [N, M]``."""

SIMILARITIES: dict[str, Similarity] = {"cosine": cosine, "dot": dot}


def get_similarity(name: str) -> Similarity:
    """Look a similarity up by name; the error lists the known names."""
    try:
        return SIMILARITIES[name]
    except KeyError:
        raise ValueError(f"unknown similarity {name!r}; known: {sorted(SIMILARITIES)}") from None
