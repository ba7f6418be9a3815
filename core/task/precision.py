"""``run.precision`` and its autocast: ``bf16``, ``fp16`` or ``fp32`` (autocast off)."""

from __future__ import annotations

from contextlib import AbstractContextManager

import torch


AUTOCAST_DTYPES: dict[str, torch.dtype | None] = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": None}
"""``run.precision`` -> the autocast dtype (``None``: autocast off)."""


def autocast_for(precision: str, device: torch.device) -> AbstractContextManager:
    """The autocast context of ``precision`` (``bf16``, ``fp16``, ``fp32``) on ``device`` (disabled for fp32)."""
    dtype = AUTOCAST_DTYPES[precision]
    return torch.autocast(device_type=device.type, dtype=dtype, enabled=dtype is not None)
