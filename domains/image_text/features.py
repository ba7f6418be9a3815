"""The frozen trunks' features of every image and caption, computed once and cached on disk.

With ``model.freeze_trunks`` a step trains only the heads, so the trunks run once over every image
(pairs and generated negatives, per style) and every caption and negative caption. Each tower's cache
file is keyed by the model settings that tower depends on (never the other tower's,
:data:`OTHER_TOWER`), the image network's tag, a digest of that trunk's weights and a digest of its
inputs (so of the data and the negatives settings); features are stored in fp16 and read back with
``weights_only=True``. Under several processes rank 0 computes a missing file and the others wait and
read it (:func:`~contrasuite.domains.disk_cache.shared_load_or_compute`).
"""

from __future__ import annotations

import hashlib
from contextlib import AbstractContextManager
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np
import torch
from torch import Tensor

from contrasuite.core.task.protocol import Progress, no_progress
from contrasuite.domains.archives import cache_root
from contrasuite.domains.disk_cache import key_digest, shared_load_or_compute
from contrasuite.domains.image_text.models import IMAGE_NETWORK, ModelConfig, frozen_trunk_state

WHAT = "image_text: the trunk-feature cache"
"""What a rebuilt cache file is called on stderr."""
OTHER_TOWER = {"images": {"text_model", "text_segments", "context_length"},
               "texts": {"image_weights", "image_size", "grid", "train_image_stages", "extra_image_stages"}}
"""Model settings a trunk's cached features do not depend on: the other tower's."""


def cache_folder(cache_dir: str | None) -> Path:
    """``image_text`` below the shared cache root (``config.cache_dir``, else ``$CONTRASUITE_CACHE``, else
    ``~/.cache/contrasuite``: :func:`contrasuite.domains.archives.cache_root`)."""
    return cache_root(cache_dir or "") / "image_text"


def cache_file(model: ModelConfig, cache_dir: str | None, kind: str, extra: Any) -> Path:
    """The cache file of one trunk's (``kind``: ``images`` or ``texts``) features of the inputs ``extra`` names."""
    settings = {k: v for k, v in asdict(model).items() if k not in OTHER_TOWER[kind]}
    if kind == "images":  # the network itself, not only its settings (issue 23 changed it)
        settings["network"] = IMAGE_NETWORK
    return cache_folder(cache_dir) / f"{kind}-{key_digest(kind, settings, extra)}.pt"


def weights_digest(model: Any, trunk: str) -> str:
    """A digest of the frozen tensors of ``model``'s ``trunk`` (``image_trunk`` or ``text_trunk``)."""
    h = hashlib.sha256()
    for key, value in frozen_trunk_state(model).items():
        if key.startswith(trunk + "."):
            h.update(key.encode())
            h.update(value.cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


@torch.no_grad()
def run_trunk(fn: Callable[[Any], Tensor], inputs: list | np.ndarray, batch_size: int,
              autocast: Callable[[], AbstractContextManager], progress: Progress = no_progress,
              desc: str = "trunk features") -> Tensor:
    """``fn`` over ``inputs`` in batches, as fp16 on the CPU; a bar of batches named ``desc``."""
    out = []
    starts = range(0, len(inputs), batch_size)
    for start in progress(starts, f"{desc} of {len(inputs)} inputs", total=len(starts)):
        chunk = inputs[start: start + batch_size]
        if isinstance(chunk, np.ndarray):
            chunk = torch.from_numpy(chunk)
        with autocast():
            out.append(fn(chunk).float().half().cpu())
    return torch.cat(out)


def trunk_features(model: Any, settings: ModelConfig, cache_dir: str | None, styles: Mapping[str, Any],
                   texts: list[str], batch_size: int, autocast: Callable[[], AbstractContextManager],
                   progress: Progress = no_progress, rank: int = 0) -> Tensor:
    """Features of ``texts``; every style's image features are set on its ``StyleData.features``, contiguous (a
    trunk's channels-last maps would make every step's flatten a copy)."""
    image_weights = weights_digest(model, "image_trunk")
    for style, data in styles.items():
        file = cache_file(settings, cache_dir, "images", [style, key_digest(data.images.tobytes()), image_weights])
        data.features = shared_load_or_compute(file, lambda: run_trunk(
            model.image_features, data.images, batch_size, autocast, progress, f"{style} image trunk"), rank,
            what=WHAT).contiguous()
    file = cache_file(settings, cache_dir, "texts", [key_digest("\n".join(texts).encode()), weights_digest(model, "text_trunk")])
    return shared_load_or_compute(file, lambda: run_trunk(
        model.text_features, texts, batch_size, autocast, progress, "text trunk"), rank, what=WHAT)
