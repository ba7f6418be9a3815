"""``contrasuite upscale RUN_DIR INPUT OUTPUT``: super-resolve an image or a folder with a trained run.

The generator is rebuilt from the run's ``config.yaml`` and loaded from ``checkpoints/best.pt``
(``--checkpoint last`` for the last one); ``RUN_DIR`` may also be what ``contrasuite export`` wrote (the
folder, or its ``model.onnx`` / ``model.torchscript.pt`` / ``model.safetensors``). Large images are processed in overlapping LR tiles
(``--tile``, ``--overlap``; see :mod:`contrasuite.domains.super_resolution.inference`), so memory
stays bounded whatever the image size. Greyscale inputs come out greyscale; alpha is dropped.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from PIL import Image

from contrasuite.domains.checkpoint_fit import fitting, require_task
from contrasuite.domains.exporting import export_folder, load_exported
from contrasuite.domains.images import GREY_MODES, open_image, readable_images, require_image, to_rgb8
from contrasuite.domains.init_from import checkpoint_file
from contrasuite.domains.super_resolution.inference import upscale
from contrasuite.domains.super_resolution.networks import EDSR
from contrasuite.pipelines.api import load_checkpoint, load_config, pick_device

COMMAND = "upscale"

SUFFIXES = (".png", ".bmp", ".jpg", ".jpeg", ".tif", ".tiff", ".webp")


def load_generator(run_dir: Path, which: str = "best") -> tuple[torch.nn.Module, int]:
    """The trained EDSR of a ``super_resolution`` run or export (fp32, eval mode, CPU) and its scale."""
    run_dir = Path(run_dir)
    if not (run_dir / "config.yaml").is_file() and export_folder(run_dir) is not None:
        model, config = load_exported(run_dir, "super_resolution",
                                      lambda c: EDSR(c["scale"], c["n_resblocks"], c["n_feats"], c["res_scale"]))
        return model, int(config["scale"])
    loaded = load_config(run_dir / "config.yaml")
    require_task(run_dir, loaded.task_name, "super_resolution", COMMAND)
    cfg = loaded.config
    file = checkpoint_file(run_dir, which)
    modules = load_checkpoint(file)["modules"]
    model = EDSR(cfg.scale, cfg.model.n_resblocks, cfg.model.n_feats, cfg.model.res_scale)
    with fitting(file, modules, "generator"):
        model.load_state_dict(modules["generator"])
    return model.eval(), cfg.scale


def read_image(path: Path) -> tuple[torch.Tensor, bool]:
    """``([1, 3, H, W] in [0, 1], was_greyscale)``."""
    with open_image(path) as im:
        grey = im.mode in GREY_MODES or im.mode == "LA"
        arr = np.asarray(to_rgb8(im), dtype=np.uint8)
    return torch.from_numpy(arr.copy()).permute(2, 0, 1)[None].float() / 255.0, grey


def write_image(image: torch.Tensor, path: Path, grey: bool) -> None:
    """Save ``[1, 3, H, W]`` in ``[0, 1]`` as 8-bit (the channel mean when the input was greyscale)."""
    img = image[0].mean(dim=0, keepdim=True) if grey else image[0]
    arr = (img.clamp(0, 1) * 255).round().to(torch.uint8).permute(1, 2, 0).cpu().numpy()
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(arr[..., 0] if grey else arr).save(path)


def _jobs(src: Path, dst: Path) -> list[tuple[Path, Path]]:
    """``(input, output)`` pairs: each readable image of a folder (others skipped, with a warning), or the one image."""
    if src.is_dir():
        files = sorted(p for p in src.iterdir() if p.suffix.lower() in SUFFIXES)
        if not files:
            raise FileNotFoundError(f"INPUT folder {src} has no images ({', '.join(SUFFIXES)})")
        return [(p, dst / f"{p.stem}.png") for p in readable_images(files, "upscale")]
    if not src.is_file():
        raise FileNotFoundError(f"INPUT {src} is neither an image nor a folder")
    require_image(src, "INPUT")
    return [(src, dst / f"{src.stem}.png" if dst.is_dir() or dst.suffix == "" else dst)]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="contrasuite upscale", description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("input", type=Path, help="an image or a folder of images")
    parser.add_argument("output", type=Path, help="an image path (for one image) or a folder")
    parser.add_argument("--checkpoint", choices=("best", "last"), default="best")
    parser.add_argument("--tile", type=int, default=128, help="LR tile side; 0 = whole image at once")
    parser.add_argument("--overlap", type=int, default=40, help="LR context pixels around each tile (EDSR-baseline sees 36)")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    args = parser.parse_args(argv)
    device = pick_device(args.device, 0)
    jobs = _jobs(args.input, args.output)
    model, scale = load_generator(args.run_dir, args.checkpoint)
    model.to(device)
    for src, dst in jobs:
        lr, grey = read_image(src)
        sr = upscale(model, lr.to(device), scale, tile=args.tile or None, overlap=args.overlap)
        write_image(sr, dst, grey)
        print(f"{src} -> {dst} ({lr.shape[-1]}x{lr.shape[-2]} -> {sr.shape[-1]}x{sr.shape[-2]})", file=sys.stderr)
    return 0
