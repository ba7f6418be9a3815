"""``contrasuite bench image_text``: our CLIP-loss training step against open_clip's training loop (``--against peer``).

Both sides train the same towers on the same batches, in one process, on the same threads and device, in the
same precision (``--precision fp32``, or ``bf16``: autocast on both sides):

* ours: the task's ``train_step`` inside the engine's ``Step`` (:class:`StepRunner`) on
  ``configs/image_text/<--config>.yaml`` (default ``reduced_align``: EfficientNet-Lite0 and MiniLM trunks, frozen,
  their features cached; the image head on the pooled final, stage-2 and stage-4 maps and the text head on two
  segment means of MiniLM's token states, 256-d; batch 256 of real Twemoji image-caption pairs; CLIP's loss with
  its learnable logit scale; AdamW);
* peer: ``open_clip_train.train.train_one_epoch``, open_clip's own training loop (installed with the
  ``open_clip_torch`` wheel), called once per step on a one-batch epoch: it moves the batch to the device, runs
  ``model(images, texts)`` and ``ClipLoss`` (``open_clip.create_loss``) under its autocast (``--precision fp32``
  or ``amp_bf16``), ``backward()``, ``optimizer.step()`` and clamps ``logit_scale`` to ``[0, log 100]``; its
  arguments are ``open_clip_train.params.parse_args`` defaults (no gradient clipping, no scaler, no gradient
  accumulation, ``--skip-scheduler``: the config has no schedule). Rank 0 logs at the first step of an epoch, so
  with one-batch epochs its log bookkeeping (``.item()`` of the loss and scale, one ``logging.info`` call, the
  level left at WARNING) runs at every step instead of every 100th.
  Its model is :class:`OpenCLIPTowers`: a copy of our towers, made before either side steps, with
  ``encode_image``, ``encode_text`` and ``logit_scale`` (a copy of our loss's) as ``open_clip.CLIP`` has them.
  Its optimizer is an AdamW over the same parameter groups as ours, with the config's learning rate and weight
  decay on every parameter as ours (open_clip's ``main.py`` would exempt gains, biases and ``logit_scale`` from
  weight decay: another recipe, not another speed), and the betas and eps of open_clip's defaults, which are
  PyTorch's (and ours) for a model that is not a ViT.

The peer's batches are what open_clip's dataloader would hand its loop: CPU tensors of the same pairs, here the
cached trunk features of the images and captions (with frozen trunks) or the uint8 images and the token ids of
the captions (without); ours gathers them inside its step, as the pipeline does. A batch with two pairs of the
same caption is refused (``ClipLoss``'s targets are the diagonal). The first step of each side, from the same
weights on the same batch, gives the equal-work check (the two losses within 1e-4 relative in fp32; 1e-2 under
bf16, where open_clip's loss runs in autocast and ours in fp32). Then ``--repeats`` rounds of ``--steps`` steps
per side, the order alternating between rounds, the sides cycling through the same ``--batches`` batches of
epoch 0. Each side's ``k``-th step runs after ``torch.manual_seed(k)`` (the same dropout masks), so after the
rounds both have made the same updates: how far apart their weights are, relative to how far ours moved, is
kept. A round's ratio is peer time / our time (above 1: ours is faster); ``--clock cpu`` (the default on the
CPU) is this process's CPU time, ``wall`` (the default with ``--device cuda``, read after
``torch.cuda.synchronize()``) the wall clock. ``--profile`` adds each side's largest operators
(``torch.profiler`` over ``--steps`` more steps) to the record, which ``--report`` renders into the section's
where-the-time-goes table in ``docs/results/bench_pipelines.md``, and, in fp32 on the CPU, our step's compute bound
(``compute_bound``: its FLOPs over the fp32 matrix product's peak in the same process).

``--towers`` trains the trunks too (``config.model.freeze_trunks=false``): both sides then take uint8 images and
captions, every module of both in training mode (MiniLM's dropout on, as open_clip's loop sets it), the images
reaching both towers NCHW, the peer's copy of the towers laid out as built even where ours is channels-last.

``--locked`` keeps the config's frozen trunks and gives the peer what open_clip's loop does with locked towers
(``--lock-image``, ``--lock-text``): uint8 images and token ids, the trunks run forward at every step (without
gradients, in eval mode as the cache was computed), while ours reads their features from the cache its setup builds.
That setup runs on an empty cache folder and is timed (``ours_setup_s``), so the record also projects both sides'
time to the config's last epoch: ours, its setup plus its median step times the steps; the peer, its median step
times the steps (none of its setup). The first-step losses must agree within 1e-3 (the cache holds fp16 features).

``--to-checkpoint`` (not with ``--locked``) then trains the config as a user does (``contrasuite train`` on the bench's
device and precision, in this process, to the end of its schedule) and keeps the training time to the checkpoint the
run selects, and runs the peer's loop as open_clip's ``main`` runs it to the same step: epoch by epoch over the
bench's batches, writing its checkpoint at each epoch's end (``--save-frequency`` 1, its default; ours too saves every
epoch), with no validation. The two alternate ``--repeats`` times, each of ours a fresh training run.

Our AdamW runs on PyTorch's fused kernel, the pipeline's default (``core/task/optim.py``); the peer keeps PyTorch's
default (on the CPU the per-tensor loop). A record on a GPU, in bf16, with ``--towers`` or
``--locked`` has its own file (``image_text_peer[_cuda][_bf16][_towers|_locked].json`` unless ``--output``) and
section.

    contrasuite bench image_text --against peer --threads 1 --profile --to-checkpoint
    contrasuite bench image_text --against peer --threads 1 --precision bf16 --profile
    contrasuite bench image_text --against peer --device cuda --threads 0 --steps 50 --profile
    contrasuite bench image_text --against peer --device cuda --threads 0 --steps 50 --precision bf16 --profile
    contrasuite bench image_text --against peer --threads 1 --towers --steps 3 --batches 3 --profile
    contrasuite bench image_text --against peer --threads 1 --locked --steps 3 --batches 3 --profile
    contrasuite bench image_text --report [--device cuda] [--precision bf16] [--towers | --locked]  # or --output RECORD
"""

