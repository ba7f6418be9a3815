"""Opening an image file (or the bytes of an archive member) so that a bad one names itself.

Every domain decodes images through :func:`open_image`: PIL's many exception types for a truncated,
empty or non-image file become one :class:`DataError` that names the file, which the CLI reports in
one line with exit code 2.
"""

from __future__ import annotations

import io
from pathlib import Path

from PIL import Image

from contrasuite.domains.errors import DataError


def open_image(source: Path | bytes, name: str | Path | None = None) -> Image.Image:
    """The fully decoded image at ``source`` (a path, or bytes named ``name``); DataError if unreadable."""
    label = name if name is not None else source
    try:
        image = Image.open(io.BytesIO(source) if isinstance(source, bytes) else source)
        image.load()
    except Exception as err:  # noqa: BLE001 - PIL raises many types for a bad file; each means "unusable"
        raise DataError(f"{label}: not a readable image ({' '.join(str(err).split()) or type(err).__name__})") from None
    return image
