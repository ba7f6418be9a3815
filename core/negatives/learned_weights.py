"""Learned soft negative weights (AdaMEOW, Yu, Ge, Li & Zhou, IEEE TKDE 2024).

A small MLP scores every (anchor, candidate) pair from the sum of their embeddings::

    w_ij = sigmoid( w2 . tanh( W1 (a_i + b_j) + b1 ) + b2 ),   W1: D -> H, w2: H -> 1

Written naively this needs the ``[N, M, D]`` tensor of sums ``a_i + b_j`` (4 GB of float32 for
N = M = 4k, D = 64). The first layer is linear, so ``W1 (a_i + b_j) + b1 = (W1 a_i + b1) + W1 b_j``:
project once (``[N, H]`` and ``[M, H]``), then build the hidden activations in row chunks, in the
forward pass and again in a hand-written backward pass (:class:`_PairWeights`), so only one
``[chunk, M, H]`` block exists at a time; what autograd keeps is ``O(N M + (N + M)(D + H))``.
The block's passes (add, tanh, products) are memory-bound: on the CPU a block that stays in the
core's cache (:data:`CPU_BLOCK_BYTES`) is about 2.5x faster than 512 rows of ``M = 4k``.

With the weights, AdaMEOW's loss keeps the positive's own weight in the denominator
(:func:`learned_weight_infonce`)::

    L_i = -l_ii + log sum_j w_ij exp(l_ij)
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from contrasuite.core.numerics import logsumexp_backward, logsumexp_rows

CPU_BLOCK_BYTES = 2 << 20
"""Automatic block size on the CPU: about half a core's L2 cache."""
GPU_BLOCK_BYTES = 256 << 20
"""Automatic block size on a GPU: large enough that kernel launches do not dominate."""


class _PairWeights(torch.autograd.Function):
    """``w = sigmoid(tanh(h_a[:, None] + h_b[None]) @ w2 + b2)`` built and differentiated in row chunks.

    Only ``w [N, M]`` and the inputs are saved; backward rebuilds ``t = tanh(.)`` one ``[chunk, M, H]``
    block at a time, with ``g = dL/dw * w (1 - w)``::

        dL/dw2 = sum_ij g_ij t_ij,   dL/db2 = sum_ij g_ij,   q_ij = g_ij w2 (1 - t_ij^2),
        dL/dh_a[i] = sum_j q_ij,     dL/dh_b[j] = sum_i q_ij

    (one buffer per chunk, updated in place; autograd through the same formula keeps four).
    """

    @staticmethod
    def forward(ctx, hidden_a: Tensor, hidden_b: Tensor, w2: Tensor, b2: Tensor, chunk_size: int) -> Tensor:
        weights = hidden_a.new_empty(hidden_a.shape[0], hidden_b.shape[0])
        for start, part in zip(range(0, hidden_a.shape[0], chunk_size), hidden_a.split(chunk_size)):
            t = (part[:, None, :] + hidden_b[None, :, :]).tanh_()
            torch.sigmoid(t @ w2 + b2, out=weights[start : start + part.shape[0]])  # no list of rows to concatenate
        ctx.save_for_backward(hidden_a, hidden_b, w2, weights)
        ctx.chunk_size = chunk_size
        return weights

    @staticmethod
    def backward(ctx, grad_weights: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, None]:
        hidden_a, hidden_b, w2, weights = ctx.saved_tensors
        grad_a = torch.empty_like(hidden_a)
        grad_b = torch.zeros_like(hidden_b)
        grad_w2 = torch.zeros_like(w2)
        grad_b2 = w2.new_zeros(())
        start = 0
        chunks = zip(hidden_a.split(ctx.chunk_size), weights.split(ctx.chunk_size), grad_weights.split(ctx.chunk_size))
        for part, w, g in chunks:
            g = g * w * (1 - w)  # dL/d(logit) of this chunk
            t = (part[:, None, :] + hidden_b[None, :, :]).tanh_()
            grad_w2 += g.reshape(1, -1).mm(t.reshape(-1, t.shape[-1]))[0]
            grad_b2 += g.sum()
            q = t.square_().neg_().add_(1).mul_(g[..., None]).mul_(w2)  # g w2 (1 - t^2), in t's buffer
            grad_a[start : start + part.shape[0]] = q.sum(dim=1)
            grad_b += q.sum(dim=0)
            start += part.shape[0]
        return grad_a, grad_b, grad_w2, grad_b2, None


