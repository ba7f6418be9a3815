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

The head hands over ``z / (|z| + 1e-7)`` (CUT's ``Normalize``). With ``patch_norm="official"`` (the
default) the logits are the dot products of those vectors, as in CUT: :func:`objective_terms` gives
every term that takes a ``similarity`` (InfoNCE) ``similarity: dot``. With ``patch_norm="unit"`` the
terms keep their own similarity, InfoNCE's ``cosine``, which renormalises the patches to unit length
(the behaviour before the official one became the default). Objectives without a ``similarity``
option (DCL, DHEL, WEINCE, ...) compare by cosine, i.e. renormalise, under either setting.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import torch
from torch import Tensor

from contrasuite.core.objectives.compose import OBJECTIVES
from contrasuite.core.task.errors import ConfigValueError

NEGATIVE_SOURCES = ("image", "batch")
PATCH_NORMS = ("official", "unit")


def objective_terms(terms: Sequence[Mapping[str, Any]], patch_norm: str = "official") -> list[dict[str, Any]]:
    """``config.objective.terms`` for PatchNCE under ``config.nce.patch_norm`` (module docstring).

    ``official``: ``similarity: dot`` for every term whose objective takes a ``similarity``; a term that
    asks for ``cosine`` contradicts it and is refused. ``unit``: the terms unchanged."""
    if patch_norm not in PATCH_NORMS:
        raise ConfigValueError(f"config.nce.patch_norm must be one of {PATCH_NORMS}, got {patch_norm!r}")
    out = [dict(t) for t in terms]
    if patch_norm == "unit":
        return out
    for i, term in enumerate(out):
        cls = OBJECTIVES.get(term.get("name"))
        if cls is None or not cls.chooses_similarity:
            continue
        if term.setdefault("similarity", "dot") != "dot":
            raise ConfigValueError(f"config.objective.terms.{i}.similarity={term['similarity']!r} renormalises the patches, "
                             "which contradicts config.nce.patch_norm=official (CUT's z / (|z| + 1e-7) and dot "
                             "products); drop it or set config.nce.patch_norm=unit")
    return out


def patch_nce_layer(objective: Callable[..., Tensor], q: Tensor, k: Tensor, negatives: str = "image") -> Tensor:
    """PatchNCE at one layer: ``q, k [B, S, D]`` (anchors, candidates); the mean per-patch loss."""
    if negatives not in NEGATIVE_SOURCES:
        raise ConfigValueError(f"config.nce.negatives must be one of {NEGATIVE_SOURCES}, got {negatives!r}")
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
