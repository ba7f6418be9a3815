"""The official PCL-SISR training step (github.com/Aitical/PCL-SISR, on EDSR-PyTorch), set up for our task's setting.

For ``contrasuite bench super_resolution --against official``. The official code lives outside this repository,
exported by ``docs/results/records/official/pcl_sisr/export_pcl_sisr.sh`` (a pinned commit, one patch adding the
``template.py`` its ``option.py`` imports, and the libraries it needs in ``<export>/site``). :func:`official_trainer`
imports its modules as ``main.py`` does (``option.args`` parsed from the flags of :func:`official_flags`,
``torch.manual_seed(args.seed)``, ``model.Model``, ``loss.Loss``, ``trainer.Trainer``) with a checkpoint that
keeps no log and writes no folder (:class:`QuietCheckpoint`) and a loader of the batches set (:class:`Epoch`);
:func:`official_step` then runs ``Trainer.train()`` once per batch, i.e. its own loop body on a one-batch epoch
(zero_grad, the EDSR forward, the positives and negatives of ``--use_aug``, its ``Loss`` with the discriminator
update inside, backward, ``--gclip`` clipping, Adam) plus its per-epoch bookkeeping (a log row, a log line that
goes nowhere, the scheduler's epoch step: microseconds against a step of seconds).

For the time to a checkpoint, the official run as ``main.py`` runs it (:class:`MainPy`): a trainer with its real
``utility.checkpoint`` and our validation crops (:class:`ValidationCrops`), ``Trainer.train()`` over each whole
epoch and ``Trainer.test()`` after it.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import warnings
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import torch
from torch import Tensor, nn

COMMIT = "ba4cbb770f921b4d859547c9edec27c8ec89cb65"
"""The exported commit of Aitical/PCL-SISR (2024-05-17)."""
MODULES = ("option", "template", "utility", "model", "loss", "data", "trainer")
"""The official top-level modules (and packages) the bench imports, removed from ``sys.modules`` after."""


def official_flags(cfg: Any, mode: str, grad_clip_value: float | None, cuda: bool) -> list[str]:
    """The official ``main.py`` flags for our ``SRConfig`` ``cfg``: EDSR of the config's size on ``[0, 1]`` images
    (``--rgb_range 1``, so our weights map one to one), its HR patch, batch, learning rate; ``mode`` ``pcl`` adds the
    released PCL-SR recipe (the flags of its ``scripts/``: ``CL-patchD`` with InfoNCE on the wavelet discriminator's
    block ``embed_layer`` before its activation, no adversarial term, D trained with the dual contrastive loss on
    the positives and negatives, ``n_blur`` Gaussian-blur negatives and as many sharpened positives, ``--gclip``);
    ``--cpu`` unless ``cuda``."""
    flags = ["--model", "EDSR", "--scale", str(cfg.scale), "--patch_size", str(cfg.data.patch_size * cfg.scale),
             "--batch_size", str(cfg.batch_size), "--n_resblocks", str(cfg.model.n_resblocks),
             "--n_feats", str(cfg.model.n_feats), "--res_scale", f"{cfg.model.res_scale:g}", "--rgb_range", "1",
             "--lr", f"{cfg.optim.lr:g}", "--loss", "1*L1"]
    if mode == "pcl":
        f, weight = cfg.frequency, float(cfg.objective.terms[0].get("weight", 1.0))
        flags[-1] = f"1*L1+{weight:g}*CL-patchD"
        flags += ["--cl_loss_type", "InfoNCE", "--no_ad_loss", "--before_relu", "--cl_layer", str(cfg.discriminator.embed_layer),
                  "--use_wavelet", "--contras_D_train", "--use_aug", "--random_neg", "--only_blur", "--gpu_blur",
                  "--mcl_neg", str(f.n_blur), "--sharp_hr", "--gpu_sharp", "--sharp_value", f"{f.sharp_min:g}",
                  "--sharp_range", f"{f.sharp_max - f.sharp_min:g}", *(["--gclip", f"{grad_clip_value:g}"] if grad_clip_value else [])]
    return flags + ([] if cuda else ["--cpu"])


def pcl_mismatches(cfg: Any) -> list[str]:
    """What in our ``SRConfig`` the official PCL step cannot do (empty: it computes the same loss terms)."""
    f, terms = cfg.frequency, [dict(t) for t in cfg.objective.terms]
    wanted = {"contrastive": (cfg.contrastive, True), "contrastive_gradient": (cfg.contrastive_gradient, "official"),
              "in_batch_negatives": (cfg.in_batch_negatives, False), "embed_passes": (cfg.embed_passes, "per_group"),
              "discriminator.channel_divisor": (cfg.discriminator.channel_divisor, 1),
              "frequency.n_sharp": (f.n_sharp, f.n_blur), "frequency.n_lowpass": (f.n_lowpass, 0),
              "frequency.n_mix": (f.n_mix, 0), "frequency.use_upsampled_lr": (f.use_upsampled_lr, True),
              "frequency.blur_sigma_min": (f.blur_sigma_min, 0.1), "frequency.blur_sigma_max": (f.blur_sigma_max, 2.0),
              "objective.terms": ([t["name"] for t in terms], ["infonce"]),
              "objective temperature": (float(terms[0].get("temperature", 1.0)) if terms else None, 1.0)}
    return [f"{key}={have} (official: {want})" for key, (have, want) in wanted.items() if have != want]


class Epoch:
    """The official ``Trainer``'s data: ``loader_train``, an epoch of the batches last set as ``Trainer.train``
    reads it (``dataset.set_scale``, ``len`` in batches, items ``(lr, hr, filename)``), and ``loader_test``, the
    validation sets ``Trainer.test`` reads (none unless given)."""

    def __init__(self, loader_test: Sequence[Any] = ()) -> None:
        self.batches: list[tuple[Tensor, Tensor]] = []
        self.loader_train = self.dataset = self
        self.loader_test = list(loader_test)

    def set_scale(self, idx_scale: int) -> None:
        """One scale only."""

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor, str]]:
        for lr, hr in self.batches:
            yield lr, hr, ""


class ValidationCrops:
    """Our validation crops as one of the official ``Trainer.test``'s sets (``d``): ``d.dataset`` with ``name``,
    ``benchmark`` true (so its PSNR and SSIM are on Y with a ``scale``-pixel border, as ours) and ``set_scale``,
    ``len(d)`` and items ``(lr, hr, [filename])`` of one image each, as its benchmark loaders hand them."""

    def __init__(self, pairs: Sequence[tuple[Tensor, Tensor]], name: str = "val") -> None:
        self.pairs, self.name, self.benchmark = list(pairs), name, True
        self.dataset = self

    def set_scale(self, idx_scale: int) -> None:
        """One scale only."""

    def __len__(self) -> int:
        return len(self.pairs)

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor, list[str]]]:
        for i, (lr, hr) in enumerate(self.pairs):
            yield lr[None], hr[None], [str(i)]


class QuietCheckpoint:
    """What the official ``Model``, ``Loss`` and ``Trainer`` read of ``utility.checkpoint`` for training from
    scratch: a log file (``/dev/null``), ``write_log`` (dropped) and ``get_path`` (only read to resume)."""

    def __init__(self, log_file: Any) -> None:
        self.log_file = log_file

    def write_log(self, log: str, refresh: bool = False) -> None:
        """The official log lines go nowhere."""

    def get_path(self, *subdir: str) -> str:
        return os.devnull


@contextlib.contextmanager
def official_imports(folder: Path, argv: list[str]) -> Iterator[None]:
    """The export's ``src`` first and its ``site`` last on ``sys.path``, ``sys.argv`` = ``argv`` (``option.py``
    parses it on import), no bytecode written into the export; everything restored after, the official modules
    dropped from ``sys.modules`` (their objects keep them alive)."""
    src, site = str(folder / "src"), str(folder / "site")
    saved = {n: sys.modules.pop(n) for n in list(sys.modules) if n.split(".")[0] in MODULES}
    old_argv, bytecode = sys.argv, sys.dont_write_bytecode
    sys.path.insert(0, src)
    sys.path.append(site)
    sys.argv, sys.dont_write_bytecode = argv, True
    try:
        yield
    finally:
        sys.argv, sys.dont_write_bytecode = old_argv, bytecode
        sys.path.remove(src)
        sys.path.remove(site)
        for name in [n for n in sys.modules if n.split(".")[0] in MODULES]:
            del sys.modules[name]
        sys.modules.update(saved)


def official_trainer(folder: Path, flags: list[str], test: Sequence[Any] = (),
                     save: Path | None = None) -> tuple[Any, Epoch]:
    """The official ``Trainer`` for ``flags``, set up as ``main.py`` does (module docstring), and its data
    (validation sets ``test``). With ``save`` (a folder not yet there), its real ``utility.checkpoint`` writing
    there (``--save``: its log and config text, and at each ``Trainer.test()`` what ``checkpoint.save`` keeps);
    else one that keeps nothing (:class:`QuietCheckpoint`)."""
    devnull = open(os.devnull, "w")
    data = Epoch(test)
    argv = [str(folder / "src" / "main.py"), *flags, *(["--save", str(save)] if save else [])]
    with official_imports(folder, argv), contextlib.redirect_stdout(devnull), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="pkg_resources is deprecated")  # pytorch_wavelets' import
        args = importlib.import_module("option").args
        torch.manual_seed(args.seed)
        ckp = importlib.import_module("utility").checkpoint(args) if save else QuietCheckpoint(devnull)
        model = importlib.import_module("model").Model(args, ckp)
        loss = importlib.import_module("loss").Loss(args, ckp)
        trainer = importlib.import_module("trainer").Trainer(args, data, model, loss, ckp)
    return trainer, data


def official_step(trainer: Any, data: Epoch) -> Callable[[tuple[Tensor, Tensor]], float]:
    """One official training step per call: ``Trainer.train()`` on a one-batch epoch of ``batch`` (CPU tensors in
    ``[0, 1]``, as its loader hands them), its prints dropped; returns the step's L1 term (its loss log)."""
    devnull = open(os.devnull, "w")

    def step(batch: tuple[Tensor, Tensor]) -> float:
        data.batches = [batch]
        with contextlib.redirect_stdout(devnull):
            trainer.train()
        return float(trainer.loss.log[-1, 0])

    return step


