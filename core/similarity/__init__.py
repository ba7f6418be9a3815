"""Similarity functions between anchors ``[N, D]`` and candidates ``[M, D]``, computed in fp32."""

from __future__ import annotations

from typing import Callable

import torch.nn.functional as F
from torch import Tensor

from contrasuite.core.numerics import full_precision, upcast


def cosine(anchors: Tensor, candidates: Tensor) -> Tensor:
    """``s_ij = <a_i, c_j> / (|a_i| |c_j|)`` in the loss dtype."""
    with full_precision(anchors):
        return F.normalize(upcast(anchors), dim=-1) @ F.normalize(upcast(candidates), dim=-1).T


def dot(anchors: Tensor, candidates: Tensor) -> Tensor:
    """``s_ij = <a_i, c_j>`` in the loss dtype (no normalisation: Soft-InfoNCE's raw scores)."""
    with full_precision(anchors):
        return upcast(anchors) @ upcast(candidates).T


SIMILARITIES: dict[str, Callable[[Tensor, Tensor], Tensor]] = {"cosine": cosine, "dot": dot}


def get_similarity(name: str) -> Callable[[Tensor, Tensor], Tensor]:
    """Look a similarity up by name; the error lists the known names."""
    try:
        return SIMILARITIES[name]
    except KeyError:
        raise ValueError(f"unknown similarity {name!r}; known: {sorted(SIMILARITIES)}") from None
