"""Device and precision: bf16 autocast by default (CUDA and CPU), fp16 with a GradScaler, fp32."""

from __future__ import annotations

import os

import torch

def pick_device(requested: str, local_rank: int = 0) -> torch.device:
    """``auto`` -> CUDA (this rank's GPU) when present, else CPU; ``cuda`` fails clearly without a GPU."""
    if requested == "cpu" or (requested == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise RuntimeError("run.device=cuda but torch.cuda.is_available() is False; use run.device=auto or cpu")
    torch.cuda.set_device(local_rank)
    return torch.device("cuda", local_rank)


def make_scaler(precision: str, device: torch.device) -> torch.amp.GradScaler | None:
    """A GradScaler for fp16 (None otherwise: bf16 and fp32 need no loss scaling)."""
    if precision != "fp16":
        return None
    return torch.amp.GradScaler(device.type)


def set_deterministic(enabled: bool) -> None:
    """Deterministic kernels (and the cuBLAS workspace setting they need) or the fast defaults."""
    if enabled:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(enabled)
    torch.backends.cudnn.benchmark = not enabled
    torch.backends.cudnn.deterministic = enabled
