"""``contrasuite retrieve RUN_DIR QUERY_IMAGE GALLERY_DIR``: the nearest gallery images of a query.

The embedding net of a ``metric_learning`` run is rebuilt from its ``config.yaml`` and loaded from
``checkpoints/best.pt`` (``--checkpoint last``); ``RUN_DIR`` may also be what ``contrasuite export``
wrote (the folder, or its ``model.onnx`` / ``model.torchscript.pt`` / ``model.safetensors``). Every image
under ``GALLERY_DIR`` (recursively) is embedded; the top ``--top`` matches are printed as ``rank score
path`` (cosine similarity, or the negative Poincare distance for a hyperbolic run), and a PNG strip
(query, then the matches) is written to ``--out`` (default ``RUN_DIR/retrievals/<query name>.png``, or
the export folder's ``retrievals/``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

from PIL import Image, ImageDraw

from contrasuite.core.task.errors import DataError, one_line
from contrasuite.domains.checkpoint_fit import fitting, require_task
from contrasuite.domains.exporting import export_folder
from contrasuite.domains.images import readable_images, require_image
from contrasuite.domains.init_from import checkpoint_file
from contrasuite.domains.metric_learning.images import read_rgb
from contrasuite.domains.metric_learning.inference import Embedder
from contrasuite.pipelines.api import CheckpointError, load_checkpoint, load_config

COMMAND = "retrieve"

SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".webp")
TILE = 96


def gallery_files(folder: Path) -> list[Path]:
    if not folder.is_dir():
        raise FileNotFoundError(f"GALLERY_DIR {folder} is not a folder")
    files = sorted(p for p in folder.rglob("*") if p.suffix.lower() in SUFFIXES and p.is_file())
    if not files:
        raise FileNotFoundError(f"GALLERY_DIR {folder} holds no images ({', '.join(SUFFIXES)})")
    return files


def load_embedder(run_dir: Path, which: str = "best") -> Embedder:
    """A run's embedder, or an export's (its folder or model file)."""
    if not (run_dir / "config.yaml").is_file() and export_folder(run_dir) is not None:
        return Embedder.from_export(run_dir)
    loaded = load_config(run_dir / "config.yaml")
    require_task(run_dir, loaded.task_name, "metric_learning", COMMAND)
    file = checkpoint_file(run_dir, which)
    modules = load_checkpoint(file)["modules"]
    with fitting(file, modules, "model"):
        return Embedder.from_run(loaded.config, modules)


def strip(query: Path, matches: Sequence[tuple[Path, float]], out: Path) -> None:
    """Query tile (blue frame) then one tile per match with its score."""
    canvas = Image.new("RGB", (TILE * (len(matches) + 1), TILE + 16), "white")
    draw = ImageDraw.Draw(canvas)
    for i, (path, score) in enumerate([(query, None), *matches]):
        tile = Image.fromarray(read_rgb(path, TILE - 8).permute(1, 2, 0).numpy())
        canvas.paste(tile, (i * TILE + 4, 4))
        if score is None:
            draw.rectangle([i * TILE + 1, 1, i * TILE + TILE - 2, TILE - 2], outline=(40, 90, 220), width=3)
            draw.text((i * TILE + 4, TILE), "query", fill="black")
        else:
            draw.text((i * TILE + 4, TILE), f"{i}: {score:.3f}", fill="black")
    out.parent.mkdir(parents=True, exist_ok=True)
    canvas.save(out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="contrasuite retrieve", description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("query", type=Path)
    parser.add_argument("gallery", type=Path)
    parser.add_argument("--top", type=int, default=8)
    parser.add_argument("--checkpoint", choices=("best", "last"), default="best")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    try:
        require_image(args.query, "QUERY_IMAGE")
        files = [p for p in gallery_files(args.gallery) if p.resolve() != args.query.resolve()]
        files = readable_images(files, "retrieve")
        embedder = load_embedder(args.run_dir, args.checkpoint)
    except (FileNotFoundError, ValueError, DataError, CheckpointError) as err:
        print(f"contrasuite retrieve: {one_line(err)}", file=sys.stderr)
        return 2
    query = embedder.embed_paths([args.query])
    scores = embedder.score(query, embedder.embed_paths(files))[0]
    top = scores.topk(min(args.top, len(files)))
    matches = [(files[i], float(s)) for s, i in zip(top.values.tolist(), top.indices.tolist())]
    for rank, (path, score) in enumerate(matches, 1):
        print(f"{rank}\t{score:.4f}\t{path}")
    out = args.out or (export_folder(args.run_dir) or args.run_dir) / "retrievals" / f"{args.query.stem}.png"
    strip(args.query, matches, out)
    print(f"strip: {out}")
    return 0
