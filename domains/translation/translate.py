"""``contrasuite translate RUN_DIR INPUT_DIR OUTPUT_DIR``: apply a trained translation generator to a folder.

The generator is rebuilt from the run's ``config.yaml`` and loaded from ``checkpoints/best.pt``
(``--checkpoint last`` for the last one; its weight average when the run kept one, ``config.ema``);
``RUN_DIR`` may also be what ``contrasuite export`` wrote (the folder, or its ``model.onnx`` /
``model.torchscript.pt`` / ``model.safetensors``).
Every image in ``INPUT_DIR`` (transparency composited on white) is translated at its own size
(reflection-padded to a multiple of 4 and cropped back) and written as ``OUTPUT_DIR/<stem>.png``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

import torch
from PIL import Image
from torch import nn

from contrasuite.core.task.errors import DataError, one_line
from contrasuite.domains.checkpoint_fit import fitting, require_task
from contrasuite.domains.exporting import export_folder, load_exported
from contrasuite.domains.images import readable_images
from contrasuite.domains.init_from import checkpoint_file
from contrasuite.domains.translation.data import list_images, read_rgb, to_float, to_uint8
from contrasuite.domains.translation.export import generator_from_config, trained_generator
from contrasuite.domains.translation.networks import translate_any_size
from contrasuite.pipelines.api import CheckpointError, load_checkpoint, load_config, pick_device

COMMAND = "translate"


def load_generator(run_dir: Path, which: str = "best") -> nn.Module:
    """The trained generator of a ``translation`` run (fp32, eval mode, CPU), or of its export."""
    run_dir = Path(run_dir)
    if not (run_dir / "config.yaml").is_file() and export_folder(run_dir) is not None:
        return load_exported(run_dir, "translation", generator_from_config)[0]
    loaded = load_config(run_dir / "config.yaml")
    require_task(run_dir, loaded.task_name, "translation", COMMAND)
    file = checkpoint_file(run_dir, which)
    modules = load_checkpoint(file)["modules"]
    with fitting(file, modules, "generator"):
        return trained_generator(loaded.config, modules)[0]


def output_folder(path: Path) -> Path:
    """``OUTPUT_DIR`` as given, refused (before anything is written) when it or a folder above it is a file."""
    existing = next((p for p in (path, *path.parents) if p.exists()), path)
    if existing.exists() and not existing.is_dir():
        where = "is a file" if existing == path else f"lies under {existing}, a file"
        raise NotADirectoryError(f"OUTPUT_DIR {path} {where}; give a folder (it is created when missing)")
    return path


@torch.no_grad()
def translate_folder(generator: nn.Module, src: Path, dst: Path, device: torch.device) -> list[Path]:
    """Translate every readable image of ``src`` into ``dst`` (others skipped, with a warning); the written paths."""
    files = readable_images(list_images(src), "translate")
    generator = generator.to(device)
    dst.mkdir(parents=True, exist_ok=True)
    written = []
    for path in files:
        x = to_float(read_rgb(path))[None].to(device)
        y = to_uint8(translate_any_size(generator, x))[0].permute(1, 2, 0).cpu().numpy()
        out = dst / f"{path.stem}.png"
        Image.fromarray(y).save(out)
        written.append(out)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="contrasuite translate", description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("input_dir", type=Path, help="a folder of images")
    parser.add_argument("output_dir", type=Path)
    parser.add_argument("--checkpoint", choices=("best", "last"), default="best")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    args = parser.parse_args(argv)
    try:
        output = output_folder(args.output_dir)
        generator = load_generator(args.run_dir, args.checkpoint)
        written = translate_folder(generator, args.input_dir, output, pick_device(args.device))
    except (FileNotFoundError, NotADirectoryError, ValueError, CheckpointError, DataError) as err:
        print(f"contrasuite translate: {one_line(err)}", file=sys.stderr)
        return 2
    print(f"translated {len(written)} images into {args.output_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
