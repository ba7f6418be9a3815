"""SimCLR-style self-supervised training on CIFAR-10 with any core objective, and its evaluation.

A step: two kornia views of a uint8 batch (seeded by ``(seed, epoch, batch, rank)``), the encoder and
projection head on both, then the configured objective terms on the projections ``z``:

* ``objective.views = "two_view"`` (SimCLR's 2N batch): anchors are both views, candidates the anchors
  themselves (self-pairs excluded), positives the other view: NT-Xent, DCL, WEINCE.
* ``objective.views = "paired"``: anchors are view 1, candidates view 2 (diagonal positives) plus any
  extra negatives from ``negatives``; ``objective.symmetric`` averages both directions. The negative
  sources (queue, MoCHi, Feature Transformation) need this form; DHEL, KCL and SigLIP give the same
  loss in both (they split a two-view batch into its views).
  With ``model.key_momentum > 0`` (MoCo) the positives and the queued keys come from a momentum
  copy of the model, without gradient.

Across ranks every term runs through :func:`contrasuite.core.distributed.distributed_objective`,
which applies the objective's declared behaviour (local rows against gathered columns, ring, or the
global batch). Evaluation (:mod:`contrasuite.core.metrics.probe`) uses the encoder features ``h``
with BatchNorm in eval mode: weighted kNN (k=200, T=0.1) and a linear probe selected on a validation
split carved from the training set; ``evaluate("val")`` scores kNN on that split, ``evaluate("test")``
reports on the test set.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Optional, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from contrasuite.core.distributed import average_gradients_over_ranks, batch_shard, distributed_objective
from contrasuite.core.metrics.probe import extract_features, knn_accuracy, linear_probe, stratified_split
from contrasuite.core.negatives.paired import PairedNegatives, paired_negatives
from contrasuite.core.objectives import ObjectiveSum
from contrasuite.core.task.config_fields import bounded, one_of
from contrasuite.core.task.config_fields import ObjectiveConfig as BaseObjectiveConfig
from contrasuite.core.task.errors import ConfigValueError, DataError
from contrasuite.core.task.optim import GroupConfig, Length, OptimConfig, build_optimization, optim_field
from contrasuite.core.task.protocol import SmokeSettings, StepContext, TaskContext
from contrasuite.core.task.seeding import derived_seed, seeded_generator
from contrasuite.domains.image_ssl.augment import AugmentConfig, Normalize, TwoViewAugment
from contrasuite.domains.image_ssl.data import CLASSES, folder_classes, load_cifar10, load_image_folder
from contrasuite.domains.image_ssl.encoders import ENCODERS, SSLModel, build_encoder


@dataclass
class DataConfig:
    """``config.data``: which CIFAR-10 files, and which part of them."""

    source: str = one_of("auto", ("auto", "jpeg", "python", "folder"))
    """CIFAR-10: ``auto`` (JPEG copy if present, else the official archive), ``jpeg`` or ``python``;
    ``folder``: your own images, ``data.folder`` laid out as ``{train,test}/<class>/<image>``."""
    folder: Optional[str] = None
    """``source: folder``: the image folder (absolute, or relative to the data root)."""
    image_size: int = bounded(32, ge=8)
    """``source: folder``: images are resized to this square size; the crops of the augmentation too."""
    cache_dir: Optional[str] = None
    """Where the decoded JPEG set is cached (default ``$CONTRASUITE_CACHE`` or ``~/.cache/contrasuite``)."""
    download: bool = True
    """Download the official archive when no layout is found (needs network)."""
    train_subset: int = bounded(0, ge=0)
    """Train on a class-balanced subset of this many training images (0: all 50,000)."""
    test_subset: int = bounded(0, ge=0)
    """Report on a class-balanced subset of this many test images (0: all 10,000)."""
    val_fraction: float = bounded(0.1, ge=0, lt=1)
    """Stratified share of the (subset of the) training set held out for selection (kNN val, probe)."""
    split_seed: int = 0
    """Seed of the subsets and of the validation split (fixed across training seeds)."""


@dataclass
class ModelConfig:
    """``config.model``: encoder ``f`` and projection head ``g``."""

    encoder: str = one_of("resnet18_cifar", ENCODERS)
    """``resnet18_cifar`` or ``small_conv``."""
    width: int = bounded(64, ge=1)
    proj_hidden: int = bounded(512, ge=1)
    proj_dim: int = bounded(128, ge=1)
    key_momentum: float = bounded(0.0, ge=0, lt=1)
    """> 0: MoCo's key encoder, an EMA copy ``theta_k <- m theta_k + (1 - m) theta_q`` after every step
    that embeds the positives (and the queued keys) without gradient; needs ``objective.views: paired``.
    0: one shared encoder, both views carry gradient (SimCLR)."""


@dataclass
class ObjectiveConfig(BaseObjectiveConfig):
    """``config.objective``: loss terms (any core objective) and how the two views are paired."""

    terms: list[dict[str, Any]] = field(default_factory=lambda: [{"name": "infonce", "weight": 1.0, "temperature": 0.5}])
    views: str = one_of("two_view", ("two_view", "paired"))
    """``two_view`` (2N anchors compared with each other) or ``paired`` (view 1 against view 2 + negatives)."""
    symmetric: bool = True
    """``paired`` only: average the loss of (view 1 -> view 2) and (view 2 -> view 1)."""


@dataclass
class EvalConfig:
    """``config.eval``: frozen-feature protocol (BatchNorm in eval mode)."""

    knn_k: int = bounded(200, ge=1)
    knn_temperature: float = bounded(0.1, gt=0)
    linear: bool = True
    """Run the linear probe in ``evaluate("test")``."""
    linear_epochs: int = bounded(100, ge=1)
    linear_lr: float = bounded(1e-3, gt=0)
    linear_batch_size: int = bounded(512, gt=0)
    linear_weight_decays: list[float] = field(default_factory=lambda: [0.0, 1e-5, 1e-4, 1e-3])
    batch_size: int = bounded(1024, gt=0)
    """Batch size of feature extraction."""


@dataclass
class ImageSSLConfig:
    """The ``config:`` section of an ``image_ssl`` run."""

    batch_size: int = bounded(512, gt=0)
    """Global batch (images per step, each giving two views); split evenly over ranks."""
    gradcache_chunk: int = bounded(0, ge=0)
    """Embed the local batch in chunks of this many images (GradCache: loss on the whole batch, backward
    chunk by chunk, exact for any objective); 0: one pass. BatchNorm then normalises per chunk."""
    data: DataConfig = field(default_factory=DataConfig)
    augment: AugmentConfig = field(default_factory=AugmentConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    objective: ObjectiveConfig = field(default_factory=ObjectiveConfig)
    negatives: dict[str, Any] = field(default_factory=dict)
    """Extra negative source ``{name: queue|mochi|feature_transformation|topk|<registered>, in_batch: ..., ...}``
    (:mod:`contrasuite.core.negatives.paired`); empty: in-batch only."""
    optim: OptimConfig = optim_field(name="sgd", lr=0.12, momentum=0.9, weight_decay=5e-4, warmup=Length(epochs=10.0),
                                     groups={"objective": GroupConfig(weight_decay=0.0)})
    """The parts ``model`` (encoder and head) and ``objective`` (learned temperatures, logit scale and bias: no weight
    decay by default); shipped configs decay on a cosine to 0 at ``${run.epochs}`` (:mod:`contrasuite.core.task.optim`)."""
    eval: EvalConfig = field(default_factory=EvalConfig)


@dataclass(frozen=True)
class SSLBatch:
    """A global batch: indices into the training images, the seed of their augmentation, and this rank's
    part of the batch (the views are drawn for the whole batch, so they do not depend on the world size)."""

    indices: Tensor
    seed: int
    part: slice = field(default_factory=lambda: slice(None))


class _EpochBatches:
    """One epoch's batches: a seeded permutation, cut into full global batches (drop last), each with this
    rank's contiguous part."""

    def __init__(self, n: int, global_batch: int, rank: int, world: int, seed: int, epoch: int) -> None:
        self.n, self.global_batch, self.rank, self.world = n, global_batch, rank, world
        self.seed, self.epoch = seed, epoch

    def __len__(self) -> int:
        return self.n // self.global_batch

    def __iter__(self) -> Iterator[SSLBatch]:
        gen = seeded_generator(self.seed, self.epoch)
        order = torch.randperm(self.n, generator=gen)
        part = batch_shard(self.global_batch, self.rank, self.world)
        for b in range(len(self)):
            start = b * self.global_batch
            # (the trailing 0 was the rank: one process keeps the views it always had)
            yield SSLBatch(order[start : start + self.global_batch], derived_seed(self.seed, self.epoch, b, 0), part)


