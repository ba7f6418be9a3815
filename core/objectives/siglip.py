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

from typing import ClassVar

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from contrasuite.core.numerics import full_precision, upcast
from contrasuite.core.objectives.base import ContrastiveObjective, Distributed, register_scalar
from contrasuite.core.pairs import Blocks, Pairs, resolve_pairs
from contrasuite.core.similarity import normalize
from contrasuite.core.tiling import Tiling, check_tile_size, tiled_rows

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
        tile_size: sum the pair terms in tiles (:func:`tiled_sigmoid_pair_sum`); ``None`` (default): dense.
    """

    tiles: ClassVar[bool] = True
    distributed = Distributed.PAIRWISE_RING

    paired_views: ClassVar[bool] = True
    per_anchor_mean: ClassVar[bool] = False  # a sum over pairs; the ring uses loss_of_pairs

    def __init__(
        self,
        init_logit_scale: float = math.log(10.0),
        init_logit_bias: float = -10.0,
        learnable: bool = True,
        tile_size: int | None = None,
    ) -> None:
        super().__init__()
        register_scalar(self, "logit_scale", init_logit_scale, learnable)
        register_scalar(self, "logit_bias", init_logit_bias, learnable)
        self.tile_size = check_tile_size(tile_size)

    def forward(
        self,
        anchors: Tensor,
        candidates: Tensor | None = None,
        *,
        labels: Tensor | None = None,
        candidate_labels: Tensor | None = None,
        pos_mask: Tensor | Blocks | None = None,
        neg_weight: Tensor | Blocks | None = None,
        extra_texts: Tensor | None = None,
        extra_images: Tensor | None = None,
    ) -> Tensor:
        split = self.two_view_labels(anchors, candidates, labels, (candidate_labels, pos_mask, neg_weight,
                                                                  extra_texts, extra_images))
        if split is not None:
            return split
        if candidates is None:
            raise ValueError("SigLIP scores images (anchors) against texts: pass candidates (or a two-view batch with labels)")
        candidates, pairs = resolve_pairs(
            anchors, candidates, labels=labels, candidate_labels=candidate_labels, pos_mask=pos_mask,
            neg_weight=neg_weight,
        )
        return self.loss_of_pairs(anchors, candidates, pairs, neg_weight, extra_texts, extra_images)

    def loss_of_pairs(
        self,
        anchors: Tensor,
        candidates: Tensor,
        pairs: Pairs,
        neg_weight: Tensor | Blocks | None,
        extra_texts: Tensor | None = None,
        extra_images: Tensor | None = None,
    ) -> Tensor:
        """(sum of the pair terms) / max(images with a positive, 1), the pairs resolved."""
        with full_precision(anchors):
            images, texts = normalised(anchors), normalised(candidates)
            scale = upcast(self.logit_scale).clamp(0.0, MAX_LOGIT_SCALE).exp().to(images.dtype)
            bias = upcast(self.logit_bias).to(images.dtype)
            weight = neg_weight if neg_weight is None or callable(neg_weight) else upcast(neg_weight)
            extra = [None if e is None else normalised(e) for e in (extra_texts, extra_images)]
            if self.tile_size is not None:
                total = tiled_sigmoid_pair_sum(images, texts, scale, bias, pairs, weight, self.tile_size, *extra)
            else:
                scaled_images = scale * images
                total = sigmoid_pair_loss(torch.addmm(bias, scaled_images, texts.T), pairs, weight).sum()
                if extra[0] is not None:
                    total = total + F.softplus(torch.addmm(bias, scaled_images, extra[0].T)).sum()
                if extra[1] is not None:
                    total = total + F.softplus(torch.addmm(bias, scale * extra[1], texts.T)).sum()
        return total / pairs.has_pos.sum().clamp_min(1)


def tiled_sigmoid_pair_sum(
    images: Tensor, texts: Tensor, scale: Tensor, bias: Tensor, pairs: Pairs, neg_weight: Tensor | Blocks | None,
    tile_size: int, extra_texts: Tensor | None = None, extra_images: Tensor | None = None,
) -> Tensor:
    """The sum of every pair term, ``sum_ij w_ij softplus(l_ij) - sum_{positives} l_ip`` (one pass) with
    ``l = scale images @ texts.T + bias`` (normalised rows), in tiles (:func:`~contrasuite.core.tiling.tiled_rows`,
    ``"softplus"``). The bias rides as a last factor column (``[x, b] . [y, 1]``), so it gets its
    gradient from the factors; extra texts are negative-only columns, extra images rows of negatives."""

    def with_bias(x: Tensor, value: Tensor) -> Tensor:
        return torch.cat([x, value.expand(x.shape[0], 1)], dim=1)

    one = torch.ones((), dtype=texts.dtype, device=texts.device)
    x, y = with_bias(scale * images, bias), with_bias(texts, one)
    columns = y if extra_texts is None else torch.cat([y, with_bias(extra_texts, one)])
    all_pairs = pairs if extra_texts is None else pairs.with_negative_columns(extra_texts.shape[0])
    positive_scale = torch.ones(x.shape[0], dtype=x.dtype, device=x.device)
    spec = Tiling(all_pairs, tile_size, True, "softplus", weight_columns=pairs.shape[1], positive_scale=positive_scale)
    total = tiled_rows(x, columns, spec, neg_weight).sum()
    if extra_images is not None:
        negatives = Pairs.no_positives(extra_images.shape[0], y.shape[0], y.device)
        spec = Tiling(negatives, tile_size, include_positives=True, reduction="softplus")
        total = total + tiled_rows(with_bias(scale * extra_images, bias), y, spec).sum()
    return total
