"""Peak memory of one call: CUDA's allocator statistics, the profiler's events, or the resident set.

:func:`peak_bytes`: on CUDA the allocator's peak; on the CPU ``torch.profiler`` with
``profile_memory=True`` records every allocation and free of PyTorch's CPU allocator, and summing them
in time order gives the live bytes, whose maximum is the peak above the level at the call's start. The
profiler keeps every event, so a call of millions of operations (a tiled loss at N = 65,536) needs
gigabytes for the measurement itself. :func:`peak_resident_bytes` (CPU, Linux) keeps nothing: it reads
the kernel's peak resident size of a forked child. Used by ``contrasuite smoke`` and the benches.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Callable, TypeVar

import torch

from contrasuite.pipelines.host_allocator import retain_freed_memory
from contrasuite.pipelines.noise import without_cpp_noise

os.environ.setdefault("KINETO_LOG_LEVEL", "6")  # above USDT (5): the profiler's start/stop lines would drown the output

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

    with without_cpp_noise(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        out = fn()
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    live = peak = 0
    for event in sorted(events, key=lambda e: e.start_ns()):
        live += event.nbytes()
        peak = max(peak, live)
    return out, peak


PROC_CLEAR_REFS = Path("/proc/self/clear_refs")
RESIDENT_PEAK_WORKS = PROC_CLEAR_REFS.exists() and hasattr(os, "fork")


def _status_kib(field: str) -> int:
    found = re.search(rf"^{field}:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.MULTILINE)
    if found is None:
        raise RuntimeError(f"/proc/self/status has no {field} line")
    return int(found.group(1))


def peak_resident_bytes(fn: Callable[[], object], setup: Callable[[], None] = lambda: None) -> int:
    """Peak resident bytes above the starting level while ``fn()`` runs (CPU, Linux).

    In a forked child, on one thread (the parent's allocator keeps its settings, so later timings are
    unaffected; the parent's OpenMP pool is unusable after ``fork``): ``setup(); fn()`` once as a
    warm-up (what a first call initialises is not the call's), then every allocation of 64 KiB or more
    is mapped, so a freed tensor leaves the resident set at once and a reused heap fragment is not counted, and
    freed heap pages are returned (:func:`~contrasuite.pipelines.host_allocator.retain_freed_memory` off, even
    where a run retained memory), ``setup()`` runs, the kernel's peak counter is reset (``5`` written to
    ``/proc/self/clear_refs``) and ``fn()`` runs; the child reports ``VmHWM - VmRSS`` through a pipe.
    An exception in the child is raised here as ``RuntimeError`` naming it."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: measure, write one line, exit without running the parent's cleanup
        os.close(read)
        try:
            torch.set_num_threads(1)  # a forked child cannot use the parent's OpenMP pool (it hangs)
            setup()
            fn()
            retain_freed_memory(False, mmap_threshold=1 << 16)
            setup()
            PROC_CLEAR_REFS.write_text("5")
            base = _status_kib("VmRSS")
            fn()
            os.write(write, str(1024 * (_status_kib("VmHWM") - base)).encode())
        except BaseException as err:  # reported to the parent, which raises it
            os.write(write, f"error: {type(err).__name__}: {err}".encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        reply = pipe.read()
    _, status = os.waitpid(pid, 0)
    if not reply or reply.startswith("error: "):
        raise RuntimeError(f"peak memory measurement failed in the child (wait status {status}): {reply or 'no reply'}")
    return int(reply)
