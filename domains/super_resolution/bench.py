"""``contrasuite bench super_resolution``: training throughput (LR patches per second).

Times full training steps of the super_resolution task (generator forward, D step and generator
step with the contrastive term for ``pcl``; generator only for ``l1``) through the engine's
:class:`~contrasuite.pipelines.step.Step`, for each precision, on real T91 patches. The first
``--warmup`` steps are not timed. Wall time gives patches/s; process CPU time per step is printed too
(on a shared CPU, wall time includes waiting for other processes). Prints a markdown table and
writes ``--output`` JSON if given.

    contrasuite bench super_resolution --precisions fp32,bf16 --modes l1,pcl --patch 48 --batch 16

``--ssim SET`` instead times the evaluation's SSIM on Y (``ssim_y``: separable window, the five moments
in one grouped filtering) over the bicubic x``--scale`` images of a test set, in the same process as two
baselines on the same Y: the direct 11 x 11 window with one convolution per moment (how ``ssim_y`` was
computed before) and kornia's ``metrics.ssim`` on Y / 255 (valid region): process CPU seconds, ratios,
and the largest difference from ``ssim_y``.

``--against official`` (issue 41): our training step against the official PCL-SISR code's (github.com/Aitical/
PCL-SISR, EDSR-PyTorch's trainer with the PCL-SR loss; :mod:`~contrasuite.domains.super_resolution.official_pcl`),
for each of ``--modes`` and ``--precisions``, in one process, on the same threads, device and batches, alternating
rounds (``pipelines/bench/against_peer.py``):

* ``l1``: ours ``configs/super_resolution/edsr_baseline_x2_l1.yaml`` (EDSR-baseline x2: 16 blocks of 64 channels,
  res_scale 1, LR patch 48, batch 16, Adam 1e-4 (0.9, 0.999), eps 1e-8, L1), official ``--loss 1*L1`` with the same
  sizes;
* ``pcl``: ours ``finetune_x2_pcl_official.yaml`` (the released behaviour: the term sends no gradient to G,
  own-image negatives, one discriminator pass per group, gradient values clipped at 1) with the official
  variants (:data:`PCL_OVERRIDES`: sharpness factors U(0.5, 3.0), no Fourier low-pass, no mixture; 3 blurs, 3
  sharpened positives and the upsampled LR), official ``--loss 1*L1+<weight>*CL-patchD`` with the flags of its
  scripts (:func:`~contrasuite.domains.super_resolution.official_pcl.official_flags`).

Ours is the task's ``train_step`` in the engine's ``Step`` (``bf16``: under autocast); the official side is
``Trainer.train()`` on a one-batch epoch, always in fp32 (the code has no autocast: its ``--precision half``
casts model and data to fp16 for testing), on ``[0, 1]`` images (``--rgb_range 1``). Both step through the same
``--batches`` real T91 batches of our task's epoch 0 (our loader's LR/HR patches, CPU tensors as a loader hands
them). Equal work: the parameter counts, and our EDSR weights copied into the official one before either steps,
so the first step's L1 must agree (1e-4 relative in fp32, 1e-2 for ours in bf16); for ``pcl`` the variants'
draws, the discriminator's BatchNorm groups and the LR upsampling differ (the section says what). ``--warmup``
untimed steps per side follow the first (default 0 on the CPU, 3 on CUDA; the record keeps cuDNN's TF32 and
benchmark settings, PyTorch's defaults on both sides). ``--profile`` keeps each side's largest operators over one
more step, and on the CPU in fp32 our step's compute bound (``compute_bound``: its FLOPs over the fp32
matrix-product peak), which ``--report`` renders. The clock is the process's CPU time on the CPU (``--clock``) and
the wall clock after ``torch.cuda.synchronize()`` on CUDA. The official code
comes from ``docs/results/records/official/pcl_sisr/export_pcl_sisr.sh`` (``--official``, default
``/tmp/official/pcl_sisr``). One record holds every mode x precision of a command:
``docs/results/records/bench_pipelines/super_resolution_official.json`` (``..._cuda.json`` on a GPU), section
``super_resolution`` (``super_resolution+cuda``) of ``docs/results/bench_pipelines.md``.

``--to-checkpoint`` (with ``l1`` in fp32) adds the time to the checkpoint ours selects: :data:`TO_CHECKPOINT`
(``reduced_x2_l1.yaml`` for 2 epochs; ``--override`` applies to it too) trained as a user does, against the official
``main.py`` run of the same flags to the same step (:class:`~contrasuite.domains.super_resolution.official_pcl.MainPy`:
a fresh trainer per run with its real checkpoint, our initial weights and validation crops, ``Trainer.train()`` over
whole epochs of our loader's batches, ``Trainer.test()`` after each), whole runs alternating
(``pipelines/bench/against_peer.py``, ``to_checkpoint_rounds``).

    contrasuite bench super_resolution --against official --profile --to-checkpoint
    contrasuite bench super_resolution --against official --device cuda --threads 0 --steps 20 --profile
    contrasuite bench super_resolution --report
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
from itertools import islice
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from contrasuite.domains.super_resolution import official_pcl
from contrasuite.domains.super_resolution.task import SRConfig, SuperResolutionTask
from contrasuite.pipelines.api import (
    RECORDS, StepRunner, alternate, ceiling_text, check_text, comparison_section, compute_bound, cpu_task,
    default_data_root, host_allocator_fields, official_flags, on_its_thread, our_step, ours_text, outcome, peer_flags,
    peer_main, peer_record, PeerRun, pick_device, retaining_sides, run_variant, settle, setup_task, synced_clocks,
    to_checkpoint_rounds, weight_layout, write_output,
)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="contrasuite bench super_resolution", description=__doc__.splitlines()[0])
    p.add_argument("--precisions", default="fp32,bf16")
    p.add_argument("--modes", default="l1,pcl", help="l1 (EDSR-baseline + L1) and/or pcl (+ contrastive term)")
    p.add_argument("--scale", type=int, default=2)
    p.add_argument("--patch", type=int, default=48, help="LR patch side")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--steps", type=int, default=None, help="timed steps (default 5; --against: per side per round, default 2)")
    p.add_argument("--warmup", type=int, default=None,
                   help="untimed steps first (default 1; --against: per side after the first, default 0 on the CPU, 3 on CUDA)")
    p.add_argument("--ssim", default="", metavar="SET", help="time SSIM on this test set's bicubic images instead")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (0: leave as is; default 0, 1 with --against)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--data-root", default=None, help="data root with sr/T91.tar.gz (default $CONTRASUITE_DATA or data)")
    official = official_flags(p, "our step against the official PCL-SISR code's", OFFICIAL,
                              "the export of the official code")
    official.add_argument("--profile", action="store_true", help="keep each side's largest operators over one more step")
    peer_flags(official, None, {}, batches=3, to_checkpoint=True)
    p.set_defaults(clock=None)  # --against: cpu on the CPU, wall on CUDA
    return p


def measure(mode: str, precision: str, args: argparse.Namespace, device: torch.device, data_root: Path) -> dict[str, Any]:
    """Patches per second of one (mode, precision)."""
    cfg = SRConfig(scale=args.scale, contrastive=mode == "pcl", test_sets=[])
    cfg.data.patch_size, cfg.batch_size = args.patch, args.batch
    cfg.data.steps_per_epoch = args.warmup + args.steps
    torch.manual_seed(0)
    task = setup_task(SuperResolutionTask(), cfg, device=device, precision=precision, data_root=data_root)
    train_step = StepRunner(task, device, precision)
    batches = list(task.batches(0))
    times, cpu_times = [], []
    for i, batch in enumerate(batches):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start, cpu_start = time.perf_counter(), time.process_time()
        train_step(batch, 0, i)
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
        cpu_times.append(time.process_time() - cpu_start)
    timed, cpu = times[args.warmup :], cpu_times[args.warmup :]
    per_step = sum(timed) / len(timed)
    return {"mode": mode, "precision": precision, "device": str(device), "scale": args.scale, "patch": args.patch,
            "batch": args.batch, "steps": len(timed), "seconds_per_step": per_step, "patches_per_second": args.batch / per_step,
            "cpu_seconds_per_step": sum(cpu) / len(cpu)}


def ssim_direct(y1: torch.Tensor, y2: torch.Tensor) -> float:
    """The baseline: SSIM of two Y images ``[1, 1, H, W]`` (float64) with the full 11 x 11 window, one convolution per moment."""
    from contrasuite.domains.ssim import gaussian_window

    win, c1, c2 = gaussian_window()[None, None], (0.01 * 255) ** 2, (0.03 * 255) ** 2
    mu1, mu2 = torch.nn.functional.conv2d(y1, win), torch.nn.functional.conv2d(y2, win)
    s11 = torch.nn.functional.conv2d(y1 * y1, win) - mu1**2
    s22 = torch.nn.functional.conv2d(y2 * y2, win) - mu2**2
    s12 = torch.nn.functional.conv2d(y1 * y2, win) - mu1 * mu2
    return float((((2 * mu1 * mu2 + c1) * (2 * s12 + c2)) / ((mu1**2 + mu2**2 + c1) * (s11 + s22 + c2))).mean())


def ssim_timing(data_root: Path, name: str, scale: int) -> dict[str, Any]:
    """CPU seconds of ``ssim_y``, the direct window and kornia over the bicubic images of set ``name``."""
    import kornia

    from contrasuite.domains.super_resolution.data import eval_pairs
    from contrasuite.domains.super_resolution.metrics import crop_border, rgb_to_y, ssim_y

    pairs = eval_pairs(str(data_root), name, scale)
    bicubic = [torch.nn.functional.interpolate(p.lr[None], scale_factor=scale, mode="bicubic").clamp(0, 1)[0] for p in pairs]
    ys = [tuple(crop_border(rgb_to_y(x), scale)[None, None] for x in (sr, p.hr)) for sr, p in zip(bicubic, pairs)]
    ways = {"ours": lambda i: float(ssim_y(bicubic[i], pairs[i].hr, scale)),
            "direct": lambda i: ssim_direct(*ys[i]),
            "kornia": lambda i: float(kornia.metrics.ssim(ys[i][0] / 255, ys[i][1] / 255, 11, max_val=1.0, padding="valid").mean())}
    seconds, values = {}, {}
    for way, fn in ways.items():
        started = time.process_time()
        values[way] = [fn(i) for i in range(len(pairs))]
        seconds[way] = time.process_time() - started
    diff = {way: max(abs(a - b) for a, b in zip(values["ours"], values[way])) for way in ("direct", "kornia")}
    return {"set": name, "images": len(pairs), **{f"{w}_cpu_s": t for w, t in seconds.items()},
            "direct_over_ours": seconds["direct"] / seconds["ours"], "kornia_over_ours": seconds["kornia"] / seconds["ours"],
            "max_diff_direct": diff["direct"], "max_diff_kornia": diff["kornia"]}


# -- --against official -------------------------------------------------------------------------------------

OFFICIAL = Path("/tmp/official/pcl_sisr")
"""Where ``--official`` looks by default (``docs/results/records/official/pcl_sisr/export_pcl_sisr.sh`` makes it)."""
PCL_OVERRIDES = ("config.frequency.sharp_min=0.5", "config.frequency.n_lowpass=0", "config.frequency.n_mix=0")
"""On ``finetune_x2_pcl_official.yaml``: the official variants (sharpness U(0.5, 3.0), blurs, upsampled LR only)."""
CONFIGS = {"l1": ("super_resolution/edsr_baseline_x2_l1", ()),
           "pcl": ("super_resolution/finetune_x2_pcl_official", PCL_OVERRIDES)}
"""Each mode's shipped config and the bench's overrides of it."""
TOLERANCE = {"fp32": 1e-4, "bf16": 1e-2}
"""The first-step L1 check's relative tolerance, by our precision (the official side is fp32)."""
PROFILE_ROWS = 6
TO_CHECKPOINT = ("super_resolution/reduced_x2_l1", ("run.epochs=2",))
"""``--to-checkpoint`` (``l1`` in fp32): the config trained to its selected checkpoint, and the bench's overrides."""
PEER_EPOCH_END = ("`main.py` runs them: `Trainer.test()` on our validation crops (PSNR and SSIM on Y per image), "
                  "then its `utility.checkpoint`'s `save` into its run folder (the model's latest weights and, on a "
                  "best PSNR, the best; loss state and log, optimizer, PSNR and SSIM logs, a PDF plot of each)")
