"""Input images of the inference commands (``upscale``, ``translate``, ``retrieve``), checked before use.

A folder command skips a file that is not a readable image with one warning line naming it and says
how many it skipped; a single input that is not a readable image is a :class:`DataError` (exit 2).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Sequence

from contrasuite.core.task.errors import DataError
from contrasuite.domains.images import UnreadableImage, open_image


def image_problem(path: Path) -> str | None:
    """Why ``path`` is not a readable image (PIL's own words), or None when it decodes."""
    try:
        open_image(path).close()
    except UnreadableImage as err:
        return err.reason
    return None


def require_image(path: Path, what: str) -> Path:
    """``path`` if it is a readable image, else a DataError naming it (``what``: the argument's name)."""
    problem = image_problem(path) if path.is_file() else "no such file"
    if problem:
        raise DataError(f"{what} {path} is not a readable image: {problem}")
    return path


def readable_images(paths: Sequence[Path], command: str) -> list[Path]:
    """The readable images of ``paths``; a warning line for each other one and a count at the end."""
    kept = []
    for path in paths:
        problem = image_problem(path)
        if problem:
            print(f"contrasuite {command}: skipping {path}: not a readable image ({problem})", file=sys.stderr)
        else:
            kept.append(path)
    if len(kept) < len(paths):
        print(f"contrasuite {command}: skipped {len(paths) - len(kept)} of {len(paths)} files", file=sys.stderr)
    if not kept:
        raise DataError(f"none of the {len(paths)} input files is a readable image")
    return kept
