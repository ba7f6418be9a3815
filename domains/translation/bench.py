"""``contrasuite bench translation``: training iterations per second of CUT (and FastCUT, the GAN alone); --against official: our step against the official CUT code's.

Settings (``--setting``, repeatable):

* ``paper``: 256 x 256 crops, batch 1, ResNet-9-block generator (ngf 64), 70x70 PatchGAN (ndf 64),
  256 patches at layers 0, 4, 8, 12, 16 -- the paper's horse2zebra setting;
* ``emoji``: ``configs/translation/cut_emoji.yaml`` (64 x 64, batch 1, 4 blocks);
* ``emoji_reduced``: ``configs/translation/reduced_cut_emoji.yaml`` (64 x 64, batch 4, ngf 32).

A whole training step runs as in training -- the task's ``train_step`` with the engine's ``Step``
(discriminator, generator, head; bf16 autocast by default) -- on random crops of the setting's size from the
real single-image pair ``translation/single_image_monet_etretat`` under the data root (``--data-root``), after
``--warmup`` steps; iterations/s is ``steps / wall time`` of the timed steps; ``cpu_s_per_it`` is the process CPU
time per step (all threads), a proxy for an idle machine when others share the CPU, and ``load_avg_1min`` says how
busy it was. Output: one JSON line per row (and ``--json FILE``, rewritten after each row). On a shared machine the
wall time includes other processes' load: report it.

``--against official`` (issue 41): our CUT and FastCUT steps against the official code's (github.com/taesungp/
contrastive-unpaired-translation, ``--model cut --CUT_mode CUT | FastCUT``), in one process, on the same threads,
device and crops, alternating rounds (``pipelines/bench/against_peer.py``):

* ours: ``configs/translation/cut_horse2zebra.yaml`` / ``fastcut_horse2zebra.yaml`` (the paper's setting: 256 px
  crops of images resized to 286, batch 1, 9 blocks, ngf/ndf 64, PatchGAN with 3 layers, NCE layers 0, 4, 8, 12,
  16, 256 patches, LSGAN, Adam 2e-4 (0.5, 0.999)) with ``config.data.path`` set to the single-image pair (the
  record keeps every override), its ``train_step`` in the engine's ``Step`` twice over: in fp32 and under bf16
  autocast (a third side of each round; the official code has no autocast, so that column is ours in bf16
  against the official in fp32);
* official: the folder given by ``--official`` (default ``/tmp/official/cut``, made by
  ``docs/results/records/official/cut/run_official_cut.sh export``), imported and set up as its ``train.py``
  does (``TrainOptions`` from a command line made from our config, :func:`official_options`; ``create_model``,
  ``data_dependent_initialize`` on the first batch, ``setup``, ``parallelize``), one step per call as the body
  of ``train.py``'s loop without the data loader (``set_input``, ``optimize_parameters``; on CUDA its two
  ``torch.cuda.synchronize()`` calls), in fp32. Its ``opt.txt`` goes to a temporary folder; nothing is written
  into the export.

Equal work: the same crops of the pair (the first ``--batches`` batches of our task's epochs 0, 1, ..., one an
epoch with one image a side, uint8 for ours, as our pipeline feeds its step, and the same pixels in ``[-1, 1]``
for the official ``set_input``); the parameter
counts of G, D and F on both sides; our weights copied into the official networks, parameter by parameter in
order, each shape checked (the official blur filters are its own constants), after its
``data_dependent_initialize``; for the first step the official code's numpy draws (the flip of FastCUT's
flip equivariance, the patch positions of ``PatchSampleF``) are taken from our step's generator in the order
our step draws them, so its first losses must equal ours within 1e-4 (fp32; the loss of the generator, which
holds GAN and PatchNCE after the discriminator's update). Later steps draw their own. Under bf16 autocast our
first loss is compared to the official fp32 one within 1e-2. On CUDA the first steps run without TF32 (the
check), then ``--warmup`` steps per side (default 2 there, 0 on the CPU) before the timed rounds under the
process's defaults (recorded; the official ``BaseModel`` switches ``cudnn.benchmark`` on for every side).

``--clock cpu`` (the default on the CPU) is this process's CPU time; on CUDA only ``wall`` is allowed, read
after ``torch.cuda.synchronize()``. On the CPU the record also keeps each variant's compute bound (``compute_bound``:
the FLOPs of one more fp32 step of ours over the fp32 matrix-product peak). ``--profile`` keeps each variant's
largest operators of our fp32 step and the official one (``torch.profiler`` over ``--steps`` more steps per side
after the rounds), which ``--report`` renders as its where-the-time-goes table. The record goes to
``docs/results/records/bench_pipelines/translation_official.json`` (``translation_official_cuda.json`` on a
GPU), its section ``translation`` (``translation+cuda``) of ``docs/results/bench_pipelines.md``.

``--to-checkpoint`` adds the time to the checkpoint ours selects: ``configs/translation/reduced_cut_emoji.yaml``
(CUT on emoji, the reduced CPU protocol; ``--override`` applies to it too) trained as a user does, in fp32, against
the official ``train.py`` run to the same step (:class:`OfficialTrainPy`: a fresh model per run with our initial
weights and the config's ``--n_epochs`` / ``--n_epochs_decay``, over our loader's batches of epoch 0, its logging,
checkpoints and learning-rate steps as ``train.py`` does them; it needs ``dominate``, which its ``Visualizer``
imports), whole runs alternating (``pipelines/bench/against_peer.py``, ``to_checkpoint_rounds``).

    docs/results/records/official/cut/run_official_cut.sh export
    contrasuite bench translation --against official --threads 1 --profile
    contrasuite bench translation --against official --threads 1 --profile --to-checkpoint
    contrasuite bench translation --against official --device cuda --steps 50 --warmup 5
    contrasuite bench translation --against official --report [--device cuda]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import json
import os
import platform
import sys
import tempfile
import time
from itertools import chain, count, islice
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch

from contrasuite.domains.translation.data import DataConfig, to_float
from contrasuite.domains.translation.task import TranslationConfig, TranslationTask
from contrasuite.domains.winograd_conv import runs_winograd
from contrasuite.pipelines.api import (
    RECORDS, ConfigError, PeerRun, StepRunner, alternate, ceiling_text, check_text, checkpoint_sentence,
    compute_bound, cpu_task, heading, host_allocator_fields, host_memory_lines, load_config, machine_lines,
    official_flags, our_step, ours_text, outcome, peer_flags, peer_main, peer_record, pick_device, profile_sides,
    profile_table, retaining_sides, run_variant, setup_task, synced_clocks, to_checkpoint_rounds,
)

SETTINGS = {
    # name: (crop, batch, ngf, n_blocks, ndf, num_patches, nce layers)
    "paper": (256, 1, 64, 9, 64, 256, [0, 4, 8, 12, 16]),
    "emoji": (64, 1, 64, 4, 64, 256, [0, 4, 8, 12, 15]),
    "emoji_reduced": (64, 4, 32, 4, 32, 128, [0, 4, 8, 12, 15]),
}
VARIANTS = {"cut": dict(weight=1.0, identity=True, flip_equivariance=False),
            "fastcut": dict(weight=10.0, identity=False, flip_equivariance=True),
            "gan": dict(weight=0.0)}
PROFILE_ROWS = 10
"""A profile table's rows: the operators of largest time on either side, then as many of largest difference."""
PAIR = "translation/single_image_monet_etretat"
"""The real images every mode crops (under the data root): a Monet painting (trainA) and a photo (trainB)."""


