"""Expected library noise, silenced once for the ``contrasuite`` command (called first by ``cli.main``).

Each entry is a message a library prints on every run although nothing is wrong, which buries the
lines a user must read:

* ``torch.jit.script`` is deprecated (torch 2.10+), printed while a dependency scripts a helper at import;
* torch_geometric's "Sparse invariant checks are implicitly disabled" and "Sparse CSR tensor support is
  in beta" on every sparse propagation matrix of the graph domain;
* transformers' model "LOAD REPORT" table when the only entries are UNEXPECTED keys: the MiniLM
  checkpoint carries a BERT pooler that a mean-pooled encoder does not build. A report with MISSING or
  MISMATCHED keys (weights that did not load) is still shown.

The profiler's own lines are silenced where the profiler is used (``pipelines/memory.py``): its
``USDT: ... profiler_start``/``profiler_stop`` lines by ``KINETO_LOG_LEVEL=6`` (5 still lets them
through), and c10's ``CPUAllocator.cpp ... Memory block of unknown size was allocated before the
profiling started`` (a tensor from before the measured step freed during it) by :func:`without_cpp_noise`:
that line is C++ logging, which only ``TORCH_CPP_LOG_LEVEL`` set before torch loads would silence, along
with every other C++ warning.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import tempfile
import warnings
from typing import Iterator

EXPECTED_WARNINGS = (
    (FutureWarning, r"`torch\.jit\.script` is deprecated"),
    (UserWarning, r"Sparse invariant checks are implicitly disabled"),
    (UserWarning, r"Sparse CSR tensor support is in beta"),
)


class _OnlyUnexpectedKeys(logging.Filter):
    """Drops transformers' load report when it lists nothing but UNEXPECTED keys."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        return not ("LOAD REPORT" in text and "MISSING" not in text and "MISMATCH" not in text)


def silence_expected_noise() -> None:
    """Install the filters (idempotent)."""
    for category, message in EXPECTED_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category)
    logger = logging.getLogger("transformers.modeling_utils")
    if not any(isinstance(f, _OnlyUnexpectedKeys) for f in logger.filters):
        logger.addFilter(_OnlyUnexpectedKeys())


CPP_NOISE = (b"Memory block of unknown size was allocated before the profiling started",)
"""C++ log lines (on file descriptor 2) that say nothing is wrong."""


@contextlib.contextmanager
def without_cpp_noise() -> Iterator[None]:
    """Hold what is written to file descriptor 2 inside the block, then pass it on without the :data:`CPP_NOISE` lines."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            kept = [line for line in held.read().splitlines(keepends=True) if not any(n in line for n in CPP_NOISE)]
            if kept:
                os.write(2, b"".join(kept))
