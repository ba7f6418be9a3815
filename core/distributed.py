"""The distributed layer: rank helpers, gathers with and without gradient, the ring, and one distributed call.

``distributed_objective(objective, anchors, candidates)`` runs any objective on a batch split over
the ranks of a process group and applies the objective's declared
:class:`~contrasuite.core.objectives.base.Distributed` behaviour:

* ``GATHER_CANDIDATES``: each rank scores its local anchors against every rank's candidates, gathered
  with gradient (open_clip's ``local_loss=True, gather_with_grad=True``).
* ``PAIRWISE_RING``: candidate blocks travel round a ring with autograd-aware send/recv; each rank
  sums the pair terms of its anchors against each block in turn (SigLIP, Zhai et al. 2023), so no
  rank ever holds all candidates at once.
* ``GLOBAL_STATISTICS``: the objective needs statistics of the whole batch (WEINCE's ``rho_0``
  quantile over all anchors); anchors and candidates are gathered with gradient and the objective
  runs on the global batch, so its statistics are exactly the single-process ones.

The two efficient paths call ``objective.per_anchor_fp32`` when the objective declares
``per_anchor_mean`` (its loss is the base class's mean of per-anchor terms). The ring also accepts an
objective that does not when its ``loss_of_pairs`` returns (sum of pair terms) / max(anchors with a
positive, 1), as SigLIP's does. Neither builds an ``N x M`` mask (labels and diagonals stay labels),
so a tiled objective (:mod:`contrasuite.core.tiling`) stays tiled: local rows against gathered
columns, or each ring block. Any other objective (CLIP's symmetric loss) runs the global-batch path,
which is exact for any objective at W times the compute.

Gradient convention (same as open_clip and DDP): the loss returned on every rank is scaled so that
**the mean over ranks equals the single-process loss**, and the gather's backward hands each rank the
sum over ranks of the gradient of its own slice. So the gradient at a rank's local inputs is
``W x`` the single-process gradient; DDP averages parameter gradients over the ``W`` ranks, which
cancels the factor and gives exactly the single-process gradient. Do not divide the loss by ``W``
yourself, and do not use a gather without gradient (remote columns would get none).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn

from contrasuite.core.objectives.base import ContrastiveObjective, Distributed
from contrasuite.core.pairs import Pairs


def world(group: Any = None) -> tuple[int, int]:
    """``(rank, world_size)`` of ``group``; ``(0, 1)`` when torch.distributed is not initialised."""
    if not (dist.is_available() and dist.is_initialized()):
        return 0, 1
    return dist.get_rank(group), dist.get_world_size(group)


def batch_shard(size: int, rank: int, world_size: int) -> slice:
    """Rank ``rank``'s contiguous part of a global batch of ``size`` items.

    ``batch_size`` is the global batch in every domain: each rank takes ``size // world_size`` items
    (a remainder is dropped), so every rank holds as many as the others and the ranks' parts, in rank
    order, are the one-process batch. No rank waits alone in a collective."""
    k = size // world_size
    return slice(rank * k, (rank + 1) * k)


def rank_part(size: int, rank: int, world_size: int) -> slice:
    """Rank ``rank``'s contiguous part of ``size`` items when every item must be used: parts differ by
    at most one item and, in rank order, cover all ``size`` (for work split over ranks and then gathered,
    where :func:`batch_shard`'s equal parts would drop a remainder)."""
    k, extra = divmod(size, world_size)
    start = rank * k + min(rank, extra)
    return slice(start, start + k + (rank < extra))


def average_gradients_over_ranks(module: nn.Module) -> None:
    """Average the gradients of ``module``'s parameters over ranks during backward, as DDP does for a
    wrapped model, so every rank keeps the same values. For modules DDP cannot wrap: learned temperatures,
    or networks called several times (or through methods other than ``forward``) before one backward.
    The hooks fire in autograd's order, the same on every rank."""

    def hook(grad: Tensor) -> Tensor:
        grad = grad.clone()
        dist.all_reduce(grad)
        return grad / dist.get_world_size()

    for p in module.parameters():
        if p.requires_grad:
            p.register_hook(hook)


def gather_sizes(n: int, device: torch.device, group: Any = None) -> list[int]:
    """Every rank's length along dim 0 (ranks may hold different batch sizes)."""
    _, size = world(group)
    if size == 1:
        return [n]
    mine = torch.tensor([n], dtype=torch.long, device=device)
    out = [torch.zeros_like(mine) for _ in range(size)]
    dist.all_gather(out, mine, group=group)
    return [int(t.item()) for t in out]


def _gather_concat(x: Tensor, sizes: list[int], group: Any) -> Tensor:
    """All-gather blocks of different lengths (padded to the longest) and concatenate them."""
    longest = max(sizes)
    is_bool = x.dtype == torch.bool
    src = x.to(torch.uint8) if is_bool else x
    padded = src.new_zeros((longest, *src.shape[1:]))
    padded[: src.shape[0]] = src
    blocks = [torch.empty_like(padded) for _ in sizes]
    dist.all_gather(blocks, padded.contiguous(), group=group)
    out = torch.cat([b[:s] for b, s in zip(blocks, sizes)], dim=0)
    return out.bool() if is_bool else out


class _AllGatherWithGrad(torch.autograd.Function):
    """Forward: concatenate every rank's block. Backward: sum the gradients over ranks, keep own slice."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, sizes: list[int], rank: int, group: Any) -> Tensor:
        ctx.sizes, ctx.rank, ctx.group = sizes, rank, group
        return _gather_concat(x, sizes, group)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None, None]:
        grad = grad.contiguous().clone()
        dist.all_reduce(grad, op=dist.ReduceOp.SUM, group=ctx.group)
        start = sum(ctx.sizes[: ctx.rank])
        return grad[start : start + ctx.sizes[ctx.rank]], None, None, None


def all_gather_with_grad(x: Tensor, group: Any = None, sizes: list[int] | None = None) -> Tensor:
    """Concatenate ``x`` from every rank along dim 0; gradients flow back to the owning rank.

    The backward returns each rank the sum over all ranks of the gradient of its slice (like
    ``torch.distributed.nn.functional.all_gather``). With one process this is the identity.
    """
    rank, size = world(group)
    if size == 1:
        return x
    sizes = sizes if sizes is not None else gather_sizes(x.shape[0], x.device, group)
    return _AllGatherWithGrad.apply(x, sizes, rank, group)


def gather_labels(labels: Tensor, group: Any = None, sizes: list[int] | None = None) -> Tensor:
    """Concatenate every rank's labels (or any tensor without gradient) along dim 0."""
    _, size = world(group)
    if size == 1:
        return labels
    sizes = sizes if sizes is not None else gather_sizes(labels.shape[0], labels.device, group)
    return _gather_concat(labels.detach(), sizes, group)


def offset_diagonal_mask(n_local: int, m_total: int, offset: int, device: torch.device | None = None) -> Tensor:
    """``[n_local, m_total]`` boolean mask with ``True`` at ``(i, offset + i)``.

    Local anchor ``i`` is paired with gathered candidate ``offset + i``, where ``offset`` is the number
    of candidates on lower ranks (``sum(sizes[:rank])``).
    """
    if offset + n_local > m_total:
        raise ValueError(f"offset {offset} + n_local {n_local} exceeds the {m_total} gathered candidates")
    mask = torch.zeros(n_local, m_total, dtype=torch.bool, device=device)
    idx = torch.arange(n_local, device=device)
    mask[idx, offset + idx] = True
    return mask


def _block_diagonal(row_sizes: list[int], col_sizes: list[int], device: torch.device) -> Tensor:
    """Global positives for paired data split over ranks: rank r's anchor i with rank r's candidate i."""
    mask = torch.zeros(sum(row_sizes), sum(col_sizes), dtype=torch.bool, device=device)
    r0 = c0 = 0
    for n, m in zip(row_sizes, col_sizes):
        mask[r0 : r0 + n, c0 : c0 + m] = torch.eye(n, m, dtype=torch.bool, device=device)
        r0, c0 = r0 + n, c0 + m
    return mask


class _RingShift(torch.autograd.Function):
    """Send ``x`` to rank+1 and receive the block of rank-1; the backward sends gradients the other way."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, incoming_rows: int, rank: int, size: int, group: Any) -> Tensor:
        ctx.rows, ctx.rank, ctx.size, ctx.group = x.shape[0], rank, size, group
        return _exchange(x.contiguous(), incoming_rows, (rank + 1) % size, (rank - 1) % size, group)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None, None, None]:
        back = _exchange(grad.contiguous(), ctx.rows, (ctx.rank - 1) % ctx.size, (ctx.rank + 1) % ctx.size, ctx.group)
        return back, None, None, None, None


def _exchange(x: Tensor, incoming_rows: int, dst: int, src: int, group: Any) -> Tensor:
    """Non-blocking send of ``x`` to ``dst`` and receive of ``incoming_rows`` rows from ``src``."""
    if group is not None:
        dst, src = dist.get_global_rank(group, dst), dist.get_global_rank(group, src)
    buf = x.new_empty((incoming_rows, *x.shape[1:]))
    requests = [dist.isend(x, dst, group=group), dist.irecv(buf, src, group=group)]
    for req in requests:
        req.wait()
    return buf


def _ring_shift(x: Tensor, incoming_rows: int, rank: int, size: int, group: Any, grad: bool) -> Tensor:
    if grad:
        return _RingShift.apply(x, incoming_rows, rank, size, group)
    return _exchange(x.detach().contiguous(), incoming_rows, (rank + 1) % size, (rank - 1) % size, group)


def _local_positives(
    n: int,
    col_offset: int,
    col_rows: int,
    rank_offset: int,
    labels: Tensor | None,
    cand_labels: Tensor | None,
    pos_mask: Tensor | None,
    self_compare: bool,
    device: torch.device,
) -> Pairs:
    """The local anchors' pairs with the candidate columns ``[col_offset, col_offset + col_rows)``, whose
    first row is global row ``rank_offset``; with ``self_compare`` the self-pairs are not valid. No
    ``N x M`` mask unless ``pos_mask`` is one: labels, and the global diagonal as labels ``arange``."""
    self_offset = rank_offset - col_offset if self_compare else None
    if pos_mask is not None:
        pos = pos_mask[:, col_offset : col_offset + col_rows].to(device=device, dtype=torch.bool)
        return Pairs.of_function(lambda rows, cols: pos[rows, cols], (n, col_rows), device, self_offset)
    if labels is None:
        labels = torch.arange(n, device=device) + rank_offset
        cand_labels = torch.arange(col_rows, device=device) + col_offset
    return Pairs.of_labels(labels, cand_labels, self_offset)


def distributed_objective(
    objective: ContrastiveObjective,
    anchors: Tensor,
    candidates: Tensor | None = None,
    *,
    labels: Tensor | None = None,
    candidate_labels: Tensor | None = None,
    pos_mask: Tensor | None = None,
    neg_weight: Tensor | None = None,
    prior: Tensor | None = None,
    group: Any = None,
) -> Tensor:
    """Run ``objective`` on a batch split over ranks, following its declared ``distributed`` behaviour.

    Args are the local slices of the core contract: ``anchors [n, D]``, ``candidates [m, D]`` (or
    ``None`` to compare anchors with each other, self-pairs excluded), local ``labels [n]`` and
    ``candidate_labels [m]``. ``pos_mask``, ``neg_weight`` and ``prior`` (a similarity prior without
    gradient, for an objective that declares ``takes_prior``), when given, are the local anchors' rows against **all**
    ranks' candidates, ``[n, sum of m over ranks]`` in rank order. Without labels or ``pos_mask``, local
    anchor ``i`` is paired with local candidate ``i``. A term that declares no ``distributed`` behaviour
    (another library's loss) and any call with a ``prior`` run on the gathered global batch.

    Returns the loss whose mean over ranks is the single-process loss on the concatenated batch; see
    the module docstring for the gradient convention. With one process this is ``objective(...)``.
    """
    rank, size = world(group)
    routed = {} if prior is None else {"prior": prior}
    if size == 1:
        return objective(
            anchors, candidates, labels=labels, candidate_labels=candidate_labels, pos_mask=pos_mask, neg_weight=neg_weight,
            **routed,
        )
    if candidates is None and labels is None and pos_mask is None:
        raise ValueError("candidates=None compares anchors with each other: give labels or pos_mask")
    if candidates is not None and labels is not None and candidate_labels is None:
        if candidates.shape[0] != anchors.shape[0]:
            raise ValueError("labels with separate candidates of another size need candidate_labels")
        candidate_labels = labels
    if candidates is not None and labels is None and pos_mask is None and candidates.shape[0] < anchors.shape[0]:
        raise ValueError(f"diagonal positives need at least n={anchors.shape[0]} local candidates, got {candidates.shape[0]}")
    row_sizes = gather_sizes(anchors.shape[0], anchors.device, group)
    col_sizes = row_sizes if candidates is None else gather_sizes(candidates.shape[0], anchors.device, group)
    batch = _RankBatch(objective, anchors, candidates, labels, candidate_labels, pos_mask, neg_weight, prior,
                       row_sizes, col_sizes, rank, size, group)
    m_total = sum(col_sizes)
    for name, value in (("pos_mask", pos_mask), ("neg_weight", neg_weight), ("prior", prior)):
        if value is not None and value.shape != (anchors.shape[0], m_total):
            raise ValueError(f"{name} must be [n, M] = [{anchors.shape[0]}, {m_total}] (local rows, all ranks' columns)")

    behaviour = Distributed(getattr(objective, "distributed", Distributed.GLOBAL_STATISTICS))
    per_anchor_mean = batch.per_anchor_mean
    ring = behaviour is Distributed.PAIRWISE_RING and (per_anchor_mean or not batch.self_compare)
    if behaviour is Distributed.GLOBAL_STATISTICS or prior is not None or not (per_anchor_mean or ring):
        return _global_batch(batch)
    if ring:
        kept, keep = _ring_sum(batch)
    else:
        per, keep = _gathered_per_anchor(batch)
        kept = torch.where(keep, per, torch.zeros_like(per)).sum()
    count = keep.sum().to(torch.long)
    dist.all_reduce(count, group=group)
    return kept * size / count.clamp_min(1)


@dataclass(frozen=True)
class _RankBatch:
    """One rank's part of a :func:`distributed_objective` call: the core contract's local inputs, the
    row and column counts of every rank, and the process group."""

    objective: ContrastiveObjective
    anchors: Tensor
    candidates: Tensor | None
    labels: Tensor | None
    candidate_labels: Tensor | None
    pos_mask: Tensor | None
    neg_weight: Tensor | None
    prior: Tensor | None
    row_sizes: list[int]
    col_sizes: list[int]
    rank: int
    size: int
    group: Any

    @property
    def self_compare(self) -> bool:
        """``candidates=None``: the anchors are compared with each other, self-pairs excluded."""
        return self.candidates is None

    @property
    def local_cands(self) -> Tensor:
        """This rank's candidate rows (its anchors when they are compared with each other)."""
        return self.anchors if self.candidates is None else self.candidates

    @property
    def local_cand_labels(self) -> Tensor | None:
        return self.labels if self.candidates is None else self.candidate_labels

    @property
    def per_anchor_mean(self) -> bool:
        return getattr(self.objective, "per_anchor_mean", False)

    def positives(self, col_offset: int, col_rows: int, cand_labels: Tensor | None, self_compare: bool) -> Pairs:
        """The local anchors' pairs with the candidate columns ``[col_offset, col_offset + col_rows)``."""
        return _local_positives(self.anchors.shape[0], col_offset, col_rows, sum(self.col_sizes[: self.rank]), self.labels,
                                cand_labels, self.pos_mask, self_compare, self.anchors.device)


def _gathered_per_anchor(b: _RankBatch) -> tuple[Tensor, Tensor]:
    """Local anchors' per-anchor losses against every rank's candidates."""
    all_cands = all_gather_with_grad(b.local_cands, b.group, b.col_sizes)
    all_cand_labels = None if b.local_cand_labels is None else gather_labels(b.local_cand_labels, b.group, b.col_sizes)
    pairs = b.positives(0, all_cands.shape[0], all_cand_labels, b.self_compare)
    per = b.objective.per_anchor_fp32(b.anchors, all_cands, pairs, b.neg_weight)
    return per, pairs.has_pos


def _ring_sum(b: _RankBatch) -> tuple[Tensor, Tensor]:
    """Pair terms of the local anchors summed over candidate blocks passed round the ring.

    At step ``k`` rank ``r`` holds the block of rank ``r - k``. With ``per_anchor_mean``,
    ``objective.per_anchor`` must be a sum over candidate columns. An objective without it (SigLIP)
    must have a ``loss_of_pairs`` returning ``(sum of pair terms) / max(number of anchors with a
    positive, 1)``, from which the block's sum is recovered. Returns ``(sum of the local anchors' losses,
    local anchors with a positive in any block)``.
    """
    rank, size, sizes = b.rank, b.size, b.col_sizes
    offsets = [sum(sizes[:r]) for r in range(size)]
    block, block_labels = b.local_cands, b.local_cand_labels
    total: Tensor | None = None
    pos_any = torch.zeros(b.anchors.shape[0], dtype=torch.bool, device=b.anchors.device)
    for step in range(size):
        origin = (rank - step) % size
        if step > 0:
            block = _ring_shift(block, sizes[origin], rank, size, b.group, grad=True)
            if block_labels is not None:
                block_labels = _ring_shift(block_labels, sizes[origin], rank, size, b.group, grad=False)
        cols = slice(offsets[origin], offsets[origin] + sizes[origin])
        pairs = b.positives(cols.start, sizes[origin], block_labels, b.self_compare and origin == rank)
        weight = None if b.neg_weight is None else b.neg_weight[:, cols]
        if b.per_anchor_mean:
            part = b.objective.per_anchor_fp32(b.anchors, block, pairs, weight)
        else:
            part = b.objective.loss_of_pairs(b.anchors, block, pairs, weight) * pairs.has_pos.sum().clamp_min(1)
        total = part if total is None else total + part
        pos_any |= pairs.has_pos
    if b.per_anchor_mean:
        total = torch.where(pos_any, total, torch.zeros_like(total)).sum()
    return total, pos_any


def _global_batch(b: _RankBatch) -> Tensor:
    """The objective on the whole gathered batch, on every rank (exact for any objective; W x compute)."""
    group, rows, cols = b.group, b.row_sizes, b.col_sizes
    all_anchors = all_gather_with_grad(b.anchors, group, rows)
    all_cands = None if b.candidates is None else all_gather_with_grad(b.candidates, group, cols)
    kwargs: dict[str, Tensor] = {}
    if b.labels is not None:
        kwargs["labels"] = gather_labels(b.labels, group, rows)
    if b.candidate_labels is not None:
        kwargs["candidate_labels"] = gather_labels(b.candidate_labels, group, cols)
    if b.pos_mask is not None:
        kwargs["pos_mask"] = gather_labels(b.pos_mask, group, rows)
    elif b.labels is None and rows != cols:
        kwargs["pos_mask"] = _block_diagonal(rows, cols, b.anchors.device)
    if b.neg_weight is not None:
        kwargs["neg_weight"] = all_gather_with_grad(b.neg_weight, group, rows)
    if b.prior is not None:
        kwargs["prior"] = gather_labels(b.prior, group, rows)
    return b.objective(all_anchors, all_cands, **kwargs)
