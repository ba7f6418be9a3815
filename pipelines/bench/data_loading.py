"""``contrasuite bench data_loading``: training images per second read from disk with 0, 2 and 4 workers.

The on-disk pipeline of :mod:`contrasuite.domains.image_loading` (decode, composite on white,
albumentations ``RandomResizedCrop`` + flip on the CPU, collate) over real photos: the B100 test set
(100 PNGs of 481 x 321, extracted once from ``<data root>/sr/B100.tar.gz`` into the cache), cycled for
``--images`` images in batches of ``--batch``. Each worker count runs in this process one after the
other, after one untimed warm-up epoch (starting the workers); the ratio is against 0 workers (decoding
in the training process), measured in the same run. Wall time: workers are other processes.

    contrasuite bench data_loading --workers 0,2,4 --images 800 --batch 32 --size 224
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from pathlib import Path
from typing import Any, Sequence

import torch

from contrasuite.domains.archives import cache_root, extract_once
from contrasuite.domains.image_loading import EpochBatches, OnDiskImages, albumentations_transform, epoch_batches, image_loader
from contrasuite.pipelines.bench import write_output
from contrasuite.pipelines.config import default_data_root


def b100_files(data_root: Path) -> list[Path]:
    folder = extract_once(data_root / "sr" / "B100.tar.gz", cache_root() / "sr" / "B100")
    return sorted(folder.rglob("*.png"))


def images_per_second(files: list[Path], workers: int, images: int, batch: int, size: int) -> float:
    import albumentations as A

    transform = albumentations_transform(A.RandomResizedCrop(size=(size, size), scale=(0.2, 1.0)), A.HorizontalFlip())
    dataset = OnDiskImages(files, None, transform, seed=0)
    order = [[i % len(files) for i in range(start, min(start + batch, images))] for start in range(0, images, batch)]
    loader = image_loader(dataset, EpochBatches(lambda epoch: order), workers, torch.device("cpu"))
    for _ in epoch_batches(loader, 0):  # warm-up: starts the persistent workers, fills the page cache
        pass
    started = time.perf_counter()
    seen = sum(x.shape[0] for x, _ in epoch_batches(loader, 1))
    return seen / (time.perf_counter() - started)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="contrasuite bench data_loading", description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="0,2,4")
    parser.add_argument("--images", type=int, default=800)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--size", type=int, default=224, help="crop side")
    parser.add_argument("--data-root", default=None)
    parser.add_argument("--output", type=Path, default=None, help="also write the rows as JSON")
    args = parser.parse_args(argv)
    files = b100_files(Path(args.data_root or default_data_root()))
    rows: list[dict[str, Any]] = []
    for workers in (int(w) for w in args.workers.split(",")):
        rows.append({"workers": workers, "images_per_second": images_per_second(files, workers, args.images, args.batch, args.size)})
    base = next((r["images_per_second"] for r in rows if r["workers"] == 0), None)
    for r in rows:
        r["vs_0_workers"] = r["images_per_second"] / base if base else float("nan")
    print(f"B100 photos ({len(files)} files), {args.images} images in batches of {args.batch}, crops {args.size}, "
          f"{os.cpu_count()} CPU cores, {platform.processor() or platform.machine()}")
    print("| workers | images/s | vs 0 workers |\n|---|---|---|")
    for r in rows:
        print(f"| {r['workers']} | {r['images_per_second']:.0f} | {r['vs_0_workers']:.2f} |")
    write_output(args.output, {"cores": os.cpu_count(), "rows": rows})
    return 0
