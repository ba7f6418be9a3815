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

import torch
from torch import Tensor


class Pairs:
    """Which pairs of the ``[N, M]`` similarity matrix are positives, and which take part at all.

    Two forms with the same interface:

    * ``Pairs(pos, valid)``: explicit boolean ``[N, M]`` masks (any pattern);
    * ``Pairs.single_positive(targets, m, exclude_self)``: every anchor ``i`` has exactly one
      positive, column ``targets[i]``; every pair is valid except, with ``exclude_self``, the
      self-pairs ``(i, i)``. The two-view batch and diagonal pairing are this form. It stores only
      ``targets [N]``, so objectives can take index-target fast paths (``F.cross_entropy``, a gather
      of the positive logits) without any ``N x M`` mask; ``pos``, ``valid`` and ``neg`` are still
      built (once, on first access) for code that needs the masks.
    """

    def __init__(self, pos: Tensor, valid: Tensor) -> None:
        self._pos: Tensor | None = pos
        self._valid: Tensor | None = valid
        self.targets: Tensor | None = None
        """``[N]`` column of each anchor's only positive (single-positive form), else ``None``."""
        self.exclude_self = False
        """Single-positive form: the self-pairs ``(i, i)`` are not valid; every other pair is."""
        self.shape: tuple[int, int] = (int(pos.shape[0]), int(pos.shape[1]))

    @classmethod
    def single_positive(cls, targets: Tensor, num_candidates: int, exclude_self: bool = False) -> Pairs:
        """The compact form (class docstring); ``targets [N]`` must avoid ``i`` when ``exclude_self``."""
        pairs = cls.__new__(cls)
        pairs._pos = pairs._valid = None
        pairs.targets, pairs.exclude_self = targets, exclude_self
        pairs.shape = (int(targets.shape[0]), int(num_candidates))
        return pairs

    @property
    def pos(self) -> Tensor:
        """Positive pairs ``[N, M]``."""
        if self._pos is None:
            n, m = self.shape
            pos = torch.zeros(n, m, dtype=torch.bool, device=self.targets.device)
            self._pos = pos.scatter_(1, self.targets[:, None], True)
        return self._pos

    @property
    def valid(self) -> Tensor:
        """Pairs ``[N, M]`` that take part at all (self-pairs excluded when candidates are the anchors)."""
        if self._valid is None:
            valid = torch.ones(self.shape, dtype=torch.bool, device=self.targets.device)
            self._valid = valid.fill_diagonal_(False) if self.exclude_self else valid
        return self._valid

    @property
    def neg(self) -> Tensor:
        """Negative pairs: valid and not positive."""
        return self.valid & ~self.pos

    @property
    def has_pos(self) -> Tensor:
        """``[N]`` anchors with at least one positive."""
        if self.targets is not None:
            return torch.ones(self.shape[0], dtype=torch.bool, device=self.targets.device)
        return self.pos.any(dim=1)

    def positive_indices(self) -> tuple[Tensor, Tensor]:
        """``(rows, cols)`` of the positive pairs in row-major order (``pos.nonzero``, without the scan
        in the single-positive form)."""
        if self.targets is not None:
            return torch.arange(self.shape[0], device=self.targets.device), self.targets
        return self.pos.nonzero(as_tuple=True)

    def negatives_per_anchor(self) -> int | None:
        """The number of negatives of every anchor in the single-positive form, else ``None``."""
        return None if self.targets is None else self.shape[1] - 1 - int(self.exclude_self)


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
    if neg_weight is not None and neg_weight.shape != (n, m):
        raise ValueError(f"neg_weight must be [N, M] = [{n}, {m}], got {list(neg_weight.shape)}")

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
        labels = labels.to(device)
        partner = paired_partner(labels) if self_compare else None
        if partner is not None:
            return candidates, Pairs.single_positive(partner, m, exclude_self=True)
        pos = labels[:, None] == candidate_labels.to(device)[None, :]
    else:
        if self_compare:
            raise ValueError(
                "candidates=None compares anchors with each other: give labels or pos_mask to say which "
                "pairs are positive (for two views, see contrasuite.core.pairs.two_view)"
            )
        if m < n:
            raise ValueError(f"diagonal positives need at least N={n} candidates, got M={m}")
        return candidates, Pairs.single_positive(torch.arange(n, device=device), m)
    valid = torch.ones(n, m, dtype=torch.bool, device=device)
    if self_compare:
        valid.fill_diagonal_(False)
    return candidates, Pairs(pos=pos & valid, valid=valid)


def paired_partner(labels: Tensor) -> Tensor | None:
    """When every label occurs exactly twice (two views, one positive each), the index of the other
    row with the same label; else ``None``. Sorting the labels, not comparing all ``N x N`` pairs."""
    n = labels.shape[0]
    if n == 0 or n % 2:
        return None
    order = torch.argsort(labels, stable=True)
    ranked = labels[order]
    first, second = order[0::2], order[1::2]
    same = (ranked[0::2] == ranked[1::2]).all()
    distinct = (ranked[1::2][:-1] != ranked[2::2]).all()
    if not bool(same & distinct):
        return None
    partner = torch.empty_like(order)
    partner[first] = second
    partner[second] = first
    return partner


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
