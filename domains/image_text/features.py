"""The frozen trunks' features of every image and caption, computed once and cached on disk.

With ``model.freeze_trunks`` a step trains only the heads, so the trunks run once over every image
(pairs and generated negatives, per style) and every caption and negative caption. Each tower's cache
file is keyed by the model settings that tower depends on (never the other tower's,
:data:`OTHER_TOWER`), the image network's tag, and a digest of its inputs; features are stored in
fp16 and read back with ``weights_only=True``.
"""

from __future__ import annotations

import hashlib
import json
import os
from contextlib import AbstractContextManager
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np
import torch
from torch import Tensor

from contrasuite.domains.image_text.models import IMAGE_NETWORK, ModelConfig

OTHER_TOWER = {"images": {"text_model", "text_segments", "context_length"},
               "texts": {"image_weights", "image_size", "grid", "train_image_stages", "extra_image_stages"}}
"""Model settings a trunk's cached features do not depend on: the other tower's."""


def cache_file(model: ModelConfig, cache_dir: str | None, kind: str, extra: Any) -> Path:
    """The cache file of one trunk's (``kind``: ``images`` or ``texts``) features of the inputs ``extra`` names."""
    root = cache_dir or os.environ.get("CONTRASUITE_CACHE") or Path.home() / ".cache" / "contrasuite"
    settings = {k: v for k, v in asdict(model).items() if k not in OTHER_TOWER[kind]}
    if kind == "images":  # the network itself, not only its settings (issue 23 changed it)
        settings["network"] = IMAGE_NETWORK
    key = json.dumps([kind, settings, extra], sort_keys=True, default=str)
    return Path(root) / "image_text" / f"{kind}-{hashlib.sha256(key.encode()).hexdigest()[:16]}.pt"


@torch.no_grad()
def run_trunk(fn: Callable[[Any], Tensor], inputs: list | np.ndarray, batch_size: int,
              autocast: Callable[[], AbstractContextManager]) -> Tensor:
    """``fn`` over ``inputs`` in batches, as fp16 on the CPU."""
    out = []
    for start in range(0, len(inputs), batch_size):
        chunk = inputs[start: start + batch_size]
        if isinstance(chunk, np.ndarray):
            chunk = torch.from_numpy(chunk)
        with autocast():
            out.append(fn(chunk).float().half().cpu())
    return torch.cat(out)


def load_or_compute(file: Path, compute: Callable[[], Tensor]) -> Tensor:
    """The tensor cached at ``file``, else ``compute()`` written there atomically (temporary file, rename)."""
    if file.is_file():
        return torch.load(file, map_location="cpu", weights_only=True)
    value = compute()
    file.parent.mkdir(parents=True, exist_ok=True)
    tmp = file.with_suffix(f".tmp{os.getpid()}")
    torch.save(value, tmp)
    tmp.replace(file)
    return value


def trunk_features(model: Any, settings: ModelConfig, cache_dir: str | None, styles: Mapping[str, Any],
                   texts: list[str], batch_size: int, autocast: Callable[[], AbstractContextManager]) -> Tensor:
    """Features of ``texts``; every style's image features are set on its ``StyleData.features``."""
    for style, data in styles.items():
        digest = hashlib.sha256(data.images.tobytes()).hexdigest()
        file = cache_file(settings, cache_dir, "images", [style, digest])
        data.features = load_or_compute(file, lambda: run_trunk(model.image_features, data.images, batch_size, autocast))
    file = cache_file(settings, cache_dir, "texts", hashlib.sha256("\n".join(texts).encode()).hexdigest())
    return load_or_compute(file, lambda: run_trunk(model.text_features, texts, batch_size, autocast))
