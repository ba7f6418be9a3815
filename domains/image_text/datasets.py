"""The image-text pairs the image_text configs read (``contrasuite data``; docs/data.md)."""

from __future__ import annotations

from typing import Any, Mapping

from contrasuite.domains.data_sources import EMOJI

DATASETS = (EMOJI,)


def uses(config: Mapping[str, Any]) -> tuple[str, ...]:
    """emoji for ``config.data.source: emoji`` (the default); a captions file of your own is not declared."""
    return (EMOJI.name,) if config.get("config", {}).get("data", {}).get("source", "emoji") == "emoji" else ()
