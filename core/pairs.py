"""The core contract: which (anchor, candidate) pairs are positives, negatives, or ignored.

Every objective compares ``anchors [N, D]`` with ``candidates [M, D]``:

* ``candidates=None``: the anchors are compared with each other and the diagonal (self-pairs) is
  excluded, as in pytorch-metric-learning. Positives then come from ``labels`` or ``pos_mask``.
* ``labels [N]`` (and ``candidate_labels [M]`` when candidates are given): same label = positive.
* ``pos_mask [N, M]``: explicit positives; overrides labels.
* neither: positives are the diagonal ``(i, i)`` for ``i < N`` (paired data: image i with text i,
  view 1 row i with view 2 row i). Columns past ``N`` are negatives, so any extra negative source
  (queue, other ranks, generated hard negatives) is just more columns with ``pos_mask = 0``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class Pairs:
    """Boolean masks over the ``[N, M]`` similarity matrix."""

    pos: Tensor
    """Positive pairs."""
    valid: Tensor
    """Pairs that take part at all (self-pairs excluded when candidates are the anchors)."""

    @property
    def neg(self) -> Tensor:
        """Negative pairs: valid and not positive."""
        return self.valid & ~self.pos

    @property
    def has_pos(self) -> Tensor:
        """``[N]`` anchors with at least one positive."""
        return self.pos.any(dim=1)


def check_shapes(anchors: Tensor, candidates: Tensor | None) -> None:
    """Raise a ``ValueError`` naming the argument unless anchors are ``[N, D]`` and candidates ``[M, D]``."""
    if anchors.dim() != 2:
        raise ValueError(f"anchors must be [N, D], got shape {tuple(anchors.shape)}")
    if candidates is not None and (candidates.dim() != 2 or candidates.shape[1] != anchors.shape[1]):
        raise ValueError(
            f"candidates must be [M, {anchors.shape[1]}] to match anchors {tuple(anchors.shape)}, "
            f"got {tuple(candidates.shape)}"
        )


def resolve_pairs(
    anchors: Tensor,
    candidates: Tensor | None = None,
    *,
    labels: Tensor | None = None,
    candidate_labels: Tensor | None = None,
    pos_mask: Tensor | None = None,
    neg_weight: Tensor | None = None,
) -> tuple[Tensor, Pairs]:
    """Return ``(candidates, pairs)`` following the contract in this module's docstring.

    ``neg_weight`` is only checked: it must be ``[N, M]`` when given.
    """
    check_shapes(anchors, candidates)
    n = anchors.shape[0]
    self_compare = candidates is None
    if self_compare:
        candidates = anchors
        candidate_labels = labels
    m = candidates.shape[0]
    device = anchors.device
    valid = torch.ones(n, m, dtype=torch.bool, device=device)
    if self_compare:
        valid.fill_diagonal_(False)

    if pos_mask is not None:
        if pos_mask.shape != (n, m):
            raise ValueError(f"pos_mask must be [N, M] = [{n}, {m}], got {tuple(pos_mask.shape)}")
        pos = pos_mask.to(device=device, dtype=torch.bool)
    elif labels is not None:
        if labels.shape != (n,):
            raise ValueError(f"labels must be [N] = [{n}], got {tuple(labels.shape)}")
        if candidate_labels is None:
            if m != n:
                raise ValueError("labels with separate candidates of another size need candidate_labels [M]")
            candidate_labels = labels
        if candidate_labels.shape != (m,):
            raise ValueError(f"candidate_labels must be [M] = [{m}], got {tuple(candidate_labels.shape)}")
        pos = labels.to(device)[:, None] == candidate_labels.to(device)[None, :]
    else:
        if self_compare:
            raise ValueError(
                "candidates=None compares anchors with each other: give labels or pos_mask to say which "
                "pairs are positive (for two views, see contrasuite.core.pairs.two_view)"
            )
        if m < n:
            raise ValueError(f"diagonal positives need at least N={n} candidates, got M={m}")
        pos = torch.eye(n, m, dtype=torch.bool, device=device)
    if neg_weight is not None and neg_weight.shape != (n, m):
        raise ValueError(f"neg_weight must be [N, M] = [{n}, {m}], got {list(neg_weight.shape)}")
    return candidates, Pairs(pos=pos & valid, valid=valid)


def two_view(view1: Tensor, view2: Tensor) -> tuple[Tensor, Tensor]:
    """Stack two views ``[N, D]`` into SimCLR's ``2N`` batch; returns ``(anchors, labels)``.

    With ``candidates=None`` this gives NT-Xent: each row's positive is its other view and the
    ``2N - 2`` remaining rows are negatives.
    """
    if view1.shape != view2.shape:
        raise ValueError(f"views must have the same shape, got {tuple(view1.shape)} and {tuple(view2.shape)}")
    n = view1.shape[0]
    labels = torch.arange(n, device=view1.device).repeat(2)
    return torch.cat([view1, view2], dim=0), labels


def append_negatives(candidates: Tensor, pos_mask: Tensor | None, negatives: Tensor, n_anchors: int) -> tuple[Tensor, Tensor]:
    """Add ``negatives [K, D]`` as extra candidate columns that are positive for no anchor.

    ``pos_mask=None`` means diagonal positives over the existing candidates.
    """
    m = candidates.shape[0]
    if pos_mask is None:
        pos_mask = torch.eye(n_anchors, m, dtype=torch.bool, device=candidates.device)
    extra = torch.zeros(n_anchors, negatives.shape[0], dtype=torch.bool, device=candidates.device)
    return torch.cat([candidates, negatives.to(candidates.dtype)], dim=0), torch.cat([pos_mask, extra], dim=1)
