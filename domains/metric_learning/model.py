"""The embedding network: EfficientNet-Lite0 trunk, a linear embedding head, optional frozen stem.

The trunk is the network of ``domains/efficientnet_lite0.py`` (shared with translation and image_text).

``freeze_blocks = k`` freezes the stem and the first ``k`` MBConv blocks (always in eval mode, from
construction on, so their BatchNorm statistics stay the ImageNet ones); the rest of the backbone and
the head train. With a frozen part and no augmentation its outputs can be computed once and cached
(:meth:`EmbeddingNet.stem_features`), which the reduced CPU protocol uses.

``freeze_bn`` keeps every BatchNorm layer of the backbone in eval mode while training (ImageNet
running statistics, no batch statistics; the affine parameters of the trainable part still learn),
the usual setting of deep metric learning code (e.g. Proxy-Anchor's ``--bn-freeze 1``): an
m-per-class batch of 32 pairs is a poor sample for BatchNorm statistics.

``embedding_dim = 0`` means no head: the embedding is the pooled 1280-d backbone feature (the
untrained-backbone baseline).

For the hyperbolic loss the head's output is mapped onto the Poincare ball by the objective
(Ermolov et al., CVPR 2022: Linear -> clip -> exp_0); retrieval then ranks by distance on the ball.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from contrasuite.core.task.errors import ConfigValueError
from contrasuite.domains.efficientnet_lite0 import FEATURE_DIM, NUM_BLOCKS, efficientnet_lite0
from contrasuite.domains.efficientnet_lite0 import normalize as lite_normalize


class EmbeddingNet(nn.Module):
    """``images [B, 3, H, W]`` (normalised) -> embeddings ``[B, embedding_dim]``."""

    def __init__(
        self, embedding_dim: int = 128, pretrained: bool = True, freeze_blocks: int = 0, freeze_bn: bool = False
    ) -> None:
        super().__init__()
        if not 0 <= freeze_blocks <= NUM_BLOCKS:
            raise ConfigValueError(f"model.freeze_blocks must be in [0, {NUM_BLOCKS}], got {freeze_blocks}")
        if embedding_dim < 0:
            raise ConfigValueError(f"model.embedding_dim must be positive (or 0: no head), got {embedding_dim}")
        self.backbone = efficientnet_lite0(pretrained=pretrained)
        self.freeze_blocks, self.freeze_bn = freeze_blocks, freeze_bn
        self.head: nn.Module = nn.Identity()
        if embedding_dim:
            self.head = nn.Linear(FEATURE_DIM, embedding_dim)
            nn.init.orthogonal_(self.head.weight)
            nn.init.zeros_(self.head.bias)
        for p in self.frozen_parameters():
            p.requires_grad_(False)
        self.train()  # a new module is in training mode; the frozen part must not be, even before training

    def frozen_modules(self) -> list[nn.Module]:
        """Stem and the first ``freeze_blocks`` blocks (nothing when ``freeze_blocks == 0``)."""
        if self.freeze_blocks == 0:
            return []
        b = self.backbone
        return [b._conv_stem, b._bn0, *b._blocks[: self.freeze_blocks]]

    def frozen_parameters(self) -> list[nn.Parameter]:
        return [p for m in self.frozen_modules() for p in m.parameters()]

    def train(self, mode: bool = True) -> "EmbeddingNet":
        super().train(mode)
        for m in self.frozen_modules():
            m.eval()
        if self.freeze_bn:
            for m in self.backbone.modules():
                if isinstance(m, nn.BatchNorm2d):
                    m.eval()
        return self

    @torch.no_grad()
    def stem_features(self, images: Tensor) -> Tensor:
        """Output of the frozen part, computed in eval mode (a function of the image alone; cacheable)."""
        if any(m.training for m in self.frozen_modules()):
            raise RuntimeError("the frozen part is in training mode; call EmbeddingNet.train()/eval(), not the backbone's")
        return self.backbone.stem(images, self.freeze_blocks)

    def from_stem(self, features: Tensor) -> Tensor:
        """Embeddings from :meth:`stem_features` outputs."""
        return self.head(self.backbone.trunk(features, self.freeze_blocks))

    def forward(self, images: Tensor) -> Tensor:
        if self.freeze_blocks:
            return self.from_stem(self.stem_features(images))
        return self.head(self.backbone(images))


class FromStem(nn.Module):
    """``net.from_stem`` as a module's forward: what trains when stem features are cached, so that the engine's
    DDP wrapper runs it (a call to ``net.from_stem`` itself would bypass DDP and leave each rank its own gradient)."""

    def __init__(self, net: EmbeddingNet) -> None:
        super().__init__()
        self.net = net

    def forward(self, features: Tensor) -> Tensor:
        return self.net.from_stem(features)


class NormalizedEmbeddingNet(EmbeddingNet):
    """:class:`EmbeddingNet` on float images in ``[0, 1]``, EfficientNet-Lite's input normalisation inside;
    the same parameters and state dict (what ``contrasuite export`` writes and ``retrieve`` runs)."""

    def forward(self, images: Tensor) -> Tensor:
        return super().forward(lite_normalize(images))
