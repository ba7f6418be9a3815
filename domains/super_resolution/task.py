"""The super-resolution task: EDSR-baseline with L1, optionally plus PCL-SR's contrastive term.

One training step (``contrastive: true``), in a fixed order through ``step.optimize``:

1. ``SR = G(LR)``; frequency-space positives and negatives of each HR patch
   (:mod:`~contrasuite.domains.super_resolution.frequency`).
2. ``discriminator``: the dual contrastive loss, reals = {HR, sharpened HR}, fakes =
   {SR (detached), negatives} (:func:`~contrasuite.domains.super_resolution.losses.dual_contrastive_d_loss`).
3. ``generator``: ``L1(SR, HR) + objective(phi(SR), [phi(positives); phi(negatives)], pos_mask)``
   with D's parameters frozen. ``contrastive_gradient: gradient`` lets **the gradient flow through
   phi(SR) into G**, the loss the paper writes; ``official`` computes the term without gradient, as
   the released code does (Aitical/PCL-SISR ``src/loss/adversarial.py`` embeds SR under ``no_grad``),
   so G's gradient is that of L1 alone. ``embed_passes: per_group`` embeds SR, positives and
   negatives in separate discriminator passes (BatchNorm statistics per group), as the official code.

The objective is any core objective built from ``config.objective.terms`` (default InfoNCE, t = 1
as in the paper, weight 0.02: the paper's ``1*L1 + 5*CL`` on the 0-255 scale is ``L1 + 5/255 CL`` on
the ``[0, 1]`` scale used here). ``contrastive: false`` is plain EDSR-baseline with L1. PCL-SR's protocol fine-tunes a trained model:
``init_from`` (a run folder or checkpoint: its generator's weights), ``optim.schedule: {name: cosine, ...}``
(cosine decay of both learning rates) and ``run.grad_clip_value`` (the official ``--gclip 1``).

``config.optim`` (:mod:`contrasuite.core.task.optim`) builds Adam for each optimizer: ``discriminator`` (the part
``discriminator``) and ``generator`` (the parts ``generator`` and ``objective``, a learnable objective's
parameters); ``groups: {discriminator: {lr: 1.0e-4}}`` gives D its own rate.

``evaluate("val")`` measures PSNR/SSIM on Y on held-out T91 crops (checkpoint selection);
``evaluate("test")`` on Set5, Set14, B100 (``config.test_sets``).
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from contrasuite.core.distributed import batch_shard, distributed_objective
from contrasuite.core.objectives import ObjectiveSum
from contrasuite.core.task.config_fields import ObjectiveConfig, bounded, objective_field, one_of
from contrasuite.core.task.errors import ConfigValueError, SetupError
from contrasuite.core.task.optim import OptimConfig, build_optimization, optim_field
from contrasuite.core.task.protocol import SmokeSettings, StepContext, TaskContext
from contrasuite.core.task.seeding import seeded_generator
from contrasuite.domains.image_loading import EpochBatches, epoch_batches, image_loader
from contrasuite.domains.images import read_rgb_array
from contrasuite.domains.init_from import load_weights
from contrasuite.domains.super_resolution import frequency
from contrasuite.domains.super_resolution.data import PatchSampler, degrade, eval_pairs, load_set, modcrop, to_stderr
from contrasuite.domains.super_resolution.disk import FolderPatches
from contrasuite.domains.super_resolution.frequency import FrequencyConfig
from contrasuite.domains.super_resolution.imresize import quantize
from contrasuite.domains.super_resolution.inference import upscale
from contrasuite.domains.super_resolution.losses import contrastive_layout, dual_contrastive_d_loss
from contrasuite.domains.super_resolution.metrics import psnr_y, ssim_y
from contrasuite.domains.super_resolution.networks import EDSR, WaveletDiscriminator


@dataclass
class DataConfig:
    train_set: str = "T91"
    patch_size: int = bounded(48, ge=4)
    """LR patch side (EDSR: 48; the HR patch is ``scale`` times larger)."""
    steps_per_epoch: int = bounded(1000, ge=1)
    val_every: int = bounded(10, ge=2)
    """Every ``val_every``-th training image (sorted by name) is held out for validation."""
    val_crop: int = bounded(64, ge=0)
    """LR side of the centre crop of each validation image."""
    max_train_images: Optional[int] = None
    """Use only the first N training images (tests)."""
    train_folder: Optional[str] = None
    """A folder of HR training images (absolute, or relative to the data root), e.g. DIV2K's
    ``DIV2K_train_HR``: patches are then read from disk by ``workers`` DataLoader processes
    (``disk.py``) instead of from ``train_set`` decoded in memory."""
    train_lr_folder: Optional[str] = None
    """``train_folder`` only: its LR images under the same file names (e.g. ``DIV2K_train_LR_bicubic/X2``);
    null: made from each HR image by the MATLAB bicubic degradation, as for ``train_set``."""
    workers: int = bounded(0, ge=0)
    """``train_folder`` only: DataLoader worker processes (0: read in the training process)."""


@dataclass
class ModelConfig:
    n_resblocks: int = bounded(16, ge=1)
    n_feats: int = bounded(64, ge=1)
    res_scale: float = 1.0


@dataclass
class DiscriminatorConfig:
    embed_layer: int = 4
    channel_divisor: int = bounded(1, ge=1)


@dataclass
class SRConfig:
    """``config:`` section of a super-resolution run."""

    scale: int = one_of(2, (2, 3, 4))
    batch_size: int = bounded(16, gt=0)
    """The global batch of LR patches: under W processes each rank super-resolves a contiguous ``batch_size / W`` of
    the patches one process would draw (L1 then equals the one-process loss; the contrastive term is per rank)."""
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = optim_field(name="adam", lr=1e-4)
    """Module docstring; EDSR halves both rates every 200k steps: ``schedule: {name: step, every: {steps: 200000},
    gamma: 0.5}``."""
    contrastive: bool = True
    in_batch_negatives: bool = True
    """Other images' positives and negatives are negatives too; false: each image's own negatives only (official)."""
    contrastive_gradient: str = one_of("gradient", ("gradient", "official"))
    """``gradient``: phi(SR) carries the term's gradient into G (the paper's loss); ``official``: no gradient
    from the term reaches G (the released code), so it only shows in the logged loss."""
    embed_passes: str = one_of("joint", ("joint", "per_group"))
    """``joint``: one discriminator pass over SR, positives and negatives; ``per_group``: one pass per group."""
    init_from: Optional[str] = None
    """A run folder (its best.pt, else last.pt) or checkpoint whose generator weights start this run."""
    discriminator: DiscriminatorConfig = field(default_factory=DiscriminatorConfig)
    frequency: FrequencyConfig = field(default_factory=FrequencyConfig)
    objective: ObjectiveConfig = objective_field({"name": "infonce", "weight": 0.02, "temperature": 1.0})
    test_sets: list[str] = field(default_factory=lambda: ["Set5", "Set14", "B100"])
    eval_tile: Optional[int] = None
    """Tile size (LR px) for test-time inference; None runs whole images."""


def _set_requires_grad(module: nn.Module, flag: bool) -> None:
    for p in module.parameters():
        p.requires_grad_(flag)


class SuperResolutionTask:
    """See the module docstring."""

    config_class = SRConfig
    smoke = SmokeSettings(2, ("config.data.max_train_images=40", "config.data.val_every=4",
                              "config.data.steps_per_epoch=2", "config.test_sets=[Set5]"))
    channels_last_on_cpu = True
    """``run.memory_format: auto`` lays the wrapped network out channels-last on the CPU (pipelines/memory_format.py)."""

    def setup(self, ctx: TaskContext) -> None:
        cfg: SRConfig = ctx.config
        self.cfg, self.ctx, self.device = cfg, ctx, ctx.device
        if cfg.batch_size % ctx.world_size:
            raise SetupError(f"config.batch_size={cfg.batch_size} must be divisible by the "
                             f"{ctx.world_size} processes (it is the global batch)")
        self.loader = None
        if cfg.data.train_folder:
            val = self._disk_training(Path(ctx.data_root))
        else:
            items = [(stem, img if img.shape[0] == 3 else img.expand(3, -1, -1))
                     for stem, img in load_set(str(ctx.data_root), cfg.data.train_set)]
            train, held = self._hold_out(items)
            self.sampler = PatchSampler([img for _, img in train], cfg.scale, cfg.data.patch_size,
                                        names=[stem for stem, _ in train],
                                        source=f"SR set {cfg.data.train_set} under {Path(ctx.data_root) / 'sr'}",
                                        log=self._log)
            val = [img for _, img in held]
        self.val = [self._val_crop(img) for img in val]
        self.generator = ctx.wrap(EDSR(cfg.scale, cfg.model.n_resblocks, cfg.model.n_feats, cfg.model.res_scale).to(self.device))
        if cfg.init_from:
            load_weights(cfg.init_from, {"generator": self.generator})
        self._modules: dict[str, nn.Module] = {"generator": self.generator}
        parts: dict[str, list[tuple[str, Any]]] = {}
        if cfg.contrastive:
            d = WaveletDiscriminator(cfg.discriminator.embed_layer, cfg.discriminator.channel_divisor).to(self.device)
            self.embedder = d
            """The unwrapped discriminator: ``embed`` runs with frozen parameters, so it needs no DDP sync."""
            self.discriminator = ctx.wrap(d)
            self.objective = ObjectiveSum(cfg.objective.terms).to(self.device)
            self._modules["discriminator"] = self.discriminator
            self._modules["objective"] = self.objective
            parts["discriminator"] = [("discriminator", self.discriminator.parameters())]
        # A learnable objective (SigLIP's scale and bias, ...) trains with the generator.
        parts["generator"] = [("generator", self.generator.parameters()),
                              ("objective", self.objective.parameters() if cfg.contrastive else [])]
        self.optimization = build_optimization(cfg.optim, parts, cfg.data.steps_per_epoch)

    def _val_crop(self, img: Tensor) -> tuple[Tensor, Tensor]:
        s, c = self.cfg.scale, self.cfg.data.val_crop
        hr = modcrop(img, s)
        h, w = hr.shape[-2] // s, hr.shape[-1] // s
        ch, cw = min(c, h), min(c, w)
        y, x = (h - ch) // 2, (w - cw) // 2
        hr = hr[..., y * s : (y + ch) * s, x * s : (x + cw) * s]
        return degrade(hr, s), hr

    def modules(self) -> Mapping[str, nn.Module]:
        return self._modules

    def optimizers(self) -> Mapping[str, torch.optim.Optimizer]:
        return self.optimization.optimizers

    def schedulers(self) -> Mapping[str, Any]:
        return self.optimization.schedulers

    def _log(self, message: str) -> None:
        """A line on stderr from rank 0 only (every rank reads the same training set)."""
        if self.ctx.rank == 0:
            to_stderr(message)

    def _hold_out(self, items: list) -> tuple[list, list]:
        """``(train, val)``: every ``val_every``-th of the first ``max_train_images`` items is held out."""
        items, every = items[: self.cfg.data.max_train_images], self.cfg.data.val_every
        return ([x for i, x in enumerate(items) if i % every != every - 1],
                [x for i, x in enumerate(items) if i % every == every - 1])

    def _disk_training(self, data_root: Path) -> list[Tensor]:
        """Set up the on-disk patch loader of ``data.train_folder``; returns the decoded validation images."""
        dc = self.cfg.data
        folder = data_root / dc.train_folder  # an absolute path stays as it is
        if not folder.is_dir():
            raise FileNotFoundError(f"config.data.train_folder: {folder} is not a folder")
        files = sorted(p for p in folder.iterdir() if p.suffix.lower() in (".png", ".bmp", ".jpg", ".jpeg", ".tif", ".tiff"))
        if not files:
            raise FileNotFoundError(f"config.data.train_folder: no images in {folder}")
        train, val = self._hold_out(files)
        lr_folder = data_root / dc.train_lr_folder if dc.train_lr_folder else None
        dataset = FolderPatches(train, self.cfg.scale, dc.patch_size, self.ctx.seed, lr_folder, log=self._log)
        self.loader = image_loader(dataset, EpochBatches(self._disk_batches, self.ctx.rank, self.ctx.world_size),
                                   dc.workers, self.device)
        return [torch.from_numpy(read_rgb_array(p)).permute(2, 0, 1).float() / 255.0 for p in val]

    def _epoch_generator(self, epoch: int) -> torch.Generator:
        """The generator of ``epoch``'s patch draws, seeded by ``(seed, epoch)`` (the same on every rank)."""
        return torch.Generator().manual_seed(self.ctx.seed * 100_003 + epoch)

    def _disk_batches(self, epoch: int) -> list[list[int]]:
        """Image indices of each step's global batch (one random image per patch)."""
        gen = self._epoch_generator(epoch)
        n, bs = len(self.loader.dataset), self.cfg.batch_size
        return [torch.randint(n, (bs,), generator=gen).tolist() for _ in range(self.cfg.data.steps_per_epoch)]

    def batches(self, epoch: int) -> Iterator[tuple[Tensor, Tensor]]:
        if self.loader is not None:
            for lr, hr in epoch_batches(self.loader, epoch):
                yield lr.float() / 255.0, hr.float() / 255.0
            return
        gen = self._epoch_generator(epoch)
        part = batch_shard(self.cfg.batch_size, self.ctx.rank, self.ctx.world_size)
        for _ in range(self.cfg.data.steps_per_epoch):
            yield self.sampler.batch(self.cfg.batch_size, gen, part)

    # -- training -------------------------------------------------------------------------------

    def variants(self, lr: Tensor, hr: Tensor, step: int) -> tuple[Tensor, Tensor]:
        """``(positives [P, B, ...] with HR first, negatives [K, B, ...])``, no gradient; drawn from
        ``(seed, step)`` for the whole global batch, this rank's images kept (as in one process)."""
        gen = seeded_generator(self.ctx.seed, "variants", step)
        part = batch_shard(self.cfg.batch_size, self.ctx.rank, self.ctx.world_size)
        draws = frequency.Draws(gen, self.cfg.batch_size, part)
        with torch.no_grad():
            pos = torch.cat([hr[None], frequency.positives(hr, self.cfg.frequency, draws)])
            neg = frequency.negatives(hr, lr, self.cfg.scale, self.cfg.frequency, draws)
        return pos, neg

    def contrastive_loss(self, sr: Tensor, pos: Tensor, neg: Tensor) -> Tensor:
        """The objective on ``phi(SR)`` against ``phi`` of every positive and negative (gradient into ``sr``
        unless ``contrastive_gradient: official``)."""
        b = sr.shape[0]
        groups = [sr, pos.flatten(0, 1), neg.flatten(0, 1)]
        with torch.no_grad() if self.cfg.contrastive_gradient == "official" else nullcontext():
            if self.cfg.embed_passes == "per_group":
                emb = torch.cat([self.embedder.embed(g) for g in groups])
            else:
                emb = self.embedder.embed(torch.cat(groups))
        # Candidates image by image (each image's P + K variants together), so that every rank's block,
        # in rank order, is the global batch's; the layout's columns (variant by variant) are put in that
        # order, and the core scores this rank's anchors across ranks by each term's declared behaviour.
        variants, total = pos.shape[0] + neg.shape[0], b * self.ctx.world_size
        candidates = emb[b:].unflatten(0, (variants, b)).transpose(0, 1).flatten(0, 1)
        pos_mask, neg_weight = contrastive_layout(total, pos.shape[0], neg.shape[0], self.cfg.in_batch_negatives, sr.device)
        by_image = torch.arange(variants * total, device=sr.device).view(variants, total).t().flatten()
        rows = slice(self.ctx.rank * b, (self.ctx.rank + 1) * b)
        layout = {"pos_mask": pos_mask[rows][:, by_image]}
        if neg_weight is not None:
            layout["neg_weight"] = neg_weight[rows][:, by_image]
        return sum(self.objective.parts(emb[:b], candidates, via=distributed_objective, **layout).values())

    def train_step(self, batch: tuple[Tensor, Tensor], step: StepContext) -> Mapping[str, float]:
        lr, hr = (t.to(self.device, non_blocking=True) for t in batch)
        with step.autocast():
            sr = self.generator(lr)
        out: dict[str, float] = {}
        if self.cfg.contrastive:
            pos, neg = self.variants(lr, hr, step.step)
            with step.autocast():
                real = self.discriminator(pos.flatten(0, 1))
                fake = self.discriminator(torch.cat([sr.detach(), neg.flatten(0, 1)]))
            # L_D couples every real logit with all fake ones (and back): scored over the whole gathered
            # batch on every rank, as in one process (the gather's backward and DDP's mean cancel).
            loss_d = dual_contrastive_d_loss(self.ctx.gather(real.flatten()), self.ctx.gather(fake.flatten()))
            step.optimize("discriminator", loss_d)
            out["loss_d"] = float(loss_d.detach())
        l1 = F.l1_loss(sr.float(), hr)
        loss, terms = l1, {"l1": l1}
        if self.cfg.contrastive:
            _set_requires_grad(self.discriminator, False)
            try:
                with step.autocast():
                    cl = self.contrastive_loss(sr, pos, neg)
            finally:
                _set_requires_grad(self.discriminator, True)
            loss, terms["contrastive"] = l1 + cl, cl
            out["contrastive"] = float(cl.detach())
        step.optimize("generator", loss, terms=terms)
        out.update(loss=float(loss.detach()), l1=float(l1.detach()))
        return out

    def embed_for_health(self, batch: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor] | None:
        """``(phi(SR), phi(HR))`` of a batch: the contrastive pairs the health metrics look at."""
        if not self.cfg.contrastive:
            return None
        lr, hr = (t.to(self.device) for t in batch)
        emb = self.embedder.embed(torch.cat([self.generator(lr), hr]))
        return emb[: lr.shape[0]], emb[lr.shape[0] :]

    # -- evaluation -----------------------------------------------------------------------------

    def super_resolve(self, lr: Tensor) -> Tensor:
        """Whole-image inference in fp32, 8-bit rounded like a saved PNG."""
        return quantize(upscale(self.generator, lr.to(self.device), self.cfg.scale, self.cfg.eval_tile))

    def evaluate(self, split: str = "val") -> Mapping[str, float]:
        s = self.cfg.scale
        if split == "val":
            psnrs, ssims = [], []
            for lr, hr in self.ctx.progress(self.val, f"validation crops x{s}", total=len(self.val)):
                sr = self.super_resolve(lr[None]).cpu()
                psnrs.append(float(psnr_y(sr, hr[None], s)))
                ssims.append(float(ssim_y(sr, hr[None], s)))
            if not psnrs:
                raise ConfigValueError("no validation images: lower config.data.val_every or raise max_train_images")
            return {"psnr_y": sum(psnrs) / len(psnrs), "ssim_y": sum(ssims) / len(ssims)}
        if split != "test":
            raise ValueError(f"split must be 'val' or 'test', got {split!r}")
        metrics: dict[str, float] = {}
        for name in self.cfg.test_sets:
            psnrs, ssims = [], []
            pairs = eval_pairs(str(self.ctx.data_root), name, s)
            for pair in self.ctx.progress(pairs, f"{name} x{s}", total=len(pairs)):
                lr, hr = _rgb(pair.lr), _rgb(pair.hr)
                sr = _like(self.super_resolve(lr[None]).cpu()[0], pair.hr)
                psnrs.append(float(psnr_y(sr, pair.hr, s)))
                ssims.append(float(ssim_y(sr, pair.hr, s)))
            metrics[f"{name}/psnr_y"] = sum(psnrs) / len(psnrs)
            metrics[f"{name}/ssim_y"] = sum(ssims) / len(ssims)
        return metrics


def _rgb(img: Tensor) -> Tensor:
    """Greyscale ``[1, H, W]`` -> ``[3, H, W]`` (the network is RGB)."""
    return img.expand(3, -1, -1) if img.shape[0] == 1 else img


def _like(sr: Tensor, ref: Tensor) -> Tensor:
    """Back to the reference's channel count: a greyscale image's output is the mean of the RGB output."""
    return quantize(sr.mean(dim=0, keepdim=True)) if ref.shape[0] == 1 else sr