from __future__ import annotations

import argparse
import copy
import sys
import tempfile
from itertools import count, islice
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from contrasuite.pipelines.api import (
    RECORDS, ROOT, alternate, ceiling_text, check_text, comparison_section, compute_bound, cpu_task,
    host_allocator_fields, median_step, optimizer_kernel, our_step, ours_text, outcome, peer_flags, peer_main,
    PeerRun, peer_record, peer_version, profile_sides, profile_table, retaining_sides, run_variant,
    synced_clocks, to_checkpoint_rounds, where_words,
)

SECTION = "image_text"
RECORD = RECORDS / "image_text_peer.json"
TOWERS = "config.model.freeze_trunks=false"
"""``--towers``: the trunks train too, on images and token ids instead of cached features."""
TOLERANCE = {"fp32": 1e-4, "bf16": 1e-2, "locked": 1e-3}
"""The equal-work check's relative tolerance on the first-step losses, per precision (module docstring); with
``--locked`` ours reads the trunks' features rounded to fp16 in its cache, the peer computes them in fp32."""
OPEN_CLIP_PRECISION = {"fp32": "fp32", "bf16": "amp_bf16"}
"""open_clip's ``--precision`` for ours."""
PROFILE_ROWS = 12


class OpenCLIPTowers(nn.Module):
    """Our towers (a :class:`~contrasuite.domains.image_text.models.TwoTowerModel`) as open_clip's loop takes a model:
    ``encode_image``, ``encode_text``, ``logit_scale`` and ``forward(image, text)`` returning ``open_clip.CLIP``'s
    output dict (L2-normalised features, ``logit_scale.exp()``). With ``cached`` inputs (the frozen trunks'
    features) only the heads run; otherwise uint8 images and token ids go through the whole towers. ``locked``
    trunks (frozen, run at every step) stay in eval mode when the loop calls ``train()``, as the cache was computed
    (open_clip's ``--lock-image-freeze-bn-stats``; its locked Hugging Face text tower would keep dropout on)."""

    def __init__(self, towers: nn.Module, logit_scale: Tensor, cached: bool, locked: bool = False) -> None:
        super().__init__()
        self.towers, self.cached, self.locked = towers, cached, locked
        self.logit_scale = nn.Parameter(logit_scale.detach().clone())

    def train(self, mode: bool = True) -> "OpenCLIPTowers":
        super().train(mode)
        if self.locked:
            self.towers.image_trunk.eval()
            self.towers.text_trunk.eval()
        return self

    def encode_image(self, image: Tensor, normalize: bool = False) -> Tensor:
        x = self.towers.image_head(image) if self.cached else self.towers.encode_image(image)
        return F.normalize(x, dim=-1) if normalize else x

    def encode_text(self, text: Tensor, normalize: bool = False) -> Tensor:
        x = self.towers.text_head(text if self.cached else self.towers.text_trunk(text))
        return F.normalize(x, dim=-1) if normalize else x

    def forward(self, image: Tensor, text: Tensor) -> dict[str, Tensor]:
        return {"image_features": self.encode_image(image, normalize=True),
                "text_features": self.encode_text(text, normalize=True), "logit_scale": self.logit_scale.exp()}