class LearnedNegativeWeights(nn.Module):
    """AdaMEOW's pairwise weight MLP (module docstring), memory ``O(N M + N D)``.

    Args:
        dim: embedding dimension ``D``.
        hidden: hidden width ``H`` (AdaMEOW: 16).
        chunk_size: anchor rows per chunk; peak temporary memory is ``chunk_size * M * H`` floats.
            0 (default): as many rows as fit :data:`CPU_BLOCK_BYTES` (CPU) or :data:`GPU_BLOCK_BYTES`.
    """

    def __init__(self, dim: int, hidden: int = 16, chunk_size: int = 0) -> None:
        super().__init__()
        if dim < 1 or hidden < 1 or chunk_size < 0:
            raise ValueError(f"dim and hidden must be >= 1 and chunk_size >= 0, got {dim}, {hidden}, {chunk_size}")
        self.first = nn.Linear(dim, hidden)
        self.second = nn.Linear(hidden, 1)
        self.chunk_size = chunk_size

    def forward(self, anchors: Tensor, candidates: Tensor) -> Tensor:
        """Weights ``[N, M]`` in (0, 1) for ``anchors [N, D]`` against ``candidates [M, D]``."""
        if anchors.dim() != 2 or candidates.dim() != 2 or anchors.shape[1] != candidates.shape[1]:
            raise ValueError(
                f"anchors [N, D] and candidates [M, D] must share D, got {tuple(anchors.shape)} and "
                f"{tuple(candidates.shape)}"
            )
        hidden_a = self.first(anchors)  # W1 a_i + b1
        hidden_b = nn.functional.linear(candidates, self.first.weight)  # W1 b_j
        return _PairWeights.apply(hidden_a, hidden_b, self.second.weight[0], self.second.bias[0], self.rows_per_chunk(hidden_b))

    def rows_per_chunk(self, hidden_b: Tensor) -> int:
        """``chunk_size``, or when 0 the rows of one block of the automatic size for ``hidden_b``'s device."""
        if self.chunk_size:
            return self.chunk_size
        budget = CPU_BLOCK_BYTES if hidden_b.device.type == "cpu" else GPU_BLOCK_BYTES
        return max(1, budget // (hidden_b.numel() * hidden_b.element_size()))

    def naive(self, anchors: Tensor, candidates: Tensor) -> Tensor:
        """The direct ``[N, M, D]`` formula; for tests and tiny inputs only."""
        pair_sum = anchors[:, None, :] + candidates[None, :, :]
        return torch.sigmoid(self.second(torch.tanh(self.first(pair_sum))))[..., 0]


class _LearnedWeightLoss(torch.autograd.Function):
    """:func:`learned_weight_infonce` for ``logits`` and ``weight`` of one dtype: the same values and gradients,
    to the bit, as autograd through ``logsumexp(l + log(w.clamp_min(tiny))) - diag(l)``, with one fresh ``N x N``
    buffer forward (``x = log w + l``, its log-sum-exp by :func:`~contrasuite.core.numerics.logsumexp_rows`) and
    two backward (``G = g_i exp(x_ij - lse_i)``, logsumexp's own backward, then ``dL/dw = G / w`` where
    ``w >= tiny``, 0 elsewhere, as the log's and the clamp's backward give; ``dL/dl = G`` less ``g_i`` on the
    diagonal, in place) where that autograd form allocates about ten (the clamp, log, sum, exp, product, quotient,
    mask and the diagonal's dense zeros), each a pass over ``N x N`` memory and page faults on the CPU.
    """

    @staticmethod
    def forward(ctx, logits: Tensor, weight: Tensor) -> Tensor:  # type: ignore[override]
        x = weight.clamp_min(torch.finfo(weight.dtype).tiny).log_().add_(logits.detach())
        lse = logsumexp_rows(x)
        ctx.save_for_backward(x, lse, weight)
        return lse - logits.detach().diagonal()

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor) -> tuple[Tensor, Tensor | None]:  # type: ignore[override]
        x, lse, weight = ctx.saved_tensors
        g = logsumexp_backward(x, lse, grad)
        grad_weight = None
        if ctx.needs_input_grad[1]:
            below = weight.ge(torch.finfo(weight.dtype).tiny).logical_not_()
            grad_weight = torch.div(g, weight).masked_fill_(below, 0)
        g.diagonal().sub_(grad)
        return g, grad_weight


def learned_weight_infonce(logits: Tensor, weight: Tensor) -> Tensor:
    """AdaMEOW's per-anchor loss ``L_i = -l_ii + log sum_j w_ij exp(l_ij)`` ``[N]`` for ``logits [N, N]``
    (the positive on the diagonal) and pair weights ``weight [N, N]``, ``w_ii`` included.

    One ``N x N`` log-sum-exp (:class:`_LearnedWeightLoss` when the two share a dtype); weights that underflow
    to 0 count as the dtype's smallest positive value.
    """
    if logits.dim() != 2 or logits.shape[0] != logits.shape[1] or weight.shape != logits.shape:
        raise ValueError(f"logits and weight must both be [N, N], got {tuple(logits.shape)} and {tuple(weight.shape)}")
    if logits.dtype == weight.dtype:
        return _LearnedWeightLoss.apply(logits, weight)
    log_weight = weight.clamp_min(torch.finfo(weight.dtype).tiny).log()
    return torch.logsumexp(logits + log_weight, dim=1) - logits.diagonal()
