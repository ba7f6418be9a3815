"""The core contract: which (anchor, candidate) pairs are positives, negatives, or ignored.

Every objective compares ``anchors [N, D]`` with ``candidates [M, D]``:

* ``candidates=None``: the anchors are compared with each other and the diagonal (self-pairs) is
  excluded, as in pytorch-metric-learning. Positives then come from ``labels`` or ``pos_mask``.
* ``labels [N]`` (and ``candidate_labels [M]`` when candidates are given): same label = positive.
* ``pos_mask [N, M]``: explicit positives; overrides labels. It may also be a function
  ``pos_mask(rows: slice, cols: slice) -> bool [len(rows), len(cols)]`` of a block's indices, so that
  tiled objectives (:mod:`contrasuite.core.tiling`) never need an ``N x M`` mask.
* neither: positives are the diagonal ``(i, i)`` for ``i < N`` (paired data: image i with text i,
  view 1 row i with view 2 row i). Columns past ``N`` are negatives, so any extra negative source
  (queue, other ranks, generated hard negatives) is just more columns with ``pos_mask = 0``.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

Blocks = Callable[[slice, slice], Tensor]
"""``(rows, cols) -> [len(rows), len(cols)]``: the values of one block of an ``[N, M]`` matrix (positives, weights)."""
SCAN_ELEMENTS = 1 << 22
"""Booleans per block when a function-given ``pos_mask`` is scanned for counts or indices."""


class Pairs:
    """Which pairs of the ``[N, M]`` similarity matrix are positives, and which take part at all.

    Four forms with the same interface:

    * ``Pairs(pos, valid)``: explicit boolean ``[N, M]`` masks (any pattern);
    * ``Pairs.single_positive(targets, m, exclude_self)``: every anchor ``i`` has exactly one
      positive, column ``targets[i]``; every pair is valid except, with ``exclude_self``, the
      self-pairs ``(i, i)``. The two-view batch and diagonal pairing are this form. It stores only
      ``targets [N]``, so objectives can take index-target fast paths (``F.cross_entropy``, a gather
      of the positive logits) without any ``N x M`` mask;
    * ``Pairs.of_labels(labels, candidate_labels, self_offset)``: ``(i, j)`` positive when the labels
      are equal (diagonal pairing at any offset is labels ``arange``);
    * ``Pairs.of_function(pos_blocks, shape, self_offset)``: positives from a function of the block.

    In the last two, ``self_offset`` (``None``: none) makes ``(i, i + self_offset)`` not valid, and
    columns from ``paired_columns`` on (:meth:`with_negative_columns`) are negatives of every anchor.
    The compact forms build ``pos``, ``valid`` and ``neg`` once, on first access, for code that needs
    the masks; :meth:`block`, :meth:`positive_counts` and :meth:`positive_indices` never do.
    """

    def __init__(self, pos: Tensor, valid: Tensor) -> None:
        self._pos: Tensor | None = pos
        self._valid: Tensor | None = valid
        self.targets: Tensor | None = None
        """``[N]`` column of each anchor's only positive (single-positive form), else ``None``."""
        self.exclude_self = False
        """Single-positive form: the self-pairs ``(i, i)`` are not valid; every other pair is."""
        self.shape: tuple[int, int] = (int(pos.shape[0]), int(pos.shape[1]))
        self.labels: tuple[Tensor, Tensor] | None = None
        """Labels form: ``(labels [N], candidate_labels [paired_columns])``."""
        self.pos_blocks: Blocks | None = None
        """Function form: the positives of a block (``Blocks``)."""
        self.self_offset: int | None = None
        self.paired_columns = self.shape[1]
        self.device = pos.device

    @classmethod
    def _compact(cls, n: int, m: int, device: torch.device, self_offset: int | None = None) -> Pairs:
        pairs = cls.__new__(cls)
        pairs._pos = pairs._valid = pairs.targets = pairs.labels = pairs.pos_blocks = None
        pairs.exclude_self, pairs.self_offset = False, self_offset
        pairs.shape, pairs.paired_columns, pairs.device = (int(n), int(m)), int(m), device
        return pairs

    @classmethod
    def single_positive(cls, targets: Tensor, num_candidates: int, exclude_self: bool = False) -> Pairs:
        """The compact form (class docstring); ``targets [N]`` must avoid ``i`` when ``exclude_self``."""
        pairs = cls._compact(targets.shape[0], num_candidates, targets.device)
        pairs.targets, pairs.exclude_self = targets, exclude_self
        return pairs

    @classmethod
    def of_labels(cls, labels: Tensor, candidate_labels: Tensor, self_offset: int | None = None) -> Pairs:
        """Positive where ``labels [N]`` equals ``candidate_labels [M]`` (class docstring)."""
        pairs = cls._compact(labels.shape[0], candidate_labels.shape[0], labels.device, self_offset)
        pairs.labels = (labels, candidate_labels.to(device=labels.device, dtype=labels.dtype))
        return pairs

    @classmethod
    def of_function(cls, pos_blocks: Blocks, shape: tuple[int, int], device: torch.device, self_offset: int | None = None) -> Pairs:
        """Positives from ``pos_blocks(rows, cols)`` over ``shape = (N, M)`` (class docstring)."""
        pairs = cls._compact(shape[0], shape[1], device, self_offset)
        pairs.pos_blocks = pos_blocks
        return pairs

    @classmethod
    def no_positives(cls, n: int, m: int, device: torch.device) -> Pairs:
        """``[n, m]`` pairs that are all negatives."""
        empty = torch.zeros(0, dtype=torch.long, device=device)
        return cls.of_labels(torch.zeros(n, dtype=torch.long, device=device), empty).with_negative_columns(m)

    def with_negative_columns(self, k: int) -> Pairs:
        """These pairs with ``k`` more columns that are negatives of every anchor (valid, never positive)."""
        if self.targets is not None:
            return Pairs.single_positive(self.targets, self.shape[1] + k, self.exclude_self)
        if self.labels is None and self.pos_blocks is None:
            extra = torch.zeros(self.shape[0], k, dtype=torch.bool, device=self.device)
            return Pairs(pos=torch.cat([self.pos, extra], dim=1), valid=torch.cat([self.valid, ~extra], dim=1))
        out = Pairs._compact(self.shape[0], self.shape[1] + k, self.device, self.self_offset)
        out.labels, out.pos_blocks, out.paired_columns = self.labels, self.pos_blocks, self.paired_columns
        return out

    def transposed(self) -> Pairs:
        """The ``[M, N]`` pairs of the candidates against the anchors (no negative-only columns allowed)."""
        if self.paired_columns != self.shape[1]:
            raise ValueError("transposed: these pairs have negative-only columns")
        offset = None if self.self_offset is None else -self.self_offset
        if self.targets is not None:
            columns = torch.arange(self.shape[1], device=self.device)
            if self.shape[0] == self.shape[1]:
                inverse = torch.empty_like(self.targets).scatter_(0, self.targets, columns)
                if bool((self.targets[inverse] == columns).all()):  # a permutation
                    return Pairs.single_positive(inverse, self.shape[0], self.exclude_self)
            return Pairs.of_labels(columns, self.targets, 0 if self.exclude_self else None)
        if self.labels is not None:
            return Pairs.of_labels(self.labels[1], self.labels[0], offset)
        if self.pos_blocks is not None:
            blocks = self.pos_blocks
            return Pairs.of_function(lambda rows, cols: blocks(cols, rows).T, self.shape[::-1], self.device, offset)
        return Pairs(pos=self.pos.T.contiguous(), valid=self.valid.T.contiguous())

    def block(self, rows: slice, cols: slice) -> tuple[Tensor, Tensor | None]:
        """``(pos, valid)`` of the block ``[rows, cols]`` (``valid`` ``None`` when every pair of it is);
        ``pos`` is always within ``valid``. ``rows`` and ``cols`` are slices with integer bounds."""
        if self._pos is not None and self._valid is not None:
            return self._pos[rows, cols], self._valid[rows, cols]
        r = torch.arange(rows.start, rows.stop, device=self.device)
        c = torch.arange(cols.start, cols.stop, device=self.device)
        if self.targets is not None:
            pos = self.targets[rows, None] == c[None, :]
            return pos, ((r[:, None] != c[None, :]) if self.exclude_self else None)
        paired = slice(cols.start, max(cols.start, min(cols.stop, self.paired_columns)))
        if self.labels is not None:
            pos = self.labels[0][rows, None] == self.labels[1][None, paired]
        else:
            pos = self.pos_blocks(rows, paired).to(device=self.device, dtype=torch.bool)
        if paired.stop < cols.stop:
            pos = torch.cat([pos, pos.new_zeros(pos.shape[0], cols.stop - paired.stop)], dim=1)
        if self.self_offset is None:
            return pos, None
        valid = (r[:, None] + self.self_offset) != c[None, :]
        return pos & valid, valid

    def _full(self) -> tuple[Tensor, Tensor]:
        pos, valid = self.block(slice(0, self.shape[0]), slice(0, self.shape[1]))
        return pos, (torch.ones(self.shape, dtype=torch.bool, device=self.device) if valid is None else valid)

    @property
    def pos(self) -> Tensor:
        """Positive pairs ``[N, M]``."""
        if self._pos is None:
            self._pos = self._full()[0]
        return self._pos

    @property
    def valid(self) -> Tensor:
        """Pairs ``[N, M]`` that take part at all (self-pairs excluded when candidates are the anchors)."""
        if self._valid is None:
            self._valid = self._full()[1]
        return self._valid

    @property
    def neg(self) -> Tensor:
        """Negative pairs: valid and not positive."""
        return self.valid & ~self.pos

    @property
    def has_pos(self) -> Tensor:
        """``[N]`` anchors with at least one positive."""
        if self.targets is not None:
            return torch.ones(self.shape[0], dtype=torch.bool, device=self.device)
        if self.labels is None and self.pos_blocks is None:
            return self.pos.any(dim=1)
        return self.positive_counts() > 0

    def positive_counts(self) -> Tensor:
        """``[N]`` number of positives of each anchor (long), without an ``N x M`` mask in any compact form."""
        if self.targets is not None:
            return torch.ones(self.shape[0], dtype=torch.long, device=self.device)
        if self.labels is not None:
            return self._label_ranges()[2]
        if self.pos_blocks is not None:
            return torch.cat([pos.sum(dim=1) for _, pos in self._row_bands()])
        return self.pos.sum(dim=1)

    def positive_indices(self) -> tuple[Tensor, Tensor]:
        """``(rows, cols)`` of the positive pairs in row-major order (``pos.nonzero``, without an ``N x M``
        mask in any compact form)."""
        if self.targets is not None:
            return torch.arange(self.shape[0], device=self.device), self.targets
        if self.labels is not None:
            order, start, count = self._label_ranges(keep_self=True)
            rows = torch.repeat_interleave(torch.arange(self.shape[0], device=self.device), count)
            first = torch.cumsum(count, dim=0) - count
            cols = order[start[rows] + torch.arange(rows.shape[0], device=self.device) - first[rows]]
            if self.self_offset is None:
                return rows, cols
            keep = cols != rows + self.self_offset
            return rows[keep], cols[keep]
        if self.pos_blocks is not None:
            found = [(r0, pos.nonzero(as_tuple=True)) for r0, pos in self._row_bands()]
            empty = torch.zeros(0, dtype=torch.long, device=self.device)
            rows = torch.cat([empty] + [r0 + rc[0] for r0, rc in found])
            return rows, torch.cat([empty] + [rc[1] for _, rc in found])
        return self.pos.nonzero(as_tuple=True)

    def _label_ranges(self, keep_self: bool = False) -> tuple[Tensor, Tensor, Tensor]:
        """Labels form: ``(order, start, count)``: ``candidate_labels[order]`` is sorted (stably) and
        anchor ``i``'s equal labels are ``order[start_i : start_i + count_i]``; ``count`` leaves out
        the self-pair unless ``keep_self``."""
        labels, candidate_labels = self.labels
        ranked, order = torch.sort(candidate_labels, stable=True)
        start = torch.searchsorted(ranked, labels, side="left")
        count = torch.searchsorted(ranked, labels, side="right") - start
        if self.self_offset is not None and not keep_self and self.paired_columns:
            own = torch.arange(self.shape[0], device=self.device) + self.self_offset
            inside = (own >= 0) & (own < self.paired_columns)
            count = count - (inside & (candidate_labels[own.clamp(0, self.paired_columns - 1)] == labels)).long()
        return order, start, count

    def _row_bands(self) -> list[tuple[int, Tensor]]:
        """Function form: ``(first row, pos)`` of bands of rows against every column, of about
        :data:`SCAN_ELEMENTS` pairs each."""
        n, m = self.shape
        band = max(1, SCAN_ELEMENTS // max(m, 1))
        return [(r0, self.block(slice(r0, min(r0 + band, n)), slice(0, m))[0]) for r0 in range(0, n, band)]

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
    pos_mask: Tensor | Blocks | None = None,
    neg_weight: Tensor | Blocks | None = None,
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
    if neg_weight is not None and not callable(neg_weight) and neg_weight.shape != (n, m):
        raise ValueError(f"neg_weight must be [N, M] = [{n}, {m}], got {list(neg_weight.shape)}")

    if callable(pos_mask):
        return candidates, Pairs.of_function(pos_mask, (n, m), device, 0 if self_compare else None)
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
        return candidates, Pairs.of_labels(labels, candidate_labels, 0 if self_compare else None)
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
