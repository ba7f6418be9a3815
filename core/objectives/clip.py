"""CLIP's symmetric image-text contrastive loss (Radford et al., "Learning Transferable Visual Models
From Natural Language Supervision", ICML 2021).

With L2-normalised images ``x``, texts ``y`` and logits ``l_ij = exp(t') x_i . y_j``::

    L = 1/2 ( mean_i CE(l_i., positives of i) + mean_j CE(l_.j, positives of j) )

``t'`` is learnable, initialised ``log(1/0.07)`` and clamped to ``[0, log 100]`` in the forward pass
(CLIP and open_clip clamp the scale at 100). Each direction is the weighted InfoNCE kernel
(:func:`contrasuite.core.objectives.infonce.weighted_infonce`), so multi-positive rows average one
cross-entropy per positive, as NT-Xent does.

Call: ``CLIPLoss()(images, texts, pos_mask=None, neg_weight=None, extra_texts=None, extra_images=None)``.
``extra_texts [K, D]`` are negative-only columns of the image->text direction (generated hard-negative
captions); ``extra_images [L, D]`` are negative-only columns of the text->image direction.
``neg_weight [N, M]`` weights the negatives of the image-text block in both directions.

Distributed (``GATHER_CANDIDATES``, open_clip's ``local_loss`` with ``gather_with_grad``): each rank
passes its local images and texts, the other ranks' texts as ``extra_texts`` and their images as
``extra_images``, gathered with gradient; averaging the ranks' losses gives the global loss.
"""

from __future__ import annotations

from typing import ClassVar

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from contrasuite.core.numerics import full_precision, upcast
from contrasuite.core.objectives.base import ContrastiveObjective, Distributed, reduce_mean, register_scalar
from contrasuite.core.objectives.infonce import tiled_weighted_infonce, weighted_infonce
from contrasuite.core.objectives.siglip import MAX_LOGIT_SCALE, normalised
from contrasuite.core.pairs import Blocks, Pairs, check_shapes, resolve_pairs
from contrasuite.core.tiling import check_tile_size


def with_extra_columns(logits: Tensor, pairs: Pairs, weight: Tensor | None, extra: Tensor | None) -> tuple[Tensor, Pairs, Tensor | None]:
    """Append negative-only logit columns ``extra [N, K]`` to ``logits [N, M]``, its pairs and weights."""
    if extra is None:
        return logits, pairs, weight
    zeros = torch.zeros_like(extra, dtype=torch.bool)
    pairs = Pairs(pos=torch.cat([pairs.pos, zeros], dim=1), valid=torch.cat([pairs.valid, ~zeros], dim=1))
    if weight is not None:
        weight = torch.cat([weight, torch.ones_like(extra)], dim=1)
    return torch.cat([logits, extra], dim=1), pairs, weight