def make_task(setting: str, variant: str, data_root: Path, run_dir: Path, device: torch.device,
              precision: str) -> TranslationTask:
    crop, batch, ngf, blocks, ndf, patches, layers = SETTINGS[setting]
    cfg = TranslationConfig(batch_size=batch)
    cfg.data = DataConfig(kind="folders", path=PAIR, crop_size=crop, steps_per_epoch=10_000)
    cfg.generator.ngf, cfg.generator.n_blocks, cfg.discriminator.ndf = ngf, blocks, ndf
    cfg.nce.num_patches, cfg.nce.layers = patches, layers
    for k, v in VARIANTS[variant].items():
        setattr(cfg.nce, k, v)
    return setup_task(TranslationTask(), cfg, device=device, precision=precision, run_dir=run_dir, data_root=data_root)


def measure(task: TranslationTask, device: torch.device, precision: str, warmup: int, steps: int) -> tuple[float, float]:
    """``(iterations per wall second, process CPU seconds per iteration)``."""
    train_step = StepRunner(task, device, precision)
    batches = task.batches(0)

    def one(i: int) -> None:
        train_step(next(batches), 0, i)

    for i in range(warmup):
        one(i)
    if device.type == "cuda":
        torch.cuda.synchronize()
    start, cpu = time.perf_counter(), time.process_time()
    for i in range(steps):
        one(warmup + i)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return steps / (time.perf_counter() - start), (time.process_time() - cpu) / steps


