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
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path
from typing import Any, Sequence

import torch

from contrasuite.domains.super_resolution.task import SRConfig, SuperResolutionTask
from contrasuite.pipelines.api import StepRunner, default_data_root, pick_device, setup_task, write_output


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="contrasuite bench super_resolution", description=__doc__.splitlines()[0])
    p.add_argument("--precisions", default="fp32,bf16")
    p.add_argument("--modes", default="l1,pcl", help="l1 (EDSR-baseline + L1) and/or pcl (+ contrastive term)")
    p.add_argument("--scale", type=int, default=2)
    p.add_argument("--patch", type=int, default=48, help="LR patch side")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--steps", type=int, default=5, help="timed steps")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--ssim", default="", metavar="SET", help="time SSIM on this test set's bicubic images instead")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: leave as is)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--data-root", default=None, help="data root with sr/T91.tar.gz (default $CONTRASUITE_DATA or data)")
    p.add_argument("--output", type=Path, default=None, help="write the results as JSON here")
    return p


def measure(mode: str, precision: str, args: argparse.Namespace, device: torch.device, data_root: Path) -> dict[str, Any]:
    """Patches per second of one (mode, precision)."""
    cfg = SRConfig(scale=args.scale, contrastive=mode == "pcl", test_sets=[])
    cfg.data.patch_size, cfg.data.batch_size = args.patch, args.batch
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


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    data_root = Path(args.data_root or default_data_root())
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