class OneBatchEpoch:
    """``data["train"]`` as ``train_one_epoch`` reads it (``set_epoch``, ``dataloader`` with ``num_batches`` and
    ``num_samples``): an epoch of the one batch last set."""

    num_batches = 1

    def __init__(self) -> None:
        self.batch: tuple[Tensor, Tensor] | None = None
        self.dataloader = self

    def set_epoch(self, epoch: int) -> None:
        """Nothing to reshuffle."""

    @property
    def num_samples(self) -> int:
        return len(self.batch[0])

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor]]:
        yield self.batch


def clip_term(task: Any) -> nn.Module:
    """Our CLIP loss term; exits naming the setting when the config is not a plain CLIP step (hard negatives,
    GradCache, other or weighted terms, a weight average) that ``ClipLoss`` could do."""
    cfg = task.cfg
    terms = [dict(t) for t in cfg.objective.terms]
    hard = cfg.hard_negatives
    problems = [
        *([f"objective.terms {terms} (one clip term of weight 1)"] if len(terms) != 1 or terms[0]["name"] != "clip"
          or float(terms[0].get("weight", 1.0)) != 1.0 else []),
        *(["hard_negatives.texts/images"] if hard.texts or hard.images else []),
        *([f"gradcache_chunks={cfg.gradcache_chunks}"] if cfg.gradcache_chunks > 1 else []),
        *([f"ema={cfg.ema}"] if cfg.ema else []),
    ]
    if problems:
        raise SystemExit(f"--against peer compares a plain CLIP step with open_clip's ClipLoss; set off: {', '.join(problems)}")
    return task.objective.terms[0]


def peer_batch(task: Any, batch: dict, cached: bool) -> tuple[Tensor, Tensor]:
    """The inputs of ``batch`` (one of ``task.batches``) as open_clip's dataloader hands them: CPU tensors of the
    images and captions, their trunks' ``cached`` features or uint8 pixels and token ids (module docstring)."""
    n = len(batch["rows"])
    if batch["pos_mask"].shape != (n, n) or not torch.equal(batch["pos_mask"], torch.eye(n, dtype=torch.bool)):
        raise SystemExit("a batch holds two pairs of the same caption: ClipLoss's targets are the diagonal")
    if cached:
        return (task._images_in(task.styles[task.train_style], batch["image_rows"]).cpu(),
                task._texts_in(batch["texts"]).cpu())
    pixels = task.styles[task.train_style].images[batch["image_rows"]]
    return torch.from_numpy(pixels), task.model.tokenizer(batch["texts"])


def open_clip_args(task: Any, precision: str, device: torch.device) -> argparse.Namespace:
    """open_clip_train's arguments for this run: ``parse_args`` defaults with the precision, batch size, learning
    rate, weight decay and ``--skip-scheduler``, then what its ``main`` sets: the device, one process's rank, and
    no distillation and no wandb (none asked for)."""
    from open_clip_train.params import parse_args

    cfg = task.cfg
    args = parse_args(["--precision", OPEN_CLIP_PRECISION[precision], "--batch-size", str(cfg.batch_size),
                       "--lr", str(cfg.optim.lr), "--wd", str(cfg.optim.weight_decay), "--skip-scheduler"])
    args.device, args.rank, args.local_rank, args.world_size, args.distributed = str(device), 0, 0, 1, False
    args.distill, args.wandb = False, False
    return args


