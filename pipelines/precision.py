"""Device and precision: ``auto`` (bf16 autocast where the device computes bf16 natively, else fp32), bf16,
fp16 with a GradScaler, fp32."""

from __future__ import annotations

import os

import torch


def cpu_has_native_bf16() -> bool:
    """Whether this CPU computes bf16 matrix products in hardware (AVX512-BF16 or AMX) for oneDNN.

    Without them (an AVX2-only CPU, or oneDNN capped by ``ONEDNN_MAX_CPU_ISA`` below its ``BF16``/``AMX``
    levels) bf16 autocast is emulated: a CIFAR ResNet-18 step ran 8x slower than in fp32 (docs/engine.md)."""
    capped = os.environ.get("ONEDNN_MAX_CPU_ISA", "ALL").upper()
    if capped != "ALL" and not any(level in capped for level in ("BF16", "AMX")):
        return False
    checks = (getattr(torch.cpu, "_is_avx512_bf16_supported", None), getattr(torch.cpu, "_is_amx_tile_supported", None))
    return any(check() for check in checks if check is not None)


def slow_bf16_note(precision: str, device: torch.device) -> str | None:
    """A one-line warning for bf16 autocast on a CPU that emulates it, else None."""
    if precision != "bf16" or device.type != "cpu" or cpu_has_native_bf16():
        return None
    return ("run.precision=bf16 on a CPU without AVX512-BF16 or AMX: bf16 is emulated here and runs several times "
            "slower than fp32; set run.precision=fp32 for CPU runs on this machine")


def auto_precision(device: torch.device) -> tuple[str, str]:
    """What ``run.precision=auto`` means on ``device``: ``bf16`` on a CUDA device with bf16 kernels and on a
    CPU with AVX512-BF16 or AMX, ``fp32`` elsewhere (where bf16 is emulated); and why, in a few words."""
    if device.type == "cuda":
        if torch.cuda.is_bf16_supported(including_emulation=False):
            return "bf16", f"{torch.cuda.get_device_name(device)} computes bf16 natively"
        return "fp32", f"{torch.cuda.get_device_name(device)} has no native bf16"
    if cpu_has_native_bf16():
        return "bf16", "this CPU has AVX512-BF16 or AMX"
    return "fp32", "this CPU has neither AVX512-BF16 nor AMX, so bf16 would be emulated, several times slower"


def resolve_precision(requested: str, device: torch.device) -> tuple[str, str | None]:
    """The concrete precision of ``run.precision`` on ``device`` and, for ``auto``, the line that says what it chose."""
    if requested != "auto":
        return requested, None
    chosen, why = auto_precision(device)
    return chosen, f"run.precision=auto chose {chosen}: {why}"


def planned_precision(precision: str, device: str) -> str:
    """The concrete precision a run of ``run.precision``/``run.device`` gets on this machine, found without
    choosing a GPU (what a report keys its cached results by)."""
    planned = "cuda" if device != "cpu" and torch.cuda.is_available() else "cpu"
    return resolve_precision(precision, torch.device(planned))[0]


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
