"""Opening an image file (or the bytes of an archive member) so that a bad one names itself, and
bringing any PIL mode to 8 bits per channel without clipping.

Every domain decodes images through :func:`open_image`: PIL's many exception types for a truncated,
empty or non-image file become one :class:`UnreadableImage` (a ``CorruptData``) that names the file,
which the CLI reports in one line with exit code 2. Every domain then converts through :func:`to_rgb8`
(or :func:`to_grey8`): PIL's own ``convert("RGB")`` clips a 16-bit, 32-bit or float image at 255 instead of scaling it.

The inference commands (``upscale``, ``translate``, ``retrieve``) check their inputs with :func:`require_image`
(one input: a :class:`DataError`, exit 2) and :func:`readable_images` (a folder: each unreadable file skipped with
one warning line naming it, and a count).
"""

from __future__ import annotations

import io
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
from PIL import Image

from contrasuite.core.task.errors import CorruptData, DataError

HIGH_DEPTH_MODES = frozenset({"I;16", "I;16L", "I;16B", "I;16N", "I", "F"})
"""Single-channel modes with more than 8 bits, which PIL's ``convert`` clips at 255."""

GREY_MODES = HIGH_DEPTH_MODES | {"1", "L"}
"""Single-channel (greyscale) modes: :func:`to_grey8` takes these."""


class UnreadableImage(CorruptData):
    """An image file PIL cannot decode; ``reason`` is PIL's own words, on one line."""

    def __init__(self, label: object, reason: str) -> None:
        super().__init__(f"{label}: not a readable image ({reason})")
        self.reason = reason


@contextmanager
def _named_errors(label: object) -> Iterator[None]:
    """Any exception PIL raises while reading becomes :class:`UnreadableImage` naming ``label``."""
    try:
        yield
    except Exception as err:  # noqa: BLE001 - PIL raises many types for a bad file; each means "unusable"
        raise UnreadableImage(label, " ".join(str(err).split()) or type(err).__name__) from None


def open_image(source: Path | bytes, name: str | Path | None = None) -> Image.Image:
    """The fully decoded image at ``source`` (a path, or bytes named ``name``); :class:`UnreadableImage` if not."""
    with _named_errors(name if name is not None else source):
        image = Image.open(io.BytesIO(source) if isinstance(source, bytes) else source)
        image.load()
    return image


def image_size(path: Path) -> tuple[int, int]:
    """``(width, height)`` of the image file at ``path`` from its header alone; :class:`UnreadableImage` if not."""
    with _named_errors(path), Image.open(path) as image:
        return image.size


def _uint16_to_uint8(values: np.ndarray) -> np.ndarray:
    """``round(v * 255 / 65535)`` for integers ``v`` in ``0..65535`` (65535 = 257 * 255)."""
    return ((values.astype(np.int64) + 128) // 257).astype(np.uint8)


def _high_depth_to_uint8(values: np.ndarray, mode: str) -> np.ndarray:
    """The 8-bit values of a :data:`HIGH_DEPTH_MODES` image's array (the rules of :func:`to_grey8`)."""
    if mode.startswith("I;16"):
        return _uint16_to_uint8(values)
    if mode == "I":
        if values.size == 0 or (values.min() >= 0 and values.max() <= 65535):
            return _uint16_to_uint8(values)
        low, high = np.iinfo(np.int32).min, np.iinfo(np.int32).max
        return np.round((values.astype(np.float64) - low) * (255 / (high - low))).astype(np.uint8)
    top = 1.0 if values.size == 0 or values.max() <= 1 else 255.0
    return np.round(np.clip(values.astype(np.float64) * (255 / top), 0, 255)).astype(np.uint8)


def to_grey8(image: Image.Image) -> Image.Image:
    """A :data:`GREY_MODES` image as 8-bit ``L``, scaled rather than clipped:

    * ``1`` and ``L``: as PIL converts them (0/255, unchanged);
    * ``I;16*`` (16-bit PNG, TIFF, PGM): ``v * 255 / 65535``, rounded;
    * ``I`` (32-bit int): 16-bit data when every value lies in ``0..65535`` (as above); otherwise the
      whole int32 range maps linearly onto ``0..255``;
    * ``F`` (float): ``[0, 1]`` data when the maximum is at most 1, else ``[0, 255]`` data; values
      outside that range are clipped to it.
    """
    if image.mode not in GREY_MODES:
        raise ValueError(f"to_grey8 takes a single-channel mode {sorted(GREY_MODES)}, not {image.mode!r}")
    if image.mode in HIGH_DEPTH_MODES:
        return Image.fromarray(_high_depth_to_uint8(np.asarray(image), image.mode), "L")
    return image.convert("L")


def to_rgb8(image: Image.Image) -> Image.Image:
    """Any image as 8-bit ``RGB``: greyscale modes scaled by :func:`to_grey8`, transparency (an alpha
    channel, or a palette's or colour key's) composited on white, other modes (``P``, ``CMYK``,
    ``YCbCr``, ...) converted by PIL. An 8-bit image without transparency gives ``convert("RGB")``'s bytes."""
    if image.mode in HIGH_DEPTH_MODES:
        image = to_grey8(image)
    if image.has_transparency_data:
        canvas = Image.new("RGBA", image.size, (255, 255, 255, 255))
        canvas.alpha_composite(image.convert("RGBA"))
        image = canvas
    return image.convert("RGB")


def rgb_on_white(image: Image.Image, size: int | None = None) -> np.ndarray:
    """``[H, W, 3]`` uint8 by :func:`to_rgb8` (transparency on white), optionally resized (bicubic) to ``size`` square."""
    rgb = to_rgb8(image)
    if size is not None and rgb.size != (size, size):
        rgb = rgb.resize((size, size), Image.BICUBIC)
    return np.array(rgb, dtype=np.uint8)  # a writable copy (torch.from_numpy shares it)


def read_rgb_array(path: Path, size: int | None = None) -> np.ndarray:
    """The image file at ``path`` as :func:`rgb_on_white` returns it; a bad file raises DataError naming it."""
    with open_image(path) as image:
        return rgb_on_white(image, size)


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