"""What the official run does at an epoch's end (``official_pcl.MainPy.epoch_end``)."""


def device_variant(args: argparse.Namespace) -> list[str]:
    """``cuda`` for a record made on a GPU (its file name and section say it), else nothing."""
    return run_variant(argparse.Namespace(device=args.device))


def mismatches(cfg: Any, mode: str) -> list[str]:
    """What our config sets that the official step of ``mode`` does not compute."""
    if mode == "pcl":
        return official_pcl.pcl_mismatches(cfg)
    return ["contrastive=True (official l1: false)"] if cfg.contrastive else []


def profile(step: Callable[[Any], Any], batch: Any, device: torch.device) -> dict[str, Any]:
    """``torch.profiler`` over one step: its operators' self time in all (ms: CPU time, or on a GPU the time of the
    kernels each operator launched, so that every kernel counts once), the share of the convolutions (operators
    named ``*conv*``) and the :data:`PROFILE_ROWS` largest operators."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile as torch_profile

    cuda = device.type == "cuda"
    with torch_profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])) as prof:
        step(batch)
        if cuda:
            torch.cuda.synchronize(device)
    events = prof.key_averages()
    if cuda:  # the operators (not the kernels, nor the annotations around them) with their kernels' time
        self_us = {e.key: e.self_device_time_total for e in events if e.device_type == DeviceType.CPU
                   and not getattr(e, "is_user_annotation", False) and e.self_device_time_total > 0}
    else:
        self_us = {e.key: e.self_cpu_time_total for e in events}
    total = sum(self_us.values())
    top = sorted(self_us.items(), key=lambda kv: -kv[1])[:PROFILE_ROWS]
    return {"total_ms": total / 1000, "conv_share": sum(t for k, t in self_us.items() if "conv" in k) / total,
            "top": [{"op": op, "ms": us / 1000, "share": us / total} for op, us in top]}


def to_checkpoint(args: argparse.Namespace, device: torch.device, folder: Path) -> dict[str, Any]:
    """Ours trained as a user does against the official run to the checkpoint ours selects (``--to-checkpoint``,
    :func:`~contrasuite.pipelines.bench.against_peer.to_checkpoint_rounds`): :data:`TO_CHECKPOINT` with
    ``--override``, fp32; the official side a fresh trainer each run (``--loss 1*L1`` with the config's sizes and
    learning rate, our initial weights, a real checkpoint in the run's folder), over our loader's batches of epoch
    0, its epochs and epoch ends as ``main.py`` runs them."""
    config, overrides = TO_CHECKPOINT[0], [*TO_CHECKPOINT[1], *args.override]
    task, loaded = cpu_task(config, overrides, args.data_root, folder / "setup", device)
    flags = official_pcl.official_flags(task.cfg, "l1", None, device.type == "cuda")
    steps = task.cfg.data.steps_per_epoch
    official = official_pcl.MainPy(args.official, flags, official_pcl.ValidationCrops(task.val), task.generator, steps)
    peer = PeerRun(official.step, list(task.batches(0)), steps, official.new_run)
    rounds = to_checkpoint_rounds(config, overrides, args.data_root, peer, args.repeats, folder, device, "fp32",
                                  retaining_sides(loaded, device))
    return {"to_checkpoint": rounds, "to_checkpoint_flags": flags, "peer_epoch_end_what": PEER_EPOCH_END}


def against_official(args: argparse.Namespace, argv: Sequence[str]) -> dict[str, Any]:
    """Our step of ``args.mode`` in ``args.precision`` against the official one (module docstring): the record."""
    device = torch.device(args.device)
    config, overrides = CONFIGS[args.mode]
    with tempfile.TemporaryDirectory() as run_dir:
        task, loaded = cpu_task(config, [*overrides, *args.override], args.data_root, Path(run_dir), device, args.precision)
        problems = mismatches(task.cfg, args.mode)
        if problems:
            print(f"bench super_resolution --against official: the official step cannot do {'; '.join(problems)}",
                  file=sys.stderr)
            raise SystemExit(2)
        flags = official_pcl.official_flags(task.cfg, args.mode, loaded.run.grad_clip_value, device.type == "cuda")
        trainer, data = official_pcl.official_trainer(args.official, flags)
        official_pcl.copy_generator(task.generator, trainer)
        batches = list(islice(task.batches(0), args.batches))
        first_ours = StepRunner(task, device, args.precision)(batches[0], 0, 0)  # same weights, same batch (a warm-up too)
        theirs = official_pcl.official_step(trainer, data)
        first_peer = theirs(batches[0])
        first_official = {entry["type"]: float(v) for entry, v in zip(trainer.loss.loss, trainer.loss.log[-1])}
        ours = our_step(task, device, args.precision)
        for i in range(args.warmup):  # untimed, beyond the first step
            ours(batches[i % len(batches)])
            theirs(batches[i % len(batches)])
        sides, retaining = {"ours": ours, "peer": theirs}, retaining_sides(loaded, device)
        rounds = alternate(sides, batches, args.repeats, args.steps, synced_clocks(device), retaining)
        profiles: dict[str, Any] | None = {} if args.profile else None
        for name, side in sides.items() if args.profile else ():
            settle(name, side, batches[0], retaining)  # each side profiled on its own allocator and thread, as timed
            profiles[name] = on_its_thread(name, retaining, profile, side, batches[0], device)
        bound = args.profile and device.type == "cpu" and args.precision == "fp32"  # the peak is fp32's on the CPU
        compute = compute_bound(ours, batches[0]) if bound else None
        as_user = {}
        if args.to_checkpoint and (args.mode, args.precision) == ("l1", "fp32"):  # the official side is fp32
            as_user = to_checkpoint(args, device, Path(run_dir))
    cfg = task.cfg
    layout = weight_layout([task.generator])
    fields = {
        "ours": ours_text(config, detail=f" ({'bf16 autocast' if args.precision == 'bf16' else 'fp32'}"
                                         + (", channels-last weights)" if layout == "channels_last" else ")")),
        "ours_layout": layout, **host_allocator_fields(retaining),
        "peer": (f"official PCL-SISR (github.com/Aitical/PCL-SISR {official_pcl.COMMIT[:7]} with docs/results/records/"
                 "official/pcl_sisr/pcl_sisr.patch): Trainer.train() on a one-batch epoch, fp32 (the code has no autocast)"),
        "mode": args.mode, "config": config, "overrides": [*overrides, *args.override], "official_flags": flags,
        "scale": cfg.scale, "blocks": cfg.model.n_resblocks, "feats": cfg.model.n_feats, "patch": cfg.data.patch_size,
        "batch": cfg.batch_size, "distinct_batches": len(batches),
        "ours_parameters": {name: sum(p.numel() for p in m.parameters()) for name, m in
                            (("generator", task.generator), ("discriminator", getattr(task, "embedder", None))) if m is not None},
        "official_parameters": official_pcl.official_counts(trainer),
        "first_step": {"ours": {k: float(v) for k, v in first_ours.items()}, "official": first_official},
        "official_precision": "fp32", "warmup_steps": 1 + args.warmup, **({"profile": profiles} if profiles else {}),
        **({"compute": compute} if compute else {}), **as_user,
        **({"cudnn": {"allow_tf32": torch.backends.cudnn.allow_tf32, "benchmark": torch.backends.cudnn.benchmark}}
           if device.type == "cuda" else {}),
    }
    measured = outcome(first_ours["l1"], first_peer, rounds, args.clock, tolerance=TOLERANCE[args.precision], term="l1")
    record = peer_record("super_resolution", args, argv, {}, [], fields, measured)
    del record["section"]  # the command's record has it (:func:`official_record`)
    return record


def official_record(args: argparse.Namespace, argv: Sequence[str]) -> dict[str, Any]:
    """The command's record: one comparison (:func:`against_official`) for each of ``--modes`` x ``--precisions``,
    in section ``super_resolution`` (``super_resolution+cuda`` on a GPU)."""
    runs = [argparse.Namespace(**{**vars(args), "mode": m, "precision": p})
            for m in args.modes.split(",") for p in args.precisions.split(",")]
    return {"section": "+".join(["super_resolution", *device_variant(args)]),
            "against": "official", "comparisons": [against_official(run, argv) for run in runs]}


def network(r: dict[str, Any]) -> str:
    """The record's EDSR in words."""
    return f"EDSR{'-baseline' if (r['blocks'], r['feats']) == (16, 64) else ''} x{r['scale']} ({r['blocks']} blocks of {r['feats']} channels)"


def same_work(r: dict[str, Any]) -> str:
    """The record's equal-work bullet: what is the same on both sides and, for ``pcl``, what is not."""
    ours, theirs = r["ours_parameters"], r["official_parameters"]
    text = (f"{network(r)} on both sides, our weights copied into the official one before either steps "
            f"({ours['generator']:,} parameters each; the official model also has {theirs['generator_frozen']} frozen ones in "
            f"its mean-shift convs); LR patch {r['patch']} (HR {r['patch'] * r['scale']}), batch {r['batch']}, "
            f"{r['distinct_batches']} distinct batch(es) of real T91 patches from our loader cycled by both; first-step L1 "
            f"{check_text(r['loss_check'])}")
    if r.get("ours_layout") == "channels_last":
        text += ("; our convolution weights are channels-last (`run.memory_format: auto` on the CPU, "
                 "`pipelines/memory_format.py`), the official network's as built (NCHW)")
    if r["mode"] != "pcl":
        return text
    first = r["first_step"]
    cl = next(v for k, v in first["official"].items() if "CL" in k)
    return (text + f". PCL as released on both sides: D steps on the dual contrastive loss, the term is computed "
            f"without gradient into G (so G's update is L1's), own-image negatives; D {ours['discriminator']:,} parameters "
            f"(official {theirs['discriminator']:,}: its convolutions have no bias, each feeds a BatchNorm). Not the same: "
            "the random variants; the D batches (official: one pass per variant, the upsampled LR not among D's fakes; "
            "ours: reals in one pass and fakes with the upsampled LR in another, the embeddings in three passes, SR, "
            "positives, negatives), so BatchNorm statistics differ; the LR upsampling (official F.interpolate bicubic, "
            "ours MATLAB imresize); the official step also runs D on SR and HR for an adversarial term it drops "
            "(--no_ad_loss) and runs every D pass to its head where ours stops at the embedding block; it clips "
            "gradient values at 1 (--gclip), which the bench's Step does not. First-step weighted contrastive term: "
            f"ours {first['ours']['contrastive']:.4f}, official {cl:.4f}")


def profile_note(r: dict[str, Any]) -> str:
    """Where the time goes: both sides' convolution share and largest operators (markdown)."""
    ours, peer = r["profile"]["ours"], r["profile"]["peer"]
    cuda = r["device"].startswith("cuda")
    unit, digits = ("GPU time of the kernels each operator launched", 1) if cuda else ("CPU self time", 0)
    rows = ["| # | ours: operator | ms | share | official: operator | ms | share |", "|---|---|---|---|---|---|---|"]
    rows += [f"| {i + 1} | `{a['op']}` | {a['ms']:.{digits}f} | {a['share']:.0%} | `{b['op']}` | {b['ms']:.{digits}f} | "
             f"{b['share']:.0%} |" for i, (a, b) in enumerate(zip(ours["top"], peer["top"]))]
    return (f"\nWhere the time goes (`torch.profiler`, one more step per side, {unit}): convolutions "
            f"(forward and backward) take {ours['conv_share']:.0%} of ours ({ours['total_ms']:.{digits}f} ms in all) and "
            f"{peer['conv_share']:.0%} of the official step ({peer['total_ms']:.{digits}f} ms); the largest operators:\n\n"
            + "\n".join(rows) + ceiling_text(r))


def render_official(r: dict[str, Any]) -> str:
    """The page section of an ``--against official`` record (markdown); a record's ``note`` ends it when it has no
    profile."""
    what = "L1 + PCL" if r["mode"] == "pcl" else "L1"
    title = (f"super_resolution: our {network(r).split(' (')[0]} {what} step vs the official PCL-SISR "
             f"({r['device']}, ours {r['precision']}, official {r['official_precision']})")
    unit, digits = ("ms", 1) if r["device"].startswith("cuda") else ("s", 2)
    return comparison_section(r, title, same_work(r), unit=unit, digits=digits, note=profile_note(r) if "profile" in r else r.get("note"))


def render_record(record: dict[str, Any]) -> str:
    """The page section of the command's record: each comparison's (:func:`render_official`) in turn."""
    return "\n\n".join(render_official(c) for c in record["comparisons"])


def official_main(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """``--against official``: one record of every mode x precision on the device; ``--report``: the record at
    ``--output``, or every kept one, into the page."""
    args.threads = 1 if args.threads is None else args.threads
    args.steps = args.steps or 2
    if args.report:
        for path in [args.output] if args.output else sorted(RECORDS.glob("super_resolution_official*.json")):
            peer_main(argparse.Namespace(**{**vars(args), "output": path}), argv, official_record, render_record)
        return 0
    if not (args.official / "src" / "option.py").is_file():
        print(f"bench super_resolution --against official: no official code at {args.official} (--official); "
              "docs/results/records/official/pcl_sisr/export_pcl_sisr.sh makes it", file=sys.stderr)
        return 2
    if args.device == "cuda" and not torch.cuda.is_available():
        print("bench super_resolution --against official: --device cuda but torch.cuda.is_available() is False", file=sys.stderr)
        return 2
    args.device = pick_device(args.device).type
    args.clock = args.clock or ("wall" if args.device == "cuda" else "cpu")  # a process waiting on a GPU: not its CPU time
    args.warmup = (3 if args.device == "cuda" else 0) if args.warmup is None else args.warmup
    args.output = args.output or RECORDS / ("_".join(["super_resolution_official", *device_variant(args)]) + ".json")
    return peer_main(args, argv, official_record, render_record)

def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    args.data_root = str(args.data_root or default_data_root())
    if args.against or args.report:
        return official_main(args, argv)
    args.steps, args.warmup = args.steps or 5, 1 if args.warmup is None else args.warmup
    if args.threads:
        torch.set_num_threads(args.threads)
    data_root = Path(args.data_root)
    if args.ssim:
        row = ssim_timing(data_root, args.ssim, args.scale)
        print("| set | images | ssim_y CPU s | direct window CPU s | direct / ours | kornia CPU s | kornia / ours "
              "| max diff direct | max diff kornia |\n|---|---|---|---|---|---|---|---|---|")
        print(f"| {row['set']} x{args.scale} | {row['images']} | {row['ours_cpu_s']:.2f} | {row['direct_cpu_s']:.2f} | "
              f"{row['direct_over_ours']:.2f} | {row['kornia_cpu_s']:.2f} | {row['kornia_over_ours']:.2f} | "
              f"{row['max_diff_direct']:.1e} | {row['max_diff_kornia']:.1e} |")
        write_output(args.output, row)
        return 0
    device = pick_device(args.device, 0)
    rows = [measure(m, p, args, device, data_root)
            for m in args.modes.split(",") for p in args.precisions.split(",")]
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU {platform.processor() or platform.machine()}"
    print(f"device: {name}, torch {torch.__version__}, threads {torch.get_num_threads()}, "
          f"x{args.scale}, LR patch {args.patch}, batch {args.batch}, {args.steps} timed steps")
    print("| mode | precision | s/step | patches/s | CPU s/step |\n|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['mode']} | {r['precision']} | {r['seconds_per_step']:.3f} | {r['patches_per_second']:.1f} | {r['cpu_seconds_per_step']:.3f} |")
    write_output(args.output, {"device": name, "threads": torch.get_num_threads(), "rows": rows})
    return 0
