"""Expected library noise, silenced once for the ``contrasuite`` command (called first by ``cli.main``).

Each entry is a message a library prints on every run although nothing is wrong, which buries the
lines a user must read:

* ``torch.jit.script`` is deprecated (torch 2.10+), printed while a dependency scripts a helper at import;
* torch_geometric's "Sparse invariant checks are implicitly disabled" and "Sparse CSR tensor support is
  in beta" on every sparse propagation matrix of the graph domain;
* transformers' model "LOAD REPORT" table when the only entries are UNEXPECTED keys: the MiniLM
  checkpoint carries a BERT pooler that a mean-pooled encoder does not build. A report with MISSING or
  MISMATCHED keys (weights that did not load) is still shown.

The profiler's own start/stop lines are silenced where the profiler is used (``pipelines/memory.py``).
"""

from __future__ import annotations

import logging
import warnings

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
