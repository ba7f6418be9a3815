"""Peak memory of one call: CUDA's allocator statistics, or on the CPU a replay of the profiler's events.

On the CPU, ``torch.profiler`` with ``profile_memory=True`` records every allocation and free of
PyTorch's CPU allocator; summing them in time order gives the live bytes, whose maximum is the peak
above the level at the call's start. Used by ``contrasuite smoke`` and the benches.
"""

from __future__ import annotations

import os
from typing import Callable, TypeVar

import torch

os.environ.setdefault("KINETO_LOG_LEVEL", "5")  # the profiler's start/stop lines would drown the commands' output

T = TypeVar("T")


def peak_bytes(fn: Callable[[], T], device: torch.device) -> tuple[T, int]:
    """``(fn(), peak bytes allocated above the starting level while it ran)``."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        out = fn()
        torch.cuda.synchronize(device)
        return out, torch.cuda.max_memory_allocated(device) - base
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        out = fn()
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    live = peak = 0
    for event in sorted(events, key=lambda e: e.start_ns()):
        live += event.nbytes()
        peak = max(peak, live)
    return out, peak