def peer_loop(task: Any, precision: str, device: torch.device, cached: bool) -> tuple[
        Callable[[tuple[Tensor, Tensor]], Tensor], torch.optim.Optimizer, str, Callable[[Path], None]]:
    """open_clip's loop on a copy of the task's towers (module docstring), on the trunks' ``cached`` features or
    through the trunks: ``(step, its optimizer, description, save)``; a step returns its loss (a tensor, not read:
    reading it would wait for the GPU); ``save(path)`` writes the checkpoint open_clip's ``main`` writes at an
    epoch's end (its ``--save-frequency`` is 1 by default): ``torch.save`` of the epoch, the run's name, the model's
    ``state_dict()`` and the optimizer's."""
    import open_clip
    from open_clip_train.train import train_one_epoch

    args = open_clip_args(task, precision, device)
    term = clip_term(task)
    # trunks whose cached features are the peer's inputs stay out of the copy (an Identity each)
    twin = {id(t): nn.Identity() for t in (task.model.image_trunk, task.model.text_trunk)} if cached else {}
    # laid out as built (ours may be channels-last)
    towers = copy.deepcopy(task.model, twin).to(memory_format=torch.contiguous_format)
    model = OpenCLIPTowers(towers, term.logit_scale, cached, locked=task.frozen and not cached).to(device)
    twin[id(term.logit_scale)] = model.logit_scale  # deepcopy's memo: each of our tensors -> its copy
    groups = [{"params": [twin[id(p)] for p in group["params"]], "lr": group["lr"], "weight_decay": group["weight_decay"]}
              for group in task.optimizers()["model"].param_groups]
    optimizer = torch.optim.AdamW(groups, lr=args.lr, betas=(args.beta1, args.beta2), eps=args.eps)
    loss = open_clip.create_loss(args)
    last: dict[str, Tensor] = {}
    loss.register_forward_hook(lambda _module, _inputs, out: last.update(out))
    data, epochs, saved = OneBatchEpoch(), count(), count(1)

    def step(batch: tuple[Tensor, Tensor]) -> Tensor:
        data.batch = batch
        train_one_epoch(model, {"train": data}, loss, next(epochs), optimizer, None, None, None, args)
        return last["contrastive_loss"].detach()

    def save(path: Path) -> None:
        torch.save({"epoch": next(saved), "name": args.name, "state_dict": model.state_dict(),
                    "optimizer": optimizer.state_dict()}, path)

    desc = (f"open_clip {peer_version('open_clip')}: open_clip_train.train.train_one_epoch (precision "
            f"{args.precision}) with {type(loss).__name__}, one-batch epochs, AdamW(betas=({args.beta1}, {args.beta2}), "
            f"eps={args.eps:g})")
    return step, optimizer, desc, save


def trained(optimizer: torch.optim.Optimizer) -> list[Tensor]:
    """The weights ``optimizer`` trains, in its groups' order."""
    return [p.detach() for group in optimizer.param_groups for p in group["params"]]


def weights_gap(start: list[Tensor], ours: list[Tensor], theirs: list[Tensor]) -> float:
    """How far apart the two sides' weights are, relative to how far ours moved: ``||ours - theirs|| / ||ours -
    start||`` over all trained tensors (0: the same training)."""
    def norm(diffs: Any) -> float:
        return float(torch.stack([d.float().norm() for d in diffs]).norm())

    return norm(a - b for a, b in zip(ours, theirs)) / norm(a - s for a, s in zip(ours, start))


