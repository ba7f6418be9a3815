"""Opening an image file (or the bytes of an archive member) so that a bad one names itself.

Every domain decodes images through :func:`open_image`: PIL's many exception types for a truncated,
empty or non-image file become one :class:`DataError` that names the file, which the CLI reports in
one line with exit code 2.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
from PIL import Image

from contrasuite.domains.errors import DataError


class UnreadableImage(DataError):
    """An image file PIL cannot decode; ``reason`` is PIL's own words, on one line."""

    def __init__(self, label: object, reason: str) -> None:
        super().__init__(f"{label}: not a readable image ({reason})")
        self.reason = reason


def open_image(source: Path | bytes, name: str | Path | None = None) -> Image.Image:
    """The fully decoded image at ``source`` (a path, or bytes named ``name``); :class:`UnreadableImage` if not."""
    label = name if name is not None else source
    try:
        image = Image.open(io.BytesIO(source) if isinstance(source, bytes) else source)
        image.load()
    except Exception as err:  # noqa: BLE001 - PIL raises many types for a bad file; each means "unusable"
        raise UnreadableImage(label, " ".join(str(err).split()) or type(err).__name__) from None
    return image


def rgb_on_white(image: Image.Image, size: int | None = None) -> np.ndarray:
    """``[H, W, 3]`` uint8: transparency composited on white, optionally resized (bicubic) to ``size`` square."""
    rgba = image.convert("RGBA")
    canvas = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
    canvas.alpha_composite(rgba)
    rgb = canvas.convert("RGB")
    if size is not None and rgb.size != (size, size):
        rgb = rgb.resize((size, size), Image.BICUBIC)
    return np.array(rgb, dtype=np.uint8)  # a writable copy (torch.from_numpy shares it)


def read_rgb_array(path: Path, size: int | None = None) -> np.ndarray:
    """The image file at ``path`` as :func:`rgb_on_white` returns it; a bad file raises DataError naming it."""
    with open_image(path) as image:
        return rgb_on_white(image, size)
