"""Row reductions of a similarity matrix computed in tiles, never materialised.

Inf-CL (Wang et al., "Breaking the Memory Barrier: Near Infinite Batch Size Scaling for Contrastive
Loss", arXiv:2410.17243) for the whole softmax family. With factors ``x [N, D]`` and ``y [M, D]``
(similarities ``s_ij = x_i . y_j``: a cosine objective passes normalised rows, the scale folded into
``x``), the set ``S_i`` of a :class:`~contrasuite.core.pairs.Pairs` (its negatives, or every valid
pair), weights ``w_ij`` (``neg_weight`` at negatives, 1 at positives; a weight 0 removes a negative)
and an elementwise logit map ``l = f(s)`` (identity by default), :func:`tiled_rows` returns ``[N]``::

    "logsumexp":  r_i = log sum_{j in S_i} w_ij exp(l_ij) - h_i sum_{p in P_i} c(l_ip) l_ip
    "softplus":   r_i = sum_{j in S_i} w_ij softplus(l_ij)    - h_i sum_{p in P_i} c(l_ip) l_ip

(the log-sum-exp of an empty ``S_i`` is ``log(tiny)``). The positive term (``h [N]`` and the
coefficients ``c``, 1 by default, carry no gradient) is taken from the same blocks, so the
gradient at a positive, ``p_ip - h_i c_ip``, is formed entry by entry as in the dense path (added
after the matmuls instead, it would cancel there and lose digits when the candidates nearly coincide).

Forward: for each row tile, one pass over the column tiles with a running max ``mu`` and sum ``z``,
``z <- z exp(mu - mu') + sum_j exp(v_ij - mu')``: the blocks in the loss dtype (fp32, fp64 for fp64
input), the ``[tile]`` row statistics in fp64. Backward (:class:`_TiledRows`): every ``tile x tile``
block's similarities are recomputed from the saved factors, its gradient
``G_ij = dL/ds_ij = g_i (p_ij - [j in P_i] h_i c_ij) f'(s_ij)`` formed from the saved ``mu, z``
(``p_ij = w_ij exp(l_ij - mu_i) / z_i`` for logsumexp, ``w_ij sigmoid(l_ij)`` for softplus), and
``dL/dx += G y``, ``dL/dy += G^T x``; a ``neg_weight`` tensor that requires grad gets ``g_i p_ij / w_ij``
(``g_i softplus(l_ij)``).

Memory: ``O((N + M) D + tile^2)`` (plus ``N x M`` only for a grad-requiring weight tensor, which is
``N x M`` already). Cost: four ``N x M x D`` matmuls instead of the dense path's three. Exact: the
same terms as the dense reduction, added in another order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterator, NamedTuple, Union

import torch
import torch.nn.functional as F
from torch import Tensor

from contrasuite.core.numerics import full_precision
from contrasuite.core.pairs import Blocks, Pairs

Weight = Union[Tensor, Blocks]
LogitMap = Callable[[Tensor, tuple[Tensor, Tensor]], tuple[Tensor, Tensor]]
"""``(s, (rows, cols)) -> (f(s), f'(s))`` on one block of similarities ``s`` whose positives are at
``(rows, cols)`` (fresh buffers: the block's entries may then be overwritten)."""
REDUCTIONS = ("logsumexp", "softplus")


def check_tile_size(tile_size: int | None) -> int | None:
    """``tile_size`` (``None``: the dense path), or a ``ValueError`` unless it is a positive integer."""
    if tile_size is not None and (isinstance(tile_size, bool) or not isinstance(tile_size, int) or tile_size < 1):
        raise ValueError(f"tile_size must be a positive integer or None, got {tile_size!r}")
    return tile_size


def tiles(n: int, size: int) -> Iterator[slice]:
    """Consecutive slices of at most ``size`` covering ``range(n)``."""
    return (slice(start, min(start + size, n)) for start in range(0, n, size))


@dataclass(frozen=True)
class Tiling:
    """What :func:`tiled_rows` reduces (module docstring)."""

    pairs: Pairs
    tile_size: int
    include_positives: bool
    """``S_i`` = every valid pair (True) or the negatives (False)."""
    reduction: str = "logsumexp"
    logit_map: LogitMap | None = None
    weight_columns: int = 0
    """Columns the weights cover; later (negative-only extra) columns weigh 1."""
    positive_scale: Tensor | None = None
    """``h [N]`` of the positive term; ``None``: no positive term."""
    positive_weight: Callable[[Tensor], Tensor] | None = None
    """``c``: the positives' logits ``[P]`` to their coefficients; ``None``: 1."""


class _Block(NamedTuple):
    logits: Tensor
    slope: Tensor | None
    values: Tensor | None
    """logsumexp: ``l + log w`` (the dtype's lowest value outside ``S_i``; may share ``logits``' buffer);
    softplus: ``w softplus(l)`` (0 outside); ``None`` when not asked for."""
    keep: Tensor | None
    """The pairs of ``S_i`` in the block (``None``: all, or the positives' entries already filled)."""
    negatives: Tensor | None
    """The block's negatives, with weights only."""
    weight: Tensor | None
    positives: tuple[Tensor, Tensor, Tensor] | None
    """With a positive term: the block's positives' ``(rows, cols, h_i c_ip)``."""
    linear: Tensor | None
    """With a positive term: ``h_i sum_{p in P_i} c_ip l_ip`` over the block ``[rows]``."""


def _weight_block(weight: Weight, rows: slice, cols: slice, width: int) -> Tensor:
    """The weights of block ``[rows, cols]``, 1 in the columns past ``width``."""
    inside = slice(cols.start, max(cols.start, min(cols.stop, width)))
    block = weight(rows, inside) if callable(weight) else weight[rows, inside]
    if inside.stop < cols.stop:
        block = torch.cat([block, block.new_ones(block.shape[0], cols.stop - inside.stop)], dim=1)
    return block


def _block(spec: Tiling, x: Tensor, y: Tensor, weight: Weight | None, rows: slice, cols: slice, values: bool = True) -> _Block:
    """Similarities, logits and reduction terms of one block (fresh buffers; ``values=False`` skips the
    softplus terms, which the backward does not need).

    Single-positive pairs with every pair valid (diagonal pairing) need no ``[tile, tile]`` mask: the
    positives come as indices, and excluding them fills those entries."""
    sim = x[rows] @ y[cols].T
    pairs = spec.pairs
    by_index = pairs.targets is not None and not pairs.exclude_self and weight is None
    if by_index:
        pos = valid = None
        found = ((pairs.targets[rows] >= cols.start) & (pairs.targets[rows] < cols.stop)).nonzero(as_tuple=True)[0]
        positive_index = (found, pairs.targets[rows][found] - cols.start)
    else:
        pos, valid = pairs.block(rows, cols)
        positive_index = pos.nonzero(as_tuple=True)
    logits, slope = (sim, None) if spec.logit_map is None else spec.logit_map(sim, positive_index)
    positives = linear = None
    if spec.positive_scale is not None:
        r, c = positive_index
        pos_logits = logits[r, c]
        coefficient = spec.positive_scale[rows][r]
        if spec.positive_weight is not None:
            coefficient = coefficient * spec.positive_weight(pos_logits.detach())
        positives = (r, c, coefficient)
        linear = logits.new_zeros(sim.shape[0]).index_add_(0, r, coefficient * pos_logits)
    lowest = torch.finfo(sim.dtype).min
    keep = negatives = w = None
    if by_index:
        if not spec.include_positives:
            logits.index_put_(positive_index, logits.new_tensor(lowest))  # E = 0 there exactly
    else:
        negatives = ~pos if valid is None else valid & ~pos
        keep = valid if spec.include_positives else negatives
    if weight is not None:
        w = _weight_block(weight, rows, cols, spec.weight_columns).to(sim.dtype)
        if spec.include_positives:
            w = torch.where(pos, 1.0, w)
        keep = (w > 0) if keep is None else keep & (w > 0)
    out = None
    if spec.reduction == "logsumexp":
        out = logits if w is None else logits + w.clamp_min(torch.finfo(sim.dtype).tiny).log_()
        out = out if keep is None else torch.where(keep, out, lowest)
    elif values:
        out = F.softplus(logits)
        out = out if w is None else out.mul_(w)
        out = out if keep is None else torch.where(keep, out, 0.0)
    return _Block(logits, slope, out, keep, negatives if w is not None else None, w, positives, linear)


def _reduce(spec: Tiling, x: Tensor, y: Tensor, weight: Weight | None) -> tuple[Tensor, Tensor, Tensor]:
    """The forward pass: ``r [N]`` (module docstring), and for the backward the log-sum-exp's row max
    ``mu [N]`` and sum ``z [N]`` (fp64), so that ``p = exp(v - mu) / z``: ``v - mu`` is exact near the max,
    where ``v - log(z exp(mu))`` would lose the digits of the rounded log-sum-exp (``~|mu|`` ulps)."""
    n, m = x.shape[0], y.shape[0]
    lowest = torch.finfo(x.dtype).min
    out = x.new_empty(n)
    tops, totals = torch.full_like(out, lowest), torch.zeros(n, dtype=torch.float64, device=x.device)
    for rows in tiles(n, spec.tile_size):
        # The row statistics in float64: O(tile) work per block, and no rounding that grows with M / tile.
        total = torch.zeros(rows.stop - rows.start, dtype=torch.float64, device=x.device)
        top = torch.full_like(total, lowest)
        linear = torch.zeros_like(total)
        for cols in tiles(m, spec.tile_size):
            block = _block(spec, x, y, weight, rows, cols)
            if block.linear is not None:
                linear += block.linear
            if spec.reduction == "softplus":
                total += block.values.sum(dim=1)
                continue
            new_top = torch.maximum(top, block.values.amax(dim=1))
            block_sum = block.values.sub_(new_top[:, None].to(x.dtype)).exp_().sum(dim=1)
            total = total.mul_((top - new_top).exp_()).add_(torch.where(new_top > lowest, block_sum, 0.0))
            top = new_top
        if spec.reduction == "logsumexp":
            tops[rows], totals[rows] = top, total
            empty = math.log(torch.finfo(x.dtype).tiny)
            total = torch.where(total > 0, top + total.clamp_min(torch.finfo(x.dtype).tiny).log(), empty)
        out[rows] = total - linear
    return out, tops, totals


class _TiledRows(torch.autograd.Function):
    """:func:`tiled_rows` with the tiled, recomputing backward of the module docstring."""

    @staticmethod
    def forward(ctx, spec: Tiling, x: Tensor, y: Tensor, weight: Tensor | None, weight_blocks: Blocks | None) -> Tensor:  # type: ignore[override]
        out, top, total = _reduce(spec, x, y, weight if weight is not None else weight_blocks)
        ctx.spec, ctx.weight_blocks = spec, weight_blocks
        ctx.save_for_backward(x, y, weight, top, total)
        return out

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[None, Tensor | None, Tensor | None, Tensor | None, None]:  # type: ignore[override]
        x, y, weight, top, total = ctx.saved_tensors
        tiny = torch.finfo(x.dtype).tiny
        row_factor = torch.where(total > 0, grad.double() / total.clamp_min(tiny), 0.0).to(x.dtype)  # g_i / z_i
        spec: Tiling = ctx.spec
        weights = weight if weight is not None else ctx.weight_blocks
        need_x, need_y, need_w = ctx.needs_input_grad[1:4]
        grad_x = torch.zeros_like(x) if need_x else None
        grad_y = torch.zeros_like(y) if need_y else None
        grad_w = torch.zeros_like(weight) if need_w else None
        with full_precision(x):
            for rows in tiles(x.shape[0], spec.tile_size):
                g = grad[rows, None].to(x.dtype)
                for cols in tiles(y.shape[0], spec.tile_size):
                    block = _block(spec, x, y, weights, rows, cols, values=spec.reduction == "logsumexp")
                    if spec.reduction == "logsumexp":
                        share = block.values.sub_(top[rows, None]).exp_().mul_(row_factor[rows, None])  # g_i p_ij
                        if grad_w is not None:
                            grad_w[rows, cols] = torch.where(block.negatives, share / block.weight.clamp_min(tiny), 0.0)
                    else:
                        if grad_w is not None:
                            grad_w[rows, cols] = torch.where(block.negatives, F.softplus(block.logits) * g, 0.0)
                        share = torch.sigmoid(block.logits).mul_(g)
                        share = share if block.weight is None else share.mul_(block.weight)
                        share = share if block.keep is None else share.mul_(block.keep)
                    if block.positives is not None:
                        r, c, coefficient = block.positives
                        share.index_put_((r, c), -g[r, 0] * coefficient, accumulate=True)
                    grad_sim = share if block.slope is None else share.mul_(block.slope)
                    if grad_x is not None:
                        grad_x[rows].addmm_(grad_sim, y[cols])
                    if grad_y is not None:
                        grad_y[cols].addmm_(grad_sim.T, x[rows])
        return None, grad_x, grad_y, grad_w, None


def tiled_rows(x: Tensor, y: Tensor, spec: Tiling, neg_weight: Weight | None = None) -> Tensor:
    """``r [N]`` of the module docstring for factors ``x [N, D]``, ``y [M, D]`` (the loss dtype), in
    ``spec.tile_size`` tiles; ``neg_weight`` is an ``[N, spec.weight_columns]`` tensor or a function
    of the block (module docstring)."""
    if spec.reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {REDUCTIONS}, got {spec.reduction!r}")
    if callable(neg_weight):
        return _TiledRows.apply(spec, x, y, None, neg_weight)
    return _TiledRows.apply(spec, x, y, neg_weight, None)