class MainPy:
    """The official ``main.py`` as a run of it goes, for ``--to-checkpoint``'s
    :class:`~contrasuite.pipelines.bench.against_peer.PeerRun`: :meth:`new_run` sets a run up in a folder (a fresh
    trainer of ``flags`` with its real checkpoint there, our ``validation`` crops as its test set, ``generator``'s
    weights copied in) and returns its epoch end; :meth:`step` adds a batch to the epoch, and the epoch's last
    calls ``Trainer.train()`` over all ``steps_per_epoch`` of them (its loop as ``main.py`` runs it: its epoch
    count, scheduler and loss log by epoch; ours selects a checkpoint at an epoch's end, so a run is whole
    epochs). Its prints go nowhere."""

    def __init__(self, folder: Path, flags: list[str], validation: ValidationCrops, generator: nn.Module,
                 steps_per_epoch: int) -> None:
        self.folder, self.flags, self.validation, self.generator = folder, flags, validation, generator
        self.steps_per_epoch, self.devnull = steps_per_epoch, open(os.devnull, "w")

    def new_run(self, run_folder: Path) -> Callable[[Path], Path]:
        """A fresh run under ``run_folder``; returns its epoch end."""
        experiment = run_folder / "experiment"
        self.trainer, self.data = official_trainer(self.folder, self.flags, [self.validation], experiment)
        copy_generator(self.generator, self.trainer)
        return self.epoch_end

    def step(self, batch: tuple[Tensor, Tensor]) -> None:
        self.data.batches.append(batch)
        if len(self.data.batches) == self.steps_per_epoch:
            with contextlib.redirect_stdout(self.devnull):
                self.trainer.train()
            self.data.batches = []

    def epoch_end(self, path: Path) -> Path:
        """``main.py``'s epoch end after ``Trainer.train()``: ``Trainer.test()``, i.e. PSNR and SSIM (scipy's
        ``convolve2d``, MATLAB's window) of each validation image, then its checkpoint's ``save`` (the model's latest
        weights and, when the epoch's PSNR is the best so far, the best; the loss state and log; the optimizer; the
        PSNR and SSIM logs; a PDF plot of each loss and of PSNR and SSIM over the epochs), its prints and progress
        bar dropped; returns the checkpoint's folder (``path`` is not used)."""
        with contextlib.redirect_stdout(self.devnull), contextlib.redirect_stderr(self.devnull):
            self.trainer.test()
        return Path(self.trainer.ckp.dir)