def settings_rows(args: argparse.Namespace) -> int:
    """The ``--setting`` mode (module docstring): one JSON row per setting and variant."""
    device = pick_device(args.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for setting in args.setting or list(SETTINGS):
            for variant in args.variant or ["cut"]:
                torch.manual_seed(0)
                task = make_task(setting, variant, Path(args.data_root), Path(tmp), device, args.precision)
                its, cpu_s = measure(task, device, args.precision, args.warmup, args.steps)
                crop, batch = SETTINGS[setting][:2]
                row = {"setting": setting, "variant": variant, "image": crop, "batch": batch, "precision": args.precision,
                       "device": name, "images": f"real ({PAIR})", "it_per_s": round(its, 3),
                       "images_per_s": round(its * batch, 3), "cpu_s_per_it": round(cpu_s, 3),
                       "load_avg_1min": round(os.getloadavg()[0], 1), "steps": args.steps, "torch": torch.__version__}
                rows.append(row)
                print(json.dumps(row), flush=True)
                if args.json:  # after every row, so a long benchmark keeps what it measured
                    args.json.parent.mkdir(parents=True, exist_ok=True)
                    args.json.write_text(json.dumps(rows, indent=2))
    return 0


# -- --against official -------------------------------------------------------------------------------------

OFFICIAL = Path("/tmp/official/cut")
"""Where ``--official`` looks by default: an export of the official repository with the project's patch
(``docs/results/records/official/cut/run_official_cut.sh export`` makes it)."""
OFFICIAL_PACKAGES = ("models", "options", "data", "util")
"""The official code's top-level packages (imported from the export, then taken out of ``sys.modules``)."""
CONFIGS = {"cut": ("cut_horse2zebra", "CUT"), "fastcut": ("fastcut_horse2zebra", "FastCUT")}
"""``--variant``: our shipped config and the official ``--CUT_mode``."""
TOLERANCE = {"fp32": 1e-4, "bf16": 1e-2}
"""Our precisions, and the first-step check's relative tolerance for each (the official side is fp32)."""
TO_CHECKPOINT = "translation/reduced_cut_emoji"
"""``--to-checkpoint``: the config trained to the checkpoint it selects (CUT on emoji, the reduced CPU protocol)."""
PEER_EPOCH_END = ("its `train.py` runs them: every `--save_epoch_freq` (5) epochs `save_networks` of `latest` and "
                  "the epoch (G, D and F each), every epoch `update_learning_rate()`; no validation (its loop also "
                  "appends the losses to `loss_log.txt` every `--print_freq` samples)")
"""What the official run does at an epoch's end (:meth:`OfficialTrainPy.epoch_end`)."""


def official_record(device: torch.device) -> Path:
    return RECORDS / ("_".join(["translation_official", *run_variant(SimpleNamespace(device=device.type))]) + ".json")


def unmatched(cfg: TranslationConfig) -> list[str]:
    """Our config values the official options cannot express (``name=value`` each); empty when it maps."""
    terms = cfg.objective.terms
    infonce = (len(terms) == 1 and terms[0].get("name") == "infonce" and terms[0].get("weight", 1.0) == 1.0
               and set(terms[0]) <= {"name", "weight", "temperature"})
    checks = [("config.generator.n_blocks", cfg.generator.n_blocks, cfg.generator.n_blocks in (4, 6, 9)),
              ("config.generator.antialias", cfg.generator.antialias, cfg.generator.antialias),
              ("config.discriminator.antialias", cfg.discriminator.antialias, cfg.discriminator.antialias),
              ("config.generator.residual", cfg.generator.residual, not cfg.generator.residual),
              ("config.discriminator.augment", cfg.discriminator.augment, not cfg.discriminator.augment),
              ("config.nce.weight", cfg.nce.weight, cfg.nce.weight > 0),
              ("config.nce.use_mlp", cfg.nce.use_mlp, cfg.nce.use_mlp),
              ("config.nce.patch_norm", cfg.nce.patch_norm, cfg.nce.patch_norm == "official"),
              ("config.objective.terms", terms, infonce),
              ("config.lambda_identity", cfg.lambda_identity, cfg.lambda_identity == 0),
              ("config.lambda_paired", cfg.lambda_paired, cfg.lambda_paired == 0),
              ("config.ema", cfg.ema, cfg.ema == 0)]
    return [f"{name}={value}" for name, value, ok in checks if not ok]


def our_overrides(args: argparse.Namespace) -> list[str]:
    """Our config's overrides: the data path to the pair, then ``--override``."""
    return [f"config.data.path={PAIR}", *args.override]


def official_options(task: TranslationTask, mode: str, device: torch.device, checkpoints: Path) -> list[str]:
    """The official ``train.py`` command line for our task's config (what :func:`unmatched` allows): networks,
    NCE, losses, optimizer and batch size from the config; ``--gpu_ids`` from ``device``."""
    cfg = task.cfg
    n_layers = cfg.discriminator.n_layers
    netd = ["--netD", "basic"] if n_layers == 3 else ["--netD", "n_layers", "--n_layers_D", str(n_layers)]
    return ["--dataroot", "unused", "--name", "bench", "--checkpoints_dir", str(checkpoints), "--model", "cut",
            "--CUT_mode", mode, "--gpu_ids", str(device.index or 0) if device.type == "cuda" else "-1",
            "--netG", f"resnet_{cfg.generator.n_blocks}blocks", "--ngf", str(cfg.generator.ngf),
            "--ndf", str(cfg.discriminator.ndf), *netd, "--nce_layers", ",".join(map(str, task.layers)),
            "--num_patches", str(cfg.nce.num_patches), "--netF_nc", str(cfg.nce.head_dim),
            "--nce_T", str(cfg.objective.terms[0].get("temperature", 0.07)), "--lambda_GAN", str(cfg.lambda_gan),
            "--lambda_NCE", str(cfg.nce.weight), "--nce_idt", str(cfg.nce.identity),
            "--flip_equivariance", str(cfg.nce.flip_equivariance),
            "--nce_includes_all_negatives_from_minibatch", str(cfg.nce.negatives == "batch"),
            "--lr", str(cfg.optim.lr), "--beta1", str(cfg.optim.betas[0]), "--beta2", str(cfg.optim.betas[1]),
            "--batch_size", str(cfg.batch_size), "--crop_size", str(cfg.data.crop_size),
            "--display_id", "0", "--no_html"]


@contextlib.contextmanager
def official_train_py(folder: Path, argv: list[str]) -> Iterator[None]:
    """As if ``python train.py ARGV`` ran in the export: its packages importable (``sys.path``), ``sys.argv`` (the
    option parsers read it), no bytecode written into it, its prints silenced; afterwards ``sys.path``,
    ``sys.argv`` and ``sys.modules`` as before (the official modules live on in the objects made from them)."""
    official = lambda name: name.split(".")[0] in OFFICIAL_PACKAGES  # noqa: E731
    saved = {name: sys.modules.pop(name) for name in list(sys.modules) if official(name)}
    bytecode, sys.dont_write_bytecode = sys.dont_write_bytecode, True
    old_argv, sys.argv = sys.argv, [str(folder / "train.py"), *argv]
    sys.path.insert(0, str(folder))
    try:
        with open(os.devnull, "w") as devnull, contextlib.redirect_stdout(devnull):
            yield
    finally:
        sys.path.remove(str(folder))
        sys.argv, sys.dont_write_bytecode = old_argv, bytecode
        for name in [n for n in sys.modules if official(n)]:
            del sys.modules[name]
        sys.modules.update(saved)


class NumpyWithOurDraws:
    """Stands for ``numpy`` in the official modules for one step: ``np.random.random()`` and
    ``np.random.permutation(n)`` come from ``draws`` (``torch.rand``, ``torch.randperm``), as our step draws its
    flip and patch positions; everything else is numpy."""

    def __init__(self, draws: torch.Generator) -> None:
        self.random = SimpleNamespace(random=lambda: float(torch.rand((), generator=draws)),
                                      permutation=lambda n: torch.randperm(n, generator=draws).numpy())

    def __getattr__(self, name: str) -> Any:
        return getattr(np, name)


def copy_weights(ours: torch.nn.Module, theirs: torch.nn.Module) -> None:
    """Our parameters into theirs, in order, each shape checked."""
    with torch.no_grad():
        for a, b in zip(ours.parameters(), theirs.parameters(), strict=True):
            if a.shape != b.shape:
                raise ValueError(f"official parameter of shape {tuple(b.shape)} where ours is {tuple(a.shape)}")
            b.copy_(a)


def official_cut(folder: Path, task: TranslationTask, mode: str, first: dict[str, torch.Tensor], device: torch.device,
                 checkpoints: Path, more: Sequence[str] = ()) -> tuple[Any, list[Any], list[str]]:
    """The official model set up as ``train.py`` does (module docstring), with our task's weights (options
    :func:`official_options` and ``more``); also the modules whose ``np`` the first step replaces, and the command
    line."""
    argv = [*official_options(task, mode, device, checkpoints), *more]
    with official_train_py(folder, argv):
        options = importlib.import_module("options.train_options")
        models = importlib.import_module("models")
        drawing = [importlib.import_module("models.cut_model"), importlib.import_module("models.networks")]
        opt = options.TrainOptions().parse()
        np.random.seed(0)  # its numpy draws (flips, patch positions) as the patched train.py --seed 0 seeds them
        model = models.create_model(opt)
        model.data_dependent_initialize(first)
        for ours, theirs in ((task.generator, model.netG), (task.discriminator, model.netD), (task.head, model.netF)):
            copy_weights(ours, theirs)
        model.setup(opt)
        model.parallelize()
    return model, drawing, argv


class OfficialTrainPy:
    """The official ``train.py`` as a run of it goes (CUT), for ``--to-checkpoint``'s
    :class:`~contrasuite.pipelines.bench.against_peer.PeerRun`: :meth:`new_run` sets a run up in a folder (the
    model as :func:`official_cut` makes it, with our task's weights and the epoch schedule of our config
    (:func:`official_schedule`), its checkpoints and ``loss_log.txt`` there, its ``Visualizer``) and returns its
    epoch end; :meth:`step` is the loop's body with its bookkeeping, counted in samples as ``train.py`` counts
    (every ``--print_freq`` the losses printed and appended to ``loss_log.txt``; every ``--display_freq``
    ``compute_visuals`` and ``display_current_results``, which shows nothing with ``--display_id 0 --no_html``;
    every ``--save_latest_freq`` ``save_networks('latest')``). Its prints go nowhere."""

    def __init__(self, folder: Path, task: TranslationTask, first: dict[str, torch.Tensor],
                 device: torch.device) -> None:
        self.folder, self.task, self.first, self.device = folder, task, first, device
        self.devnull = open(os.devnull, "w")

    def new_run(self, run_folder: Path) -> Callable[[Path], Path | None]:
        """A fresh run under ``run_folder`` (epoch 1, no samples yet); returns its epoch end."""
        self.model, _, argv = official_cut(self.folder, self.task, "CUT", self.first, self.device, run_folder,
                                           official_schedule(self.task.cfg))
        with official_train_py(self.folder, argv):
            self.visualizer = importlib.import_module("util.visualizer").Visualizer(self.model.opt)
        self.epoch, self.samples, self.epoch_samples = 1, 0, 0
        return self.epoch_end

    def step(self, batch: dict[str, Any]) -> None:
        model, opt = self.model, self.model.opt
        model.set_input(batch)
        model.optimize_parameters()
        n = batch["A"].size(0)
        self.samples, self.epoch_samples = self.samples + n, self.epoch_samples + n
        with contextlib.redirect_stdout(self.devnull):
            if self.samples % opt.display_freq == 0:
                model.compute_visuals()
                self.visualizer.display_current_results(model.get_current_visuals(), self.epoch,
                                                        self.samples % opt.update_html_freq == 0)
            if self.samples % opt.print_freq == 0:
                self.visualizer.print_current_losses(self.epoch, self.epoch_samples, model.get_current_losses(), 0, 0)
            if self.samples % opt.save_latest_freq == 0:
                model.save_networks("latest")

    def epoch_end(self, path: Path) -> Path | None:
        """``train.py``'s epoch end: every ``--save_epoch_freq`` epochs ``save_networks`` of ``latest`` and the
        epoch, then ``update_learning_rate()``; returns the checkpoint folder when it saved (``path`` is not used)."""
        model, opt = self.model, self.model.opt
        saves = self.epoch % opt.save_epoch_freq == 0
        with contextlib.redirect_stdout(self.devnull):
            if saves:
                model.save_networks("latest")
                model.save_networks(self.epoch)
            model.update_learning_rate()
        self.epoch, self.epoch_samples = self.epoch + 1, 0
        return Path(opt.checkpoints_dir) / opt.name if saves else None


def official_schedule(cfg: TranslationConfig) -> list[str]:
    """``--n_epochs`` and ``--n_epochs_decay`` of our config's schedule (linear, in epochs: CUT's)."""
    s = cfg.optim.schedule
    if s.name != "linear" or s.start.steps or s.end.steps:
        raise SystemExit(f"bench translation --to-checkpoint: config.optim.schedule {s.name} in steps has no official "
                         "--n_epochs / --n_epochs_decay (a linear schedule in epochs has)")
    return ["--n_epochs", f"{s.start.epochs:g}", "--n_epochs_decay", f"{s.end.epochs - s.start.epochs:g}"]


def to_checkpoint(args: argparse.Namespace, device: torch.device, folder: Path) -> dict[str, Any]:
    """Ours trained as a user does (:data:`TO_CHECKPOINT` with ``--override``, fp32) against the official run
    (:class:`OfficialTrainPy`) to the checkpoint ours selects, over our loader's batches of epoch 0
    (:func:`~contrasuite.pipelines.bench.against_peer.to_checkpoint_rounds`)."""
    task, loaded = cpu_task(TO_CHECKPOINT, args.override, args.data_root, folder / "setup", device)
    problems = unmatched(task.cfg)
    if problems:
        raise SystemExit("bench translation --to-checkpoint: the official options cannot express "
                         + ", ".join(problems))
    batches = [{"A": to_float(a), "B": to_float(b), "A_paths": ["A"], "B_paths": ["B"]} for a, b in task.batches(0)]
    official = OfficialTrainPy(args.official, task, batches[0], device)
    peer = PeerRun(official.step, batches, len(batches), official.new_run)
    rounds = to_checkpoint_rounds(TO_CHECKPOINT, args.override, args.data_root, peer, args.repeats, folder, device,
                                  "fp32", retaining_sides(loaded, device))
    return {"to_checkpoint": rounds, "peer_epoch_end_what": PEER_EPOCH_END}


def sizes(modules: dict[str, torch.nn.Module]) -> dict[str, int]:
    return {name: sum(p.numel() for p in m.parameters()) for name, m in modules.items()}


@contextlib.contextmanager
def exact_fp32() -> Iterator[None]:
    """No TF32 in cuDNN's convolutions (on CUDA; the matmuls have none by default), for the equal-work check."""
    cudnn, before = torch.backends.cudnn, torch.backends.cudnn.allow_tf32
    cudnn.allow_tf32 = False
    try:
        yield
    finally:
        cudnn.allow_tf32 = before


def compare_variant(args: argparse.Namespace, variant: str, device: torch.device, tmp: Path) -> dict[str, Any]:
    """One variant's comparison (module docstring): its part of the record."""
    config, mode = CONFIGS[variant]
    overrides = our_overrides(args)
    made = {p: cpu_task(f"translation/{config}", overrides, args.data_root, tmp / p, device, p) for p in TOLERANCE}
    tasks = {p: task for p, (task, _) in made.items()}
    task, retaining = tasks["fp32"], retaining_sides(made["fp32"][1], device, ("ours", "bf16"))
    crops = list(islice(chain.from_iterable(task.batches(epoch) for epoch in count()), args.batches))
    batches = [(xy, {"A": to_float(xy[0]), "B": to_float(xy[1]), "A_paths": ["A"], "B_paths": ["B"]}) for xy in crops]
    model, drawing, argv = official_cut(args.official, task, mode, batches[0][1], device, tmp / "official")
    ours = {p: our_step(t, device, p) for p, t in tasks.items()}

    def official(batch: tuple[Any, dict]) -> None:  # train.py's loop body, without its data loader and prints
        if device.type == "cuda":
            torch.cuda.synchronize()
        model.set_input(batch[1])
        model.optimize_parameters()
        if device.type == "cuda":
            torch.cuda.synchronize()

    with exact_fp32():
        first = {p: step(batches[0][0]) for p, step in ours.items()}
        ours_draws = NumpyWithOurDraws(task.step_draws(0))  # one stream for both modules, as ours is one
        for module in drawing:
            module.np = ours_draws
        try:
            official(batches[0])
        finally:
            for module in drawing:
                module.np = np
        first["official"] = float(model.loss_G.detach())
    sides = {"ours": lambda b: ours["fp32"](b[0]), "bf16": lambda b: ours["bf16"](b[0]), "peer": official}
    for _ in range(args.warmup):
        for side in sides.values():
            side(batches[0])
    rounds = alternate(sides, batches, args.repeats, args.steps, synced_clocks(device), retaining)
    compute = {"compute": compute_bound(sides["ours"], batches[0])} if device.type == "cpu" else {}  # fp32's peak
    profile = ({"profile": profile_sides({"ours": sides["ours"], "peer": official}, batches, args.steps, device,
                                         retaining)} if args.profile else {})
    c = args.clock
    bf16 = outcome(first["bf16"], first["official"], [{f"ours_{c}_s": r[f"bf16_{c}_s"], f"peer_{c}_s": r[f"peer_{c}_s"]}
                                                      for r in rounds], c, tolerance=TOLERANCE["bf16"])
    for row, against_bf16 in zip(rounds, bf16.pop("rounds")):
        row["ratio_bf16"] = against_bf16["ratio"]
    net = lambda m: m.module if isinstance(m, torch.nn.DataParallel) else m  # noqa: E731
    winograd = runs_winograd(task.generator(to_float(crops[0][0]).to(device)))  # our fp32 generator, as in the step
    return {"variant": variant, "mode": mode, "config": config, "overrides": overrides,
            "ours_conv3x3": "winograd" if winograd else "pytorch",
            "official_options": " ".join(argv).replace(str(tmp / "official"), "TMP"),
            "parameters": {"ours": sizes({"G": task.generator, "D": task.discriminator, "F": task.head}),
                           "official": sizes({"G": net(model.netG), "D": net(model.netD), "F": net(model.netF)})},
            "crop": int(crops[0][0].shape[-1]), "batch": int(crops[0][0].shape[0]), "distinct_batches": len(crops),
            **host_allocator_fields(retaining),
            **outcome(first["fp32"], first["official"], rounds, args.clock, tolerance=TOLERANCE["fp32"]), "bf16": bf16,
            **compute, **profile}


def against_official(args: argparse.Namespace, argv: Sequence[str]) -> dict[str, Any]:
    """Our CUT / FastCUT steps against the official ones (module docstring): the record."""
    device = torch.device(args.device)
    commit = (args.official / ".patched").read_text().strip()[:7] or "(commit not recorded in the export)"
    with tempfile.TemporaryDirectory() as tmp:
        variants = [compare_variant(args, v, device, Path(tmp) / v) for v in args.variant]
        as_user = to_checkpoint(args, device, Path(tmp) / "to_checkpoint") if args.to_checkpoint else {}
    cudnn = torch.backends.cudnn
    flags = {"cudnn_benchmark": cudnn.benchmark, "cudnn_allow_tf32": cudnn.allow_tf32,
             "matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32} if device.type == "cuda" else {}
    fields = {"ours": ours_text("translation/cut_horse2zebra and fastcut_horse2zebra", detail=" (fp32, and bf16 autocast)"),
              "peer": (f"official CUT (github.com/taesungp/contrastive-unpaired-translation {commit} with "
                       "docs/results/records/official/cut/cut_cpu.patch), train.py's loop body: set_input, "
                       "optimize_parameters (fp32)"),
              "images": PAIR, "warmup_steps": args.warmup, "variants": variants, **flags, **as_user}
    args.precision = "fp32"  # the official side's, and ours in the first column; our bf16 column says so
    record = peer_record("translation", args, argv, {}, [], fields)
    record["against"] = "official"
    return record


WINOGRAD_WORDS = (" (ours: all but its 3x3 convolutions of 128 or more channels in and out, the residual blocks', the "
                  "second down-sampling and the first up-sampling one, which run as Winograd F(2x2, 3x3) matrix "
                  "products in fp32, `domains/winograd_conv.py`: 16 products per 2x2 output tile instead of 36 "
                  "multiplies, `aten::mm` and `aten::addmm` with the tiles' strided `add`, `add_` and `mul`; under bf16 "
                  "autocast they are oneDNN's)")
"""The profile's words for a record whose generator's wide 3x3 convolutions ran on the Winograd path
(``ours_conv3x3``)."""


def winograd_blocks(record: dict[str, Any]) -> bool:
    """Whether our fp32 generator's wide 3x3 convolutions were Winograd products in every variant of the record."""
    return all(v.get("ours_conv3x3") == "winograd" for v in record["variants"])


def cpu_where(record: dict[str, Any]) -> str:
    """What the operators of the two steps on the CPU are and what the steps differ by (the tables give their
    times)."""
    return ("Both sides spend most of the step in convolutions, forward and backward (`mkldnn_convolution`, "
            f"`convolution_backward`){WINOGRAD_WORDS if winograd_blocks(record) else ''}, then in instance norm, "
            "reflection padding and the elementwise ops; our bilinear up-sampling and the official fixed-filter "
            "transposed convolution cost little either way. The steps differ in how PatchNCE gets its keys: the "
            "official step encodes its input a second time (`netG(src, nce_layers, encode_only=True)`, with an autograd "
            "graph, though the keys are detached), ours takes them from the translation's own pass when the input is "
            "not flipped (every CUT step, about half of FastCUT's) and computes the rest, and the keys' head "
            "projections, without a graph; the same keys either way (`tests/domains/translation/test_task.py`). The "
            "official step spends more in tensor copies and fills (`copy_`, `fill_`); ours adds the engine's per-step "
            "gradient and weight norms (`_foreach_norm`).")


def render_official(record: dict[str, Any]) -> str:
    """The page section of an ``--against official`` record (markdown)."""
    clock, cuda = record["clock"], record["device"].startswith("cuda")
    where = f"{record['device']} ({record['gpu']})" if cuda else "CPU"
    crop = record["variants"][0]["crop"]
    lines = [heading(f"translation: our CUT and FastCUT steps vs the official CUT code ({crop} px, {where})", record), "",
             f"- ours: {record['ours']}", f"- official: {record['peer']}"]
    for v in record["variants"]:
        ours, theirs = v["parameters"]["ours"], v["parameters"]["official"]
        params = ", ".join(f"{k} {ours[k]:,} ({theirs[k]:,})" for k in ours)
        lines.append(
            f"- same work, {v['mode']}: config `{v['config']}` with {', '.join(f'`{o}`' for o in v['overrides'])}; "
            f"official options `{v['official_options']}`; {v['distinct_batches']} distinct batch(es) of {v['batch']} real "
            f"{v['crop']} x {v['crop']} crop(s) of `{record['images']}` cycled by both; parameters ours (official) "
            f"{params}; our weights copied into the official networks and, for the first step, its numpy draws taken "
            f"from our step's generator: first generator loss, fp32 {check_text(v['loss_check'])}; ours in bf16 "
            f"autocast against the official fp32 {check_text(v['bf16']['loss_check'])}")
    lines += [line for v in record["variants"] for line in host_memory_lines(v, f" ({v['mode']})")]
    lines += machine_lines(record)
    if cuda:
        lines.append(f"- CUDA flags during the rounds: cudnn.benchmark {record['cudnn_benchmark']}, cudnn.allow_tf32 "
                     f"{record['cudnn_allow_tf32']}, matmul.allow_tf32 {record['matmul_allow_tf32']} (the first, "
                     "checked step of each side without TF32)")
    unit, scale = ("ms", 1000) if cuda else ("s", 1)
    lines += ["", f"| mode | round | ours fp32 {unit}/step | ours bf16 {unit}/step | official fp32 {unit}/step | "
                  "official / ours fp32 | official / ours bf16 |", "|---|---|---|---|---|---|---|"]
    for v in record["variants"]:
        lines += [f"| {v['mode']} | {i + 1} | " + " | ".join(f"{scale * r[f'{side}_{clock}_s']:.2f}" for side in
                                                          ("ours", "bf16", "peer"))
                  + f" | {r['ratio']:.2f} | {r['ratio_bf16']:.2f} |" for i, r in enumerate(v["rounds"])]
    lines.append(f"\n({clock} clock; {record['repeats']} alternating rounds of {record['steps_per_round']} step(s) per "
                 f"side after each side's first, checked step and {record['warmup_steps']} warm-up step(s).) Ratio, "
                 "official time / ours, above 1: ours faster:\n")
    for v in record["variants"]:
        for name, part in (("ours fp32", v), ("ours bf16 autocast", v["bf16"])):
            lines.append(f"- {v['mode']}, official fp32 / {name}: **{part['ratio_median']:.2f}** median, "
                         f"{part['ratio_min']:.2f} to {part['ratio_max']:.2f}")
    profiled = [v for v in record["variants"] if "profile" in v]
    if profiled:
        lines.append(f"\nWhere the time goes (`torch.profiler` over {record['steps_per_round']} more step(s) per side "
                     f"after the rounds, fp32: CPU self time of the {PROFILE_ROWS} largest operators, then the "
                     f"{PROFILE_ROWS} others of largest difference)." + ("" if cuda else " " + cpu_where(record)))
        lines += [f"\n{v['mode']}:\n\n{profile_table(v['profile'], PROFILE_ROWS)}" for v in profiled]
    lines += [f"\n{v['mode']}, fp32: {ceiling_text({'clock': clock, **v}).strip()}"
              for v in record["variants"] if "compute" in v]
    lines += [checkpoint_sentence(record)] if "to_checkpoint" in record else []
    return "\n".join(lines)


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="contrasuite bench translation", description=__doc__.splitlines()[0])
    parser.add_argument("--setting", action="append", choices=sorted(SETTINGS), help="default: all")
    parser.add_argument("--variant", action="append", choices=sorted(VARIANTS),
                        help="default: cut (with --against: cut and fastcut)")
    parser.add_argument("--steps", type=int, default=None,
                        help="timed steps (default 5; with --against per side and round, default 1)")
    parser.add_argument("--warmup", type=int, default=None,
                        help="untimed steps first (default 2; with --against per side after the checked first step, "
                             "default 0 on the CPU and 2 on CUDA)")
    parser.add_argument("--precision", choices=("bf16", "fp16", "fp32"), default="bf16",
                        help="the --setting mode's (--against measures fp32 and bf16)")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch.set_num_threads (0: leave as is; default 0, 1 with --against)")
    parser.add_argument("--data-root", default=os.environ.get("CONTRASUITE_DATA"), help=f"holds {PAIR}/")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows to this file")
    official = official_flags(parser, "our CUT and FastCUT steps against the official code's", OFFICIAL,
                              "the official export's folder")
    peer_flags(official, None, {}, batches=2, profile=True, to_checkpoint=True)
    parser.set_defaults(clock=None)
    return parser


def check_against(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """``--against official``'s defaults (variants, clock, record) set in ``args``; bad input exits 2."""
    fail = lambda why: parser.exit(2, f"contrasuite bench translation: {why}\n")  # noqa: E731
    args.variant = args.variant or list(CONFIGS)
    args.clock = args.clock or ("wall" if args.device == "cuda" else "cpu")
    args.output = args.output or official_record(torch.device(args.device))
    if args.device == "cuda" and args.clock != "wall":
        fail("--clock cpu on CUDA times only the host; use wall")
    if "gan" in args.variant:
        fail("--against official compares cut and fastcut (no --variant gan)")
    if args.report:
        return
    if not (args.official / ".patched").is_file():
        fail(f"no official CUT export at {args.official} (--official; make it with "
             "docs/results/records/official/cut/run_official_cut.sh export)")
    if args.to_checkpoint and importlib.util.find_spec("dominate") is None:
        fail("--to-checkpoint runs the official train.py's Visualizer, which imports dominate (pip install dominate)")
    for variant in args.variant:
        try:
            problems = unmatched(load_config(f"translation/{CONFIGS[variant][0]}", our_overrides(args)).config)
        except ConfigError as error:
            fail(str(error))
        if problems:
            fail(f"the official code has no equal of {', '.join(problems)}")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = make_parser()
    args = parser.parse_args(argv)
    against = bool(args.against or args.report)
    if args.device == "cuda" and not args.report and not torch.cuda.is_available():
        parser.exit(2, "contrasuite bench translation: --device cuda but torch.cuda.is_available() is False\n")
    args.device = "cuda" if args.device == "cuda" or (args.device == "auto" and not args.report
                                                      and torch.cuda.is_available()) else "cpu"
    args.threads = (1 if against else 0) if args.threads is None else args.threads
    args.steps = args.steps or (1 if against else 5)
    if args.warmup is None:
        args.warmup = 2 if not against or args.device == "cuda" else 0
    if not args.report and not (Path(args.data_root or ".") / PAIR / "trainA").is_dir():
        parser.exit(2, f"contrasuite bench translation: no {PAIR}/trainA under the data root {args.data_root} "
                       "(--data-root / CONTRASUITE_DATA)\n")
    if not against:
        if args.threads:
            torch.set_num_threads(args.threads)
        return settings_rows(args)
    check_against(parser, args)
    return peer_main(args, argv, against_official, render_official)


if __name__ == "__main__":
    raise SystemExit(main())
