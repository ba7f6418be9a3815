"""``run.host_allocator``: whether the C library keeps freed CPU memory in the process for the next step.

PyTorch's CPU tensors come from the C library's ``malloc``. glibc maps every request at or above its mmap
threshold (128 KiB, raised as mapped blocks are freed, to at most 32 MiB) with a fresh ``mmap`` and unmaps it on
``free``, and returns the top of its heap to the system once more than twice that lies free. A training step
allocates and frees the same large activations every step, so each costs the kernel a page fault, and a zeroed
page, per 4 KiB every time. ``retain`` sets ``M_MMAP_MAX = 0`` (never map; grow the heap instead) and the largest
``M_TRIM_THRESHOLD`` (never return its top), so a step reuses the memory the last one freed, and the process keeps
its high-water mark (plus what the heap's fragmentation adds) until it exits. ``system`` leaves the C library as
it is. ``auto`` retains on a CPU device under glibc and leaves every other case alone (CUDA tensors are not
``malloc``'d; elsewhere there is no ``mallopt``).

The setting lasts for the process (``mallopt`` is process-wide) and changes no number, only where memory comes
from. Measured by the benches against peers, whose records keep both sides' page faults per step
(docs/results/bench_pipelines.md): image_ssl's SimCLR ResNet-18 step at batch 256 (``contrasuite bench image_ssl
--against peer --threads 1 --profile``) faults about 7,000 times a step retained against lightly's 3.2 million on
glibc's defaults, and went from 1.29x lightly's speed to 1.52x (1.49-1.52 over 3 rounds).
"""

from __future__ import annotations

import ctypes
import platform
import resource
from functools import cache

import torch

HOST_ALLOCATORS = ("auto", "retain", "system")
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD, M_MMAP_MAX = -1, -3, -4
"""glibc's ``mallopt`` parameters (``malloc.h``)."""
GLIBC_MMAP_MAX = 65536
"""glibc's default ``M_MMAP_MAX``."""
GLIBC_LARGEST_MMAP_THRESHOLD = 32 << 20
"""The largest mmap threshold glibc's dynamic rule reaches on a 64-bit system; its trim threshold is then twice it."""
LARGEST_INT = 2**31 - 1


@cache
def _libc() -> ctypes.CDLL | None:
    """The running glibc (for ``mallopt`` and ``malloc_trim``), or None under any other C library."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    return ctypes.CDLL(None)


def wants_retain(setting: str, device: torch.device) -> bool:
    """Whether ``run.host_allocator`` keeps freed memory for ``device``: ``retain``, or ``auto`` on a CPU device;
    never without glibc (``retain`` there is a no-op, as ``system``)."""
    if _libc() is None:
        return False
    return setting == "retain" or (setting == "auto" and device.type == "cpu")


def retain_freed_memory(on: bool, mmap_threshold: int = GLIBC_LARGEST_MMAP_THRESHOLD) -> None:
    """Keep freed memory in the process (``on``) or hand large blocks back as glibc does by default.

    Off sets glibc's default ``M_MMAP_MAX`` and the thresholds its dynamic rule settles at for large blocks (32 MiB
    mapped, 64 MiB trimmed: once ``mallopt`` has been called the rule no longer moves them), or maps from
    ``mmap_threshold``, then returns the free heap to the system (``malloc_trim``), so memory retained before is
    not reused without faulting in again. A no-op without glibc."""
    libc = _libc()
    if libc is None:
        return
    if on:
        libc.mallopt(M_MMAP_MAX, 0)
        libc.mallopt(M_TRIM_THRESHOLD, LARGEST_INT)
        return
    libc.mallopt(M_MMAP_MAX, GLIBC_MMAP_MAX)
    libc.mallopt(M_MMAP_THRESHOLD, mmap_threshold)
    libc.mallopt(M_TRIM_THRESHOLD, 2 * mmap_threshold)
    libc.malloc_trim(0)


def use_host_allocator(setting: str, device: torch.device) -> str:
    """Apply ``run.host_allocator`` for a run on ``device`` (process-wide); returns what now applies, ``retain`` or
    ``system`` (the words records keep). ``system`` and ``auto`` off the CPU change nothing."""
    if not wants_retain(setting, device):
        return "system"
    retain_freed_memory(True)
    return "retain"


def page_faults() -> int:
    """Minor page faults of this process so far (``getrusage``): a step's count is the difference around it."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
