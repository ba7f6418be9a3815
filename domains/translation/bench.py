"""``contrasuite bench translation``: training iterations per second of CUT (and FastCUT, the GAN alone).

Settings (``--setting``, repeatable):

* ``paper``: 256 x 256 crops, batch 1, ResNet-9-block generator (ngf 64), 70x70 PatchGAN (ndf 64),
  256 patches at layers 0, 4, 8, 12, 16 -- the paper's horse2zebra setting;
* ``emoji``: ``configs/translation/cut_emoji.yaml`` (64 x 64, batch 1, 4 blocks);
* ``emoji_reduced``: ``configs/translation/reduced_cut_emoji.yaml`` (64 x 64, batch 4, ngf 32).

A whole training step runs as in training -- the task's ``train_step`` with the engine's ``Step``
(discriminator, generator, head; bf16 autocast by default) -- on random images of the right size
(``trainA/``/``trainB/`` written to a temporary folder), after ``--warmup`` steps; iterations/s is
``steps / wall time`` of the timed steps; ``cpu_s_per_it`` is the process CPU time per step (all
threads), a proxy for an idle machine when others share the CPU, and ``load_avg_1min`` says how busy it was. Output: one JSON line per row (and ``--json FILE``, rewritten
after each row). On a shared machine the wall time includes other processes' load: report it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from PIL import Image

from contrasuite.domains.translation.data import DataConfig
from contrasuite.domains.translation.task import TranslationConfig, TranslationTask
from contrasuite.pipelines.api import StepRunner, pick_device, setup_task

SETTINGS = {
    # name: (crop, batch, ngf, n_blocks, ndf, num_patches, nce layers)
    "paper": (256, 1, 64, 9, 64, 256, [0, 4, 8, 12, 16]),
    "emoji": (64, 1, 64, 4, 64, 256, [0, 4, 8, 12, 15]),
    "emoji_reduced": (64, 4, 32, 4, 32, 128, [0, 4, 8, 12, 15]),
}
VARIANTS = {"cut": dict(weight=1.0, identity=True, flip_equivariance=False),
            "fastcut": dict(weight=10.0, identity=False, flip_equivariance=True),
            "gan": dict(weight=0.0)}


def make_task(setting: str, variant: str, folder: Path, device: torch.device, precision: str) -> TranslationTask:
    crop, batch, ngf, blocks, ndf, patches, layers = SETTINGS[setting]
    cfg = TranslationConfig()
    cfg.data = DataConfig(kind="folders", path=str(folder), crop_size=crop, batch_size=batch, steps_per_epoch=10_000)
    cfg.generator.ngf, cfg.generator.n_blocks, cfg.discriminator.ndf = ngf, blocks, ndf
    cfg.nce.num_patches, cfg.nce.layers = patches, layers
    for k, v in VARIANTS[variant].items():
        setattr(cfg.nce, k, v)
    return setup_task(TranslationTask(), cfg, device=device, precision=precision, run_dir=folder, data_root=folder)


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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="contrasuite bench translation", description=__doc__.splitlines()[0])
    parser.add_argument("--setting", action="append", choices=sorted(SETTINGS), help="default: all")
    parser.add_argument("--variant", action="append", choices=sorted(VARIANTS), help="default: cut")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--precision", choices=("bf16", "fp16", "fp32"), default="bf16")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: leave as is)")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows to this file")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = pick_device(args.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for setting in args.setting or list(SETTINGS):
            crop = SETTINGS[setting][0]
            folder = Path(tmp) / setting
            rng = np.random.default_rng(0)
            for side in ("trainA", "trainB"):
                (folder / side).mkdir(parents=True)
                for i in range(4):
                    Image.fromarray(rng.integers(0, 256, (crop, crop, 3), dtype=np.uint8)).save(folder / side / f"{i}.png")
            for variant in args.variant or ["cut"]:
                torch.manual_seed(0)
                task = make_task(setting, variant, folder, device, args.precision)
                its, cpu_s = measure(task, device, args.precision, args.warmup, args.steps)
                crop, batch = SETTINGS[setting][:2]
                row = {"setting": setting, "variant": variant, "image": crop, "batch": batch, "precision": args.precision,
                       "device": name, "it_per_s": round(its, 3), "images_per_s": round(its * batch, 3),
                       "cpu_s_per_it": round(cpu_s, 3), "load_avg_1min": round(os.getloadavg()[0], 1),
                       "steps": args.steps, "torch": torch.__version__}
                rows.append(row)
                print(json.dumps(row), flush=True)
                if args.json:  # after every row, so a long benchmark keeps what it measured
                    args.json.parent.mkdir(parents=True, exist_ok=True)
                    args.json.write_text(json.dumps(rows, indent=2))
    return 0