def balanced_subset(labels: np.ndarray, size: int, seed: int, what: str) -> np.ndarray:
    """Sorted indices of ``size // classes`` random images per class (all of them for ``size = 0``)."""
    if size == 0:
        return np.arange(len(labels))
    classes = np.unique(labels)
    per_class = size // len(classes)
    if size < 0 or per_class < 1 or size > len(labels):
        raise ConfigValueError(f"{what} must be 0 or between {len(classes)} and {len(labels)}, got {size}")
    rng = np.random.default_rng(seed)
    picked = [rng.permutation(np.flatnonzero(labels == c))[:per_class] for c in classes]
    return np.sort(np.concatenate(picked))


class ImageSSLTask:
    """Self-supervised image representations on CIFAR-10 (see the module docstring)."""

    config_class = ImageSSLConfig
    smoke = SmokeSettings(
        8,
        ("config.data.train_subset=100", "config.data.test_subset=50", "config.gradcache_chunk=0",
         "config.eval.linear_epochs=1", "config.eval.batch_size=64"),
        live_batch=lambda cfg: cfg.gradcache_chunk or cfg.batch_size, holds_a_batch=("config.data.train_subset",),
    )
    channels_last_on_cpu = True
    """``run.memory_format: auto`` lays the wrapped network out channels-last on the CPU (pipelines/memory_format.py)."""

    def setup(self, ctx: TaskContext) -> None:
        self.last_terms: dict[str, Tensor] = {}
        """The current step's weighted objective terms (detached), so a non-finite loss names its term."""
        cfg: ImageSSLConfig = ctx.config
        self.ctx, self.cfg = ctx, cfg
        if cfg.objective.views not in ("two_view", "paired"):
            raise ConfigValueError(f"config.objective.views must be 'two_view' or 'paired', got {cfg.objective.views!r}")
        if cfg.batch_size < 2 or cfg.batch_size % ctx.world_size:
            raise ConfigValueError(f"config.batch_size={cfg.batch_size} must be >= 2 and divisible by the {ctx.world_size} ranks")
        self._load_data(ctx, cfg.data)
        if len(self.train_images) < cfg.batch_size:
            raise ConfigValueError(
                f"config.batch_size={cfg.batch_size} exceeds the {len(self.train_images)} training images "
                f"(config.data.train_subset={cfg.data.train_subset})"
            )
        encoder, feature_dim = build_encoder(cfg.model.encoder, cfg.model.width)
        self.model = SSLModel(encoder, feature_dim, cfg.model.proj_hidden, cfg.model.proj_dim).to(ctx.device)
        self.train_model = ctx.wrap(self.model)
        self.key_model: SSLModel | None = None
        if cfg.model.key_momentum > 0:
            if cfg.objective.views != "paired":
                raise ConfigValueError("config.model.key_momentum > 0 embeds the positives with a key encoder: "
                                 "set config.objective.views=paired")
            self.key_model = copy.deepcopy(self.model).requires_grad_(False)
        self.objective = ObjectiveSum(cfg.objective.terms).to(ctx.device)
        if ctx.world_size > 1:
            average_gradients_over_ranks(self.objective)
        self.negatives: PairedNegatives | None = paired_negatives(cfg.negatives, cfg.model.proj_dim)
        if self.negatives is not None:
            self.negatives.to(ctx.device)
            if cfg.objective.views != "paired":
                raise ConfigValueError("config.negatives adds candidate columns: set config.objective.views=paired")
            if self.negatives.extrapolates and self.key_model is None:
                raise ConfigValueError(
                    "config.negatives: Feature Transformation's positive extrapolation needs detached keys (with a "
                    "shared encoder the mixed key pulls toward every negative and the features collapse): set "
                    "config.model.key_momentum > 0 (MoCo, as the official code) or config.negatives.extrapolate=false")
        self.augment = TwoViewAugment(cfg.augment, size=cfg.data.image_size).to(ctx.device)
        self.normalize = Normalize().to(ctx.device)
        learned = [p for p in self.objective.parameters() if p.requires_grad]
        self.optimization = build_optimization(cfg.optim, {"model": [("model", self.model.parameters()),
                                                                     ("objective", learned)]}, len(self.batches(0)))

    # -- construction -------------------------------------------------------------------------

    def _load_data(self, ctx: TaskContext, cfg: DataConfig) -> None:
        if cfg.source == "folder":
            if not cfg.folder:
                raise ConfigValueError("config.data.source=folder needs config.data.folder (a folder of {train,test}/<class>/<image>)")
            folder = ctx.data_root / cfg.folder  # an absolute path stays as it is
            self.classes = folder_classes(folder)
            if len(self.classes) < 2:
                raise DataError(f"image folder {folder}: one class ({self.classes[0]!r}); the kNN and linear "
                                "evaluation need at least 2 classes (every validation would score 100 %)")
            train, test = (load_image_folder(folder, split, cfg.image_size, cfg.cache_dir) for split in ("train", "test"))
        else:
            if cfg.image_size != 32:
                raise ConfigValueError(f"config.data.image_size={cfg.image_size}: CIFAR-10 images are 32 x 32")
            self.classes = CLASSES
            train = load_cifar10(ctx.data_root, "train", source=cfg.source, cache_dir=cfg.cache_dir, download=cfg.download)
            test = load_cifar10(ctx.data_root, "test", source=cfg.source, cache_dir=cfg.cache_dir, download=cfg.download)
        self.data_source = train.source
        keep = balanced_subset(train.labels, cfg.train_subset, cfg.split_seed, "config.data.train_subset")
        keep_test = balanced_subset(test.labels, cfg.test_subset, cfg.split_seed, "config.data.test_subset")
        self.train_images = torch.from_numpy(train.images[keep]).to(ctx.device)
        self.train_labels = torch.from_numpy(train.labels[keep])
        self.test_images = torch.from_numpy(test.images[keep_test]).to(ctx.device)
        self.test_labels = torch.from_numpy(test.labels[keep_test])
        self.fit_idx, self.val_idx = stratified_split(self.train_labels, cfg.val_fraction, cfg.split_seed)

    # -- the Task protocol --------------------------------------------------------------------

    def modules(self) -> Mapping[str, nn.Module]:
        out: dict[str, nn.Module] = {"model": self.model, "objective": self.objective}
        if self.key_model is not None:
            out["key_model"] = self.key_model
        if self.negatives is not None:
            out["negatives"] = self.negatives.module
        return out

    def optimizers(self) -> Mapping[str, torch.optim.Optimizer]:
        return self.optimization.optimizers

    def schedulers(self) -> Mapping[str, Any]:
        return self.optimization.schedulers

    def batches(self, epoch: int) -> _EpochBatches:
        ctx = self.ctx
        return _EpochBatches(len(self.train_images), self.cfg.batch_size, ctx.rank, ctx.world_size, ctx.seed, epoch)

    def _views(self, batch: SSLBatch) -> tuple[Tensor, Tensor]:
        images = self.train_images[batch.indices.to(self.train_images.device)]
        view1, view2 = self.augment(images, batch.seed)
        return view1[batch.part], view2[batch.part]

    def train_step(self, batch: SSLBatch, step: StepContext) -> Mapping[str, float]:
        self.last_terms.clear()
        view1, view2 = self._views(batch)
        if self.cfg.gradcache_chunk:
            return self._cached_step(view1, view2, batch, step)
        with step.autocast():
            _, z = self.train_model(torch.cat([view1, view2]))
        z1, z2 = F.normalize(z.float(), dim=1).chunk(2)
        keys = self._keys([(view1, view2)], step)
        loss = self.loss(z1, z2, keys=keys, epoch=step.epoch, seed=batch.seed)
        step.optimize("model", loss, terms=self.last_terms)
        self._after_step(keys or (z1, z2))
        return {"loss": float(loss.detach())}

    @torch.no_grad()
    def _keys(self, chunks: Sequence[tuple[Tensor, Tensor]], step: StepContext) -> tuple[Tensor, Tensor] | None:
        """The key encoder's normalised ``(k1, k2)`` of both views, chunk by chunk; ``None`` without one."""
        if self.key_model is None:
            return None
        parts = []
        for chunk in chunks:
            with step.autocast():
                _, k = self.key_model(torch.cat(chunk))
            parts.append(F.normalize(k.float(), dim=1).chunk(2))
        return torch.cat([k1 for k1, _ in parts]), torch.cat([k2 for _, k2 in parts])

    @torch.no_grad()
    def _after_step(self, keys: tuple[Tensor, Tensor]) -> None:
        """Move the key encoder toward the model (EMA) and enqueue this step's keys."""
        if self.key_model is not None:
            torch._foreach_lerp_(list(self.key_model.parameters()), list(self.model.parameters()),
                                 1.0 - self.cfg.model.key_momentum)
        if self.negatives is not None:
            self.negatives.update(*keys)

    def _cached_step(self, view1: Tensor, view2: Tensor, batch: SSLBatch, step: StepContext) -> Mapping[str, float]:
        k = self.cfg.gradcache_chunk
        chunks = [(view1[i : i + k], view2[i : i + k]) for i in range(0, view1.shape[0], k)]
        projected: list[Tensor] = []

        def embed(chunk: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
            _, z = self.train_model(torch.cat(chunk))
            return tuple(z.chunk(2))

        def loss_fn(z1: Tensor, z2: Tensor) -> Tensor:
            z1, z2 = F.normalize(z1.float(), dim=1), F.normalize(z2.float(), dim=1)
            projected[:] = [z1.detach(), z2.detach()]
            return self.loss(z1, z2, keys=keys, epoch=step.epoch, seed=batch.seed)

        keys = self._keys(chunks, step)
        loss = step.optimize_cached("model", embed, chunks, loss_fn, terms=self.last_terms)
        if keys or projected:
            self._after_step(keys or tuple(projected))
        return {"loss": float(loss.detach())}

    def loss(self, z1: Tensor, z2: Tensor, *, keys: tuple[Tensor, Tensor] | None = None, epoch: int = 0,
             seed: int = 0) -> Tensor:
        """The objective terms on L2-normalised projections ``z1, z2 [n, d]`` of this rank's batch.

        ``keys``: the key encoder's ``(k1, k2)``, the positives of the paired form in place of ``(z1, z2)``.
        """
        if self.cfg.objective.views == "two_view":
            n = z1.shape[0]
            anchors = torch.cat([z1, z2])
            labels = (torch.arange(n, device=z1.device) + self.ctx.rank * n).repeat(2)
            return self._terms(anchors, None, labels=labels)
        p1, p2 = keys or (z1, z2)
        forward = self._paired(z1, p2, epoch, seed)
        if not self.cfg.objective.symmetric:
            return forward
        return 0.5 * (forward + self._paired(z2, p1, epoch, seed + 1))

    def _paired(self, anchors: Tensor, positives: Tensor, epoch: int, seed: int) -> Tensor:
        if self.negatives is None:
            return self._terms(anchors, positives)
        ext = self.negatives(anchors, positives, epoch=epoch, seed=seed, rank=self.ctx.rank, world=self.ctx.world_size)
        return self._terms(ext.anchors, ext.candidates, **ext.objective_kwargs())

    def _terms(self, anchors: Tensor, candidates: Tensor | None, **kwargs: Any) -> Tensor:
        """The weighted terms across ranks (each by its declared distributed behaviour), recorded for messages."""
        try:
            parts = self.objective.parts(anchors, candidates, via=distributed_objective, **kwargs)
        except ValueError as err:
            raise ConfigValueError(f"config.objective.terms with views={self.cfg.objective.views!r}: {err}") from err
        for name, value in parts.items():
            self.last_terms[name] = self.last_terms.get(name, 0) + value.detach()
        return sum(parts.values())

    @torch.no_grad()
    def embed_for_health(self, batch: SSLBatch) -> tuple[Tensor, Tensor]:
        """Projections of both views of (at most 256 images of) ``batch``, for the engine's health metrics."""
        view1, view2 = self._views(SSLBatch(batch.indices[:256], batch.seed))
        _, z = self.model(torch.cat([view1, view2]))
        z1, z2 = F.normalize(z.float(), dim=1).chunk(2)
        return z1, z2

    # -- evaluation ---------------------------------------------------------------------------

    def features(self, images: Tensor, what: str = "images") -> Tensor:
        """Encoder features ``h`` of uint8 ``images`` with BatchNorm in eval mode (fp32, CPU)."""
        size = self.cfg.eval.batch_size
        chunks = self.ctx.progress((images[i : i + size] for i in range(0, len(images), size)),
                                   f"embedding {len(images)} {what}", total=-(-len(images) // size))
        with self.ctx.autocast():
            return extract_features(self.model.encoder, chunks, preprocess=self.normalize)

    def evaluate(self, split: str = "val") -> Mapping[str, float]:
        """``val``: kNN accuracy (%) on the held-out part of train; ``test``: kNN and linear probe (%) on test."""
        cfg = self.cfg.eval
        knn = {"k": cfg.knn_k, "temperature": cfg.knn_temperature, "num_classes": len(self.classes)}
        train_feats = self.features(self.train_images, "training images")
        if split == "val":
            bank, queries = train_feats[self.fit_idx], train_feats[self.val_idx]
            acc = knn_accuracy(bank, self.train_labels[self.fit_idx], queries, self.train_labels[self.val_idx], **knn)
            return {"knn_acc": 100.0 * acc}
        if split != "test":
            raise ValueError(f"evaluate: split must be 'val' or 'test', got {split!r}")
        test_feats = self.features(self.test_images, "test images")
        out = {"knn_acc": 100.0 * knn_accuracy(train_feats, self.train_labels, test_feats, self.test_labels, **knn)}
        if cfg.linear:
            decays = cfg.linear_weight_decays
            probe = linear_probe(
                train_feats, self.train_labels, test_feats, self.test_labels,
                weight_decays=tuple(decays), epochs=cfg.linear_epochs, lr=cfg.linear_lr,
                batch_size=cfg.linear_batch_size, val_fraction=self.cfg.data.val_fraction,
                seed=self.cfg.data.split_seed, device=self.ctx.device,
                progress=lambda wds: self.ctx.progress(wds, f"linear probe, {cfg.linear_epochs} epochs per weight decay",
                                                       total=len(decays)),
            )
            out.update(linear_acc=100.0 * probe.test_accuracy, linear_val_acc=100.0 * probe.val_accuracy,
                       linear_weight_decay=probe.weight_decay, linear_epoch=float(probe.epoch))
        return out
