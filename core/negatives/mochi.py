"""MoCHi hard negative mixing (Kalantidis et al., "Hard Negative Mixing for Contrastive Learning",
NeurIPS 2020, arXiv:2010.01028).

For each query ``q`` with ``Q~N``, its ``N`` hardest negatives (highest ``q . n``, by top-k):

* ``s`` negative-negative mixes ``h = normalize(alpha n_i + (1 - alpha) n_j)``, ``n_i, n_j in Q~N``,
  ``alpha ~ U(0, 1)``;
* ``s'`` query mixes ``h' = normalize(beta q + (1 - beta) n_j)``, ``n_j in Q~N``, ``beta ~ U(0, 0.5)``.

Synthetic negatives are detached (the paper's and the re-implementations' stop-gradient) and belong
to their own query only. :func:`per_anchor_columns` turns them into extra candidate columns with a
``neg_weight`` of 0 on other anchors' synthetic columns, so any objective that honours ``neg_weight``
(the weighted InfoNCE family) uses them unchanged. Memory: ``N x N(s + s')`` weights; for large
batches prefer small ``s + s'`` or a queue-sized batch. Notation MoCHi(N, s, s'); the paper's
configurations include (1024, 1024, 128) and (256, 512, 0) (research doc 7.3, unverified).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


@torch.no_grad()
def mochi(query: Tensor, negatives: Tensor, n_hard: int = 1024, s: int = 1024, s_prime: int = 256,
          *, generator: torch.Generator | None = None) -> Tensor:
    """Synthetic hard negatives ``[B, s + s', D]`` for each query of ``query [B, D]`` (L2-normalised, detached).

    ``negatives [K, D]`` is the shared pool (a queue, or in-batch keys); ``n_hard`` is clipped to ``K``.
    The first ``s`` are negative-negative mixes, the last ``s'`` query mixes.
    """
    if query.dim() != 2 or negatives.dim() != 2 or query.shape[1] != negatives.shape[1]:
        raise ValueError(f"query [B, D] and negatives [K, D] must share D, got {tuple(query.shape)} and {tuple(negatives.shape)}")
    if n_hard < 1 or s < 0 or s_prime < 0:
        raise ValueError(f"need n_hard >= 1, s >= 0, s_prime >= 0; got {n_hard}, {s}, {s_prime}")
    q = F.normalize(query.detach().float(), dim=1)
    n = F.normalize(negatives.detach().float(), dim=1).to(q.device)
    b, n_hard = q.shape[0], min(n_hard, n.shape[0])
    hard_idx = (q @ n.T).topk(n_hard, dim=1).indices  # [B, N], hardest first
    hard = n[hard_idx]  # [B, N, D]
    rows = torch.arange(b, device=q.device)[:, None]

    def pick(count: int) -> Tensor:
        which = torch.randint(0, n_hard, (b, count), generator=generator, device="cpu").to(q.device)
        return hard[rows, which]

    mixes = []
    if s > 0:
        alpha = torch.rand(b, s, 1, generator=generator, device="cpu").to(q.device)
        mixes.append(alpha * pick(s) + (1 - alpha) * pick(s))
    if s_prime > 0:
        beta = 0.5 * torch.rand(b, s_prime, 1, generator=generator, device="cpu").to(q.device)
        mixes.append(beta * q[:, None, :] + (1 - beta) * pick(s_prime))
    out = torch.cat(mixes, dim=1) if mixes else q.new_zeros(b, 0, q.shape[1])
    return F.normalize(out, dim=2).to(query.dtype)


def per_anchor_columns(candidates: Tensor, pos_mask: Tensor | None, synthetic: Tensor,
                       neg_weight: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """Append per-anchor negatives ``synthetic [N, S, D]`` as columns: ``(candidates, pos_mask, neg_weight)``.

    Anchor ``i`` sees its own ``S`` columns with weight 1 and every other anchor's synthetic columns
    with weight 0; ``pos_mask=None`` means diagonal positives over ``candidates``; ``neg_weight``
    (``[N, M]`` over the original candidates) defaults to 1.
    """
    n, s, d = synthetic.shape
    m = candidates.shape[0]
    if d != candidates.shape[1]:
        raise ValueError(f"synthetic [N, S, D] must have D={candidates.shape[1]}, got {tuple(synthetic.shape)}")
    device = candidates.device
    if pos_mask is None:
        pos_mask = torch.eye(n, m, dtype=torch.bool, device=device)
    if neg_weight is None:
        neg_weight = torch.ones(n, m, dtype=candidates.dtype, device=device)
    own = torch.eye(n, dtype=candidates.dtype, device=device).repeat_interleave(s, dim=1)  # [N, N*S]
    extra_pos = torch.zeros(n, n * s, dtype=torch.bool, device=device)
    return (
        torch.cat([candidates, synthetic.reshape(n * s, d).to(candidates.dtype)], dim=0),
        torch.cat([pos_mask, extra_pos], dim=1),
        torch.cat([neg_weight.to(candidates.dtype), own], dim=1),
    )