def clip_loss(
    logits: Tensor,
    pairs: Pairs,
    neg_weight: Tensor | None = None,
    extra_text_logits: Tensor | None = None,
    extra_image_logits: Tensor | None = None,
    text_logits: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Per-image ``[N]`` and per-text ``[M]`` cross-entropies of image-text ``logits [N, M]``.

    ``extra_text_logits [N, K]`` (images vs extra texts) and ``extra_image_logits [M, L]`` (texts vs
    extra images) are negative-only columns of the two directions. ``text_logits [M, N]`` is the
    text->image matrix when it was computed separately (row-major rows reduce faster than
    ``logits.T``); it must equal ``logits.T``.
    """
    transposed = Pairs(pos=pairs.pos.T.contiguous(), valid=pairs.valid.T.contiguous())
    weight_t = None if neg_weight is None else neg_weight.T
    text_logits = logits.T if text_logits is None else text_logits
    per_image = weighted_infonce(*with_extra_columns(logits, pairs, neg_weight, extra_text_logits))
    per_text = weighted_infonce(*with_extra_columns(text_logits, transposed, weight_t, extra_image_logits))
    return per_image, per_text


class CLIPLoss(ContrastiveObjective):
    """Symmetric image-text InfoNCE with a learnable logit scale; see the module docstring.

    Args:
        init_logit_scale: initial ``t'`` (logit scale ``exp(t')``). Default ``log(1/0.07)``.
        learnable: trainable ``nn.Parameter`` (True) or a fixed buffer.
        tile_size: compute both directions in tiles (:func:`tiled_clip_loss`); ``None`` (default): dense.
    """

    tiles: ClassVar[bool] = True
    distributed = Distributed.GATHER_CANDIDATES

    paired_views: ClassVar[bool] = True
    per_anchor_mean: ClassVar[bool] = False  # the mean of both directions

    def __init__(self, init_logit_scale: float = math.log(1 / 0.07), learnable: bool = True, tile_size: int | None = None) -> None:
        super().__init__()
        register_scalar(self, "logit_scale", init_logit_scale, learnable)
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
            raise ValueError("CLIPLoss compares images (anchors) with texts: pass candidates (or a two-view batch with labels)")
        plain = labels is None and pos_mask is None and neg_weight is None and len(anchors) == len(candidates)
        # Plain pairs (square, diagonal positives, unweighted): open_clip's index-target cross-entropy.
        if plain and self.tile_size is None:
            check_shapes(anchors, candidates)
            pairs = None
        else:
            candidates, pairs = resolve_pairs(
                anchors, candidates, labels=labels, candidate_labels=candidate_labels, pos_mask=pos_mask,
                neg_weight=neg_weight,
            )
        with full_precision(anchors):
            images, texts = normalised(anchors), normalised(candidates)
            scale = upcast(self.logit_scale).clamp(0.0, MAX_LOGIT_SCALE).exp().to(images.dtype)
            if self.tile_size is not None:
                extra = [None if e is None else normalised(e) for e in (extra_texts, extra_images)]
                return tiled_clip_loss(images, texts, scale, pairs, neg_weight, self.tile_size, *extra)
            scaled_images, scaled_texts = scale * images, scale * texts
            extra_t = None if extra_texts is None else scaled_images @ normalised(extra_texts).T
            extra_i = None if extra_images is None else scaled_texts @ normalised(extra_images).T
            # Two matmuls, as open_clip: each direction then reduces along contiguous rows.
            logits, text_logits = scaled_images @ texts.T, scaled_texts @ images.T
            if pairs is None:
                return (diagonal_cross_entropy(logits, extra_t) + diagonal_cross_entropy(text_logits, extra_i)) / 2
            weight = None if neg_weight is None else upcast(neg_weight)
            per_image, per_text = clip_loss(logits, pairs, weight, extra_t, extra_i, text_logits)
        return (reduce_mean(per_image, pairs.has_pos) + reduce_mean(per_text, pairs.pos.any(dim=0))) / 2


def tiled_clip_loss(
    images: Tensor, texts: Tensor, scale: Tensor, pairs: Pairs, neg_weight: Tensor | Blocks | None, tile_size: int,
    extra_texts: Tensor | None = None, extra_images: Tensor | None = None,
) -> Tensor:
    """The symmetric loss of normalised ``images [N, D]`` and ``texts [M, D]`` (``l = scale x . y``), each
    direction :func:`~contrasuite.core.objectives.infonce.tiled_weighted_infonce` over its candidates and
    negative-only extras; ``neg_weight`` weighs the image-text block in both directions."""
    text_pairs = pairs.transposed()
    if neg_weight is None or callable(neg_weight):
        weight_t = None if neg_weight is None else (lambda rows, cols: neg_weight(cols, rows).T)
    else:
        weight_t = upcast(neg_weight).T
        neg_weight = upcast(neg_weight)
    means = []
    for x, y, extra, direction, weight in (
        (images, texts, extra_texts, pairs, neg_weight),
        (texts, images, extra_images, text_pairs, weight_t),
    ):
        if extra is not None:
            y, direction = torch.cat([y, extra]), direction.with_negative_columns(extra.shape[0])
        losses = tiled_weighted_infonce(scale * x, y, direction, weight, tile_size)
        means.append(reduce_mean(losses, direction.has_pos))
    return (means[0] + means[1]) / 2


def diagonal_cross_entropy(logits: Tensor, extra: Tensor | None) -> Tensor:
    """Mean cross-entropy of square ``logits [N, N]`` (plus negative-only ``extra [N, K]``) with target ``i``."""
    if extra is not None:
        logits = torch.cat([logits, extra], dim=1)
    return F.cross_entropy(logits, torch.arange(logits.shape[0], device=logits.device))
