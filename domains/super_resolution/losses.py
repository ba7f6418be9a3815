"""PCL-SR's two losses in the core contract: the generator's contrastive term and D's dual loss.

Generator (Wu et al., TNNLS 2023, eq. for L_CL): with ``phi`` the discriminator embedding,
``P_i`` = {HR_i and its sharpened copies} and ``N_i`` the frequency-space negatives,

    L_CL = mean_i mean_{p in P_i} -log( e^{s(SR_i, p)/t} / (e^{s(SR_i, p)/t} + sum_{n in N_i} e^{s(SR_i, n)/t}) )

which is InfoNCE with several positives per anchor, other positives left out of the denominator
(the paper uses t = 1). Here it is expressed in the core contract: anchors = ``phi(SR)`` ``[B, D]``,
candidates = every positive and negative embedding of the batch, ``pos_mask`` marks each image's own
positives; the other images' columns are extra negatives (``in_batch``) or weighted out.

Discriminator (the "dual contrastive" loss of Yu et al., CVPR 2021, used by PCL-SR with
``--contras_D_train``): every real patch logit ``r`` is contrasted against all fake logits ``F``,
and every fake ``f`` (negated) against all reals (negated),

    L_D = mean_r [ log(e^r + sum_F e^f) - r ] + mean_f [ log(e^{-f} + sum_R e^{-r}) + f ].
"""

from __future__ import annotations

import torch
from torch import Tensor

from contrasuite.core.numerics import full_precision


def contrastive_layout(batch: int, n_pos: int, n_neg: int, in_batch: bool, device: torch.device) -> tuple[Tensor, Tensor | None]:
    """``(pos_mask [B, M], neg_weight [B, M] or None)`` for candidates ordered as ``[P*B positives; K*B negatives]``.

    Candidate ``k * B + j`` is variant ``k`` of image ``j``. Anchor ``i``'s positives are its own
    ``P`` positives; with ``in_batch`` every other column is a negative, otherwise only image
    ``i``'s own ``K`` negatives count (``neg_weight`` zero elsewhere).
    """
    own = torch.eye(batch, dtype=torch.bool, device=device)
    pos_mask = torch.cat([own.repeat(1, n_pos), torch.zeros(batch, n_neg * batch, dtype=torch.bool, device=device)], dim=1)
    if in_batch:
        return pos_mask, None
    neg_own = torch.cat([torch.zeros(batch, n_pos * batch, dtype=torch.bool, device=device), own.repeat(1, n_neg)], dim=1)
    return pos_mask, neg_own.float()


def dual_contrastive_d_loss(real: Tensor, fake: Tensor) -> Tensor:
    """L_D of the module docstring on real and fake patch logits (any shapes; flattened), in fp32."""
    with full_precision(real):
        r, f = real.float().flatten(), fake.float().flatten()
        real_term = torch.logaddexp(r, torch.logsumexp(f, dim=0)) - r
        fake_term = torch.logaddexp(-f, torch.logsumexp(-r, dim=0)) + f
        return real_term.mean() + fake_term.mean()