def copy_generator(ours: nn.Module, trainer: Any) -> None:
    """Our EDSR's weights into the official one's trainable weights, in module order (both: head, two convs per
    residual block, body conv, upsampler conv, tail; the official mean shifts are frozen 1x1 convs, our mean a
    buffer); stops naming the first pair whose shapes differ."""
    theirs = [p for p in trainer.model.parameters() if p.requires_grad]
    mine = list(ours.parameters())
    shapes = [(tuple(a.shape), tuple(b.shape)) for a, b in zip(mine, theirs)]
    if len(mine) != len(theirs) or any(a != b for a, b in shapes):
        raise SystemExit(f"our EDSR and the official one do not map: {len(mine)} vs {len(theirs)} tensors, shapes {shapes[:3]}...")
    with torch.no_grad():
        for a, b in zip(mine, theirs):
            b.copy_(a)


def official_counts(trainer: Any) -> dict[str, int]:
    """Parameter counts of the official EDSR (trainable, frozen) and of its discriminator when it has one."""
    params = list(trainer.model.parameters())
    counts = {"generator": sum(p.numel() for p in params if p.requires_grad),
              "generator_frozen": sum(p.numel() for p in params if not p.requires_grad)}
    dis = [getattr(m, "dis", None) for m in trainer.loss.get_loss_module()]
    if any(d is not None for d in dis):
        counts["discriminator"] = sum(p.numel() for d in dis if d is not None for p in d.parameters())
    return counts
