"""The ``config:`` section of an ``image_text`` run (:class:`ImageTextConfig`) and its parts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from contrasuite.core.task.config_fields import ObjectiveConfig, bounded, objective_field, one_of
from contrasuite.core.task.optim import GroupConfig, OptimConfig, optim_field
from contrasuite.domains.image_text.models import ModelConfig
from contrasuite.domains.image_text.negatives import NegativesConfig


@dataclass
class DataConfig:
    """``config.data``."""

    source: str = one_of("emoji", ("emoji", "captions"))
    """``emoji`` (``<data_root>/emoji``) or ``captions`` (``captions_file`` + ``image_root``)."""
    style: str = "twitter"
    """Emoji style trained and tested on (``twitter``: Twemoji)."""
    unseen_style: Optional[str] = "google"
    """Emoji style only evaluated, never trained on (``google``: Noto); null: none."""
    captions_file: Optional[str] = None
    image_root: Optional[str] = None
    val_fraction: float = bounded(0.1, ge=0, lt=1)
    test_fraction: float = bounded(0.2, ge=0, lt=1)
    split_seed: int = 0
    """Seed of the split by group (fixed across training seeds)."""
    limit: int = bounded(0, ge=0)
    """Emoji: keep only the first ``limit`` base emoji (0: all), for smoke runs."""


@dataclass
class HardNegativeConfig:
    """``config.hard_negatives``: which negatives a training step uses."""

    texts: bool = False
    images: bool = False
    texts_per_pair: int = 3
    images_per_pair: int = 2
    image_pairs: bool = False
    """Negative images also bring their true captions, as pairs (GNM): a negative image is then an anchor of
    the image->text direction and its caption one of the text->image direction (False: NegCLIP-style
    negative-only columns)."""
    weight: float = 1.0
    """Weight of a hard negative (a negative made from the same emoji) in the softmax denominators."""
    focus_weight: float = 0.0
    """Weight of a second loss term whose denominators hold only the hard negatives: each image against
    its own negative captions, each caption against its own negative images (0: off)."""


@dataclass
class ImageTextConfig:
    """The ``config:`` section of an ``image_text`` run."""

    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    negatives: NegativesConfig = field(default_factory=NegativesConfig)
    negatives_file: Optional[str] = None
    """A file from ``contrasuite generate-negatives``; null: generate in memory from ``negatives``."""
    hard_negatives: HardNegativeConfig = field(default_factory=HardNegativeConfig)
    objective: ObjectiveConfig = objective_field({"name": "clip", "weight": 1.0})
    init_from: Optional[str] = None
    """A run folder or checkpoint whose ``model`` and ``objective`` start this run (stage 2 after alignment)."""
    batch_size: int = bounded(256, gt=0)
    """The global batch: under W processes every rank builds all of it, embeds its contiguous part and
    scores the gathered whole (the task's module docstring)."""
    optim: OptimConfig = optim_field(name="adamw", lr=1e-3, weight_decay=0.01, groups={"trunk": GroupConfig(lr_scale=0.1)})
    """AdamW over the parts ``model`` (heads and towers that train), ``objective`` (a learned logit scale) and
    ``trunk`` (pretrained layers that train, ``model.train_image_stages``: by default at 0.1 x ``optim.lr``)
    (:mod:`contrasuite.core.task.optim`)."""
    ema: float = bounded(0.0, ge=0, lt=1)
    """Decay of a weight average of the model that evaluation uses (0: off; ``contrasuite.domains.averaging``)."""
    gradcache_chunks: int = bounded(0, ge=0)
    eval_batch_size: int = bounded(512, gt=0)
    cache_dir: Optional[str] = None
    """Trunk-feature cache (default ``$CONTRASUITE_CACHE`` or ``~/.cache/contrasuite``)."""
