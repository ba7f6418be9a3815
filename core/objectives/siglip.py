"""SigLIP sigmoid loss (Zhai et al., "Sigmoid Loss for Language Image Pre-Training", ICCV 2023).

Every image-text pair is an independent binary problem::

    L = -1/|B| sum_i sum_j log sigmoid( z_ij (t x_i . y_j + b) ),   z_ij = +1 if positive else -1

with ``x, y`` L2-normalised, ``t = exp(t')`` and bias ``b`` learnable, initialised ``t' = log 10`` and
``b = -10`` (the paper's and open_clip's ``--siglip`` initialisation). ``|B|`` is the number of
images that have a positive. ``t'`` is clamped to ``[0, log 100]`` in the forward pass, open_clip's
range for its logit scale.

Call: ``SigLIP()(images, texts, pos_mask=None, neg_weight=None, extra_texts=None, extra_images=None)``.
``images`` are the anchors, ``texts`` the candidates (diagonal positives by default, or ``labels`` /
``pos_mask``). ``extra_texts [K, D]`` (e.g. generated hard-negative captions) and ``extra_images
[L, D]`` add negative-only pairs against all images / all texts. ``neg_weight [N, M]`` scales each
negative pair term of the image-text block.

Distributed: the loss is a sum of independent pair terms (``PAIRWISE_RING``): each rank adds its
images against every other rank's texts as ``extra_texts`` (open_clip's neighbour exchange).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from contrasuite.core.numerics import full_precision, upcast
from contrasuite.core.objectives.base import ContrastiveObjective, Distributed, register_scalar
from contrasuite.core.pairs import Pairs, resolve_pairs
from contrasuite.core.similarity import normalize

MAX_LOGIT_SCALE = math.log(100.0)


def sigmoid_pair_loss(logits: Tensor, pairs: Pairs, neg_weight: Tensor | None = None) -> Tensor:
    """Per-row sums ``[N]`` of ``-log sigmoid(z_ij l_ij)`` over valid pairs of ``logits [N, M]``.

    Uses ``-log sigmoid(-l) = softplus(l)`` for negatives and ``softplus(-l) = softplus(l) - l`` for positives.
    """
    terms = F.softplus(logits)
    if neg_weight is not None:
        terms = torch.where(pairs.pos, terms, terms * neg_weight)
    if pairs.targets is not None and not pairs.exclude_self:  # one positive a row, every pair valid: no masks
        return terms.sum(dim=1) - logits.gather(1, pairs.targets[:, None]).squeeze(1)
    if not bool(pairs.valid.all()):
        terms = torch.where(pairs.valid, terms, 0.0)
    rows, cols = pairs.positive_indices()
    positive = torch.zeros(logits.shape[0], dtype=logits.dtype, device=logits.device).index_add(0, rows, logits[rows, cols])
    return terms.sum(dim=1) - positive


def normalised(x: Tensor) -> Tensor:
    """Row-normalised ``x`` in the loss dtype."""
    return normalize(upcast(x))


class SigLIP(ContrastiveObjective):
    """Sigmoid image-text loss with learnable ``logit_scale`` (``t'``) and ``logit_bias`` (``b``).

    Args:
        init_logit_scale: initial ``t'``; ``t = exp(t')``. Default ``log 10``.
        init_logit_bias: initial ``b``. Default -10.
        learnable: make ``t'`` and ``b`` trainable ``nn.Parameter`` (True) or fixed buffers.
    """

    distributed = Distributed.PAIRWISE_RING

    def __init__(self, init_logit_scale: float = math.log(10.0), init_logit_bias: float = -10.0, learnable: bool = True) -> None:
        super().__init__()
        register_scalar(self, "logit_scale", init_logit_scale, learnable)
        register_scalar(self, "logit_bias", init_logit_bias, learnable)

    def forward(
        self,
        anchors: Tensor,
        candidates: Tensor | None = None,
        *,
        labels: Tensor | None = None,
        candidate_labels: Tensor | None = None,
        pos_mask: Tensor | None = None,
        neg_weight: Tensor | None = None,
        extra_texts: Tensor | None = None,
        extra_images: Tensor | None = None,
    ) -> Tensor:
        if candidates is None:
            raise ValueError("SigLIP scores images (anchors) against texts: pass candidates")
        candidates, pairs = resolve_pairs(
            anchors, candidates, labels=labels, candidate_labels=candidate_labels, pos_mask=pos_mask,
            neg_weight=neg_weight,
        )
        with full_precision(anchors):
            images, texts = normalised(anchors), normalised(candidates)
            scale = upcast(self.logit_scale).clamp(0.0, MAX_LOGIT_SCALE).exp().to(images.dtype)
            bias = upcast(self.logit_bias).to(images.dtype)
            weight = None if neg_weight is None else upcast(neg_weight)
            scaled_images = scale * images
            total = sigmoid_pair_loss(torch.addmm(bias, scaled_images, texts.T), pairs, weight).sum()
            if extra_texts is not None:
                total = total + F.softplus(torch.addmm(bias, scaled_images, normalised(extra_texts).T)).sum()
            if extra_images is not None:
                total = total + F.softplus(torch.addmm(bias, scale * normalised(extra_images), texts.T)).sum()
        return total / pairs.has_pos.sum().clamp_min(1)