def seeded(step: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``step`` after ``torch.manual_seed(k)`` at its ``k``-th call: both sides' dropout draws the same masks."""
    calls = count()

    def call(batch: Any) -> Any:
        torch.manual_seed(next(calls))
        return step(batch)

    return call


def run(args: argparse.Namespace, argv: Sequence[str]) -> dict[str, Any]:
    device = torch.device(args.device)
    overrides = [*args.override, *[TOWERS] * args.towers]
    with tempfile.TemporaryDirectory() as run_dir:
        config = ROOT / "configs" / "image_text" / f"{args.config}.yaml"
        # --locked: ours builds its feature cache in setup, into an empty folder, timed
        empty_cache = [f"config.cache_dir={Path(run_dir) / 'cache'}"] * args.locked
        clock = synced_clocks(device)[args.clock]
        started = clock()
        task, loaded = cpu_task(config, [*overrides, *empty_cache], args.data_root, Path(run_dir), device,
                                args.precision)
        setup_s = clock() - started
        if args.locked and not task.frozen:
            raise SystemExit("--locked compares frozen trunks; the config has model.freeze_trunks false")
        cached = task.frozen and not args.locked
        retaining = retaining_sides(loaded, device)
        # before ours steps: the same weights
        peer_step, peer_optimizer, peer_desc, peer_save = peer_loop(task, args.precision, device, cached)
        batches = list(islice(task.batches(0), args.batches))
        peer_batches = [peer_batch(task, b, cached) for b in batches]
        ours = seeded(our_step(task, device, args.precision))
        peer = {id(b): p for b, p in zip(batches, peer_batches)}
        theirs = seeded(lambda batch: peer_step(peer[id(batch)]))  # on its tensors of the same batch

        start = [w.clone() for w in trained(task.optimizers()["model"])]
        first_ours = ours(batches[0])  # the first step of each: same weights, same batch (and a warm-up)
        first_peer = float(theirs(batches[0]))
        sides = {"ours": ours, "peer": theirs}
        rounds = alternate(sides, batches, args.repeats, args.steps, synced_clocks(device), retaining)
        gap = weights_gap(start, trained(task.optimizers()["model"]), trained(peer_optimizer))
        profiles = profile_sides(sides, batches, args.steps, device, retaining) if args.profile else None
        fp32_cpu = args.profile and device.type == "cpu" and args.precision == "fp32"  # the peak is fp32's on the CPU
        compute = {"compute": compute_bound(ours, batches[0])} if fp32_cpu else {}
        # as open_clip's main: its save at every epoch's end
        peer_run = PeerRun(peer_step, peer_batches, task.steps_per_epoch, lambda folder: peer_save)
        as_user = {"to_checkpoint": to_checkpoint_rounds(config, overrides, args.data_root, peer_run, args.repeats,
                                                         Path(run_dir), device, args.precision, retaining),
                   "peer_epoch_end_what": PEER_EPOCH_END} if args.to_checkpoint else {}
    m, images = task.cfg.model, peer_batches[0][0]
    kernel = optimizer_kernel(task.optimizers()["model"])
    locked = {"ours_setup_s": setup_s, "epochs": loaded.run.epochs, "steps_per_epoch": task.steps_per_epoch,
              "feature_cache_inputs": {"images": sum(len(s.images) for s in task.styles.values()),
                                       "texts": len(task.text_features)}} if args.locked else {}
    own = {"ours": ours_text(f"image_text/{args.config}", detail=f" ({args.precision}), AdamW ({kernel} kernel)"),
           "ours_optimizer": kernel, **host_allocator_fields(retaining), "peer": peer_desc,
           "config": args.config, "overrides": overrides, "batch": len(batches[0]["rows"]),
           "frozen_trunks": bool(task.frozen), "peer_runs_trunks": not cached, "image_input": list(images.shape[1:]),
           "embed_dim": m.embed_dim, "text_segments": m.text_segments, "extra_image_stages": list(m.extra_image_stages),
           "trainable_parameters": sum(p.numel() for g in task.optimizers()["model"].param_groups for p in g["params"]),
           "distinct_batches": len(batches), "weights_gap_after": gap, **locked,
           **({"profile": profiles} if profiles else {}), **compute, **as_user}
    tolerance = max(TOLERANCE[args.precision], TOLERANCE["locked"] if args.locked else 0.0)
    measured = outcome(first_ours, first_peer, rounds, args.clock, tolerance=tolerance)
    return peer_record(SECTION, args, argv, {}, [], own, measured, variant=variant(args))


PEER_EPOCH_END = ("open_clip's `main` runs them: a checkpoint written (`torch.save` of the epoch, the run's name, the "
                  "model's `state_dict()` and the optimizer's; `--save-frequency` 1, its default), of its copy's "
                  "trained weights (none of the frozen trunks, which open_clip's model would also hold), no validation")
"""What the peer's run does at an epoch's end (``--to-checkpoint``)."""


def variant(args: argparse.Namespace) -> str:
    """``+towers`` or ``+locked`` for those modes' records and sections (none for cached features)."""
    return "+towers" * args.towers + "+locked" * args.locked


LOOP_OPS = "`sqrt`, `div`, `lerp_`, `addcdiv_`, `addcmul_`, `mul_`"
"""The operators of PyTorch's per-tensor AdamW on the CPU, the peer's optimizer."""
TOWERS_WHERE = (
    "Both sides train the same two towers end to end: EfficientNet-Lite0's convolutions (`mkldnn_convolution`, "
    "`convolution_backward`), batch norm and ReLU6 (`clamp`, `hardtanh_backward`), MiniLM's linear layers (`addmm`, "
    "`mm`) and attention, with dropout in training mode on both, then the heads, and {optimizer}. {rows}")
"""What the operators of a step through whole towers are (``--towers``), ``{optimizer}`` and ``{rows}`` filled by
:func:`where_words`."""
TOWERS_ROWS = ("The rows of the same kernels differ by where their outputs land: the peer's activations go to "
               "freshly mapped pages, ours to memory retained between steps (the host-memory line's page faults).")
"""The rows' words of a ``--towers`` record whose step retained freed memory."""


LOCKED_WHERE = ("The peer's step runs the frozen trunks forward, without gradients (EfficientNet-Lite0's convolutions, "
                "`mkldnn_convolution`, batch norm and ReLU6; MiniLM's linear layers, `addmm`, and attention), then "
                "the heads as ours does; ours reads the trunks' features from its cache (`index`, `copy_`). Both then "
                "run the heads' backward and AdamW (ours on the fused kernel, `_fused_adamw_`; the peer on PyTorch's "
                "default, on the CPU its per-tensor loop: " + LOOP_OPS + ").")
"""What the operators of a ``--locked`` record are: the trunks' forward is the difference."""


def towers_text(record: dict[str, Any]) -> str:
    """What the operators of a whole-towers step are and what the two steps differ by (:func:`where_words`)."""
    rows = TOWERS_ROWS if record.get("ours_host_allocator") == "retain" else None
    return where_words(record, TOWERS_WHERE, "AdamW", LOOP_OPS, loop_closing="", rows=rows)


def where_text(record: dict[str, Any]) -> str:
    """What the operators of a cached-features step are, for the record's precision and optimizer kernel (the profile
    table gives their times)."""
    adamw = (f"AdamW (ours on the fused kernel, `_fused_adamw_`; the peer on PyTorch's default, on the CPU its "
             f"per-tensor loop: {LOOP_OPS})" if record.get("ours_optimizer") == "fused" else
             f"AdamW (PyTorch's default on both, on the CPU its per-tensor loop: {LOOP_OPS})")
    casts = (" Under bf16 autocast both also cast the weights and activations at every step (`copy_`)."
             if record["precision"] == "bf16" else "")
    return (f"Both sides run the same kernels for the heads' forward and backward (`addmm`, `mm`, `gelu`) and "
            f"{adamw}, which are most of either step.{casts} Ours adds, inside its step, the gather of the batch's "
            "cached trunk features and their conversion from the cache's fp16 (`index`, `copy_`; open_clip's "
            "dataloader hands its loop ready tensors), and the engine's per-step checks: the global gradient norm it "
            "logs and the norms of the updated weights (`linalg_vector_norm`), each read back to check that it is "
            "finite. The rounds' times also hold the Python around the operators, which this table leaves out.")


def locked_projection(record: dict[str, Any]) -> str:
    """A ``--locked`` record's time to the config's last epoch, projected from the median step of each side: ours
    with its setup on an empty feature cache, the peer's loop with none of its setup."""
    steps, clock = record["epochs"] * record["steps_per_epoch"], record["clock"]
    ours, peer = median_step(record, "ours"), median_step(record, "peer")
    ours_total, peer_total = record["ours_setup_s"] + steps * ours, steps * peer
    cache = record["feature_cache_inputs"]
    return (f"- to the config's checkpoint ({record['epochs']} epochs of {record['steps_per_epoch']} steps, its last "
            f"epoch's weights), projected from the median steps above: ours {ours_total:.0f} s ({clock} clock), of "
            f"which {record['ours_setup_s']:.0f} s are its setup with an empty feature cache (the trunks over "
            f"{cache['images']:,} images and {cache['texts']:,} captions, the data and the towers), the peer "
            f"{peer_total:.0f} s without any of its setup: **{peer_total / ours_total:.2f}x**")


def render(record: dict[str, Any]) -> str:
    """The page section of one record (markdown)."""
    locked = record["frozen_trunks"] and record.get("peer_runs_trunks", False)
    trunks = ("frozen EfficientNet-Lite0 and MiniLM trunks; ours reads their features from the cache it builds at "
              f"setup, the peer's loop runs them at every step on images {record['image_input']} and token ids, in "
              "eval mode as the cache was computed (open_clip's locked towers)" if locked else
              "frozen EfficientNet-Lite0 and MiniLM trunks, their cached features "
              f"({record['image_input']} per image) into the heads" if record["frozen_trunks"] else
              f"EfficientNet-Lite0 and MiniLM towers end to end, images {record['image_input']}")
    same_work = (f"the towers of config `{record['config']}` (a copy before either steps: {trunks}, "
                 f"{record['trainable_parameters']:,} trainable parameters with the logit scale), batches of "
                 f"{record['batch']} real Twemoji image-caption pairs, {record['distinct_batches']} distinct batches "
                 f"cycled by both; first-step loss {check_text(record['loss_check'])}; after the rounds the two sides' "
                 f"weights are apart by {record['weights_gap_after']:.1e} of the distance ours moved from the start "
                 f"(`||ours - peer|| / ||ours - start||`)"
                 + ("; ours trains on the trunks' features rounded to fp16 in its cache, the peer on fp32 ones"
                    if locked else "")
                 + ("; under bf16 the two trainings differ by design: open_clip computes its loss under autocast "
                    "(bf16 logits), ours in fp32" if record["precision"] == "bf16" else ""))
    mode = ", frozen trunks run by the peer" if locked else "" if record["frozen_trunks"] else ", whole towers"
    title = (f"image_text: our CLIP step vs open_clip's training loop ({record['device']}, {record['precision']}"
             f"{mode})")
    note = [locked_projection(record)] if locked else []
    if "profile" in record:
        note.append(f"\nWhere the time goes (`torch.profiler` over {record['steps_per_round']} more steps per side: "
                    f"CPU self time of the {PROFILE_ROWS} largest operators). "
                    + (LOCKED_WHERE if locked else where_text(record) if record["frozen_trunks"]
                       else towers_text(record))
                    + "\n\n" + profile_table(record["profile"], PROFILE_ROWS, differences=0) + ceiling_text(record))
    return comparison_section(record, title, same_work, note="\n".join(note) if note else None)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="contrasuite bench image_text", description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="reduced_align", help="a configs/image_text/ name (a plain CLIP step)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--precision", choices=sorted(TOLERANCE), default="fp32", help="bf16: autocast on both sides")
    parser.add_argument("--profile", action="store_true", help="add both sides' operator profile (torch.profiler) to the record")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--towers", action="store_true",
                      help=f"train the towers end to end ({TOWERS}): a record and section of their own")
    mode.add_argument("--locked", action="store_true",
                      help="frozen trunks as configured, ours from its feature cache (built at setup, timed), the "
                           "peer's loop running them at every step: a record and section of their own")
    peer_flags(parser, RECORD, {}, batches=4, steps=20, peer="open_clip's train_one_epoch", to_checkpoint=True)
    parser.set_defaults(clock=None, output=None)  # resolved below, from the device and precision
    args = parser.parse_args(argv)
    if args.locked and args.to_checkpoint:
        parser.error("--locked projects its own time to the checkpoint (with ours' setup); drop --to-checkpoint")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.exit(2, "contrasuite bench image_text: --device cuda but torch.cuda.is_available() is False\n")
    args.clock = args.clock or ("wall" if args.device == "cuda" else "cpu")  # a process waiting on a GPU: not its CPU time
    name = "_".join([RECORD.stem, *run_variant(args), *["towers"] * args.towers, *["locked"] * args.locked])
    args.output = args.output or RECORD.with_name(name + ".json")
    return peer_main(args, argv, run, render)


if __name__ == "__main__":
    raise SystemExit(main())
