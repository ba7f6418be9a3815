"""Learned soft negative weights (AdaMEOW, Yu, Ge, Li & Zhou, IEEE TKDE 2024).

A small MLP scores every (anchor, candidate) pair from the sum of their embeddings::

    w_ij = sigmoid( w2 . tanh( W1 (a_i + b_j) + b1 ) + b2 ),   W1: D -> H, w2: H -> 1

Written naively this needs the ``[N, M, D]`` tensor of sums ``a_i + b_j`` (4 GB of float32 for
N = M = 4k, D = 64). The first layer is linear, so ``W1 (a_i + b_j) + b1 = (W1 a_i + b1) + W1 b_j``:
project once (``[N, H]`` and ``[M, H]``), then build the hidden pre-activations in row chunks. Each
chunk runs under activation checkpointing, so only ``[chunk, M, H]`` exists at a time, in the forward
pass and again in the backward pass; what autograd keeps is ``O(N M + (N + M)(D + H))``.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint


def _chunk_weights(hidden_a: Tensor, hidden_b: Tensor, w2: Tensor, b2: Tensor) -> Tensor:
    """``sigmoid(tanh(hidden_a[:, None] + hidden_b[None]) @ w2 + b2)`` for one row chunk: ``[n, M]``."""
    return torch.sigmoid(torch.tanh(hidden_a[:, None, :] + hidden_b[None, :, :]) @ w2 + b2)


class LearnedNegativeWeights(nn.Module):
    """AdaMEOW's pairwise weight MLP (module docstring), memory ``O(N M + N D)``.

    Args:
        dim: embedding dimension ``D``.
        hidden: hidden width ``H`` (AdaMEOW: 16).
        chunk_size: anchor rows per checkpointed chunk; peak temporary memory is ``chunk_size * M * H``.
    """

    def __init__(self, dim: int, hidden: int = 16, chunk_size: int = 256) -> None:
        super().__init__()
        if dim < 1 or hidden < 1 or chunk_size < 1:
            raise ValueError(f"dim, hidden and chunk_size must be >= 1, got {dim}, {hidden}, {chunk_size}")
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
        w2, b2 = self.second.weight[0], self.second.bias[0]
        rows = []
        for start in range(0, anchors.shape[0], self.chunk_size):
            part = hidden_a[start : start + self.chunk_size]
            if torch.is_grad_enabled():
                rows.append(checkpoint(_chunk_weights, part, hidden_b, w2, b2, use_reentrant=False))
            else:
                rows.append(_chunk_weights(part, hidden_b, w2, b2))
        return torch.cat(rows, dim=0)

    def naive(self, anchors: Tensor, candidates: Tensor) -> Tensor:
        """The direct ``[N, M, D]`` formula; for tests and tiny inputs only."""
        pair_sum = anchors[:, None, :] + candidates[None, :, :]
        return torch.sigmoid(self.second(torch.tanh(self.first(pair_sum))))[..., 0]
