"""Stopping a run cleanly on a signal: a scheduler's preemption (SLURM, Kubernetes: SIGTERM, or SIGUSR1
with ``sbatch --signal``), torchrun passing SIGTERM on to its workers, or Ctrl-C (SIGINT).

While :meth:`StopSignals.installed`, the first such signal is only recorded; the training loop asks
:meth:`StopSignals.requested` after every step, so every rank finishes the step it is in and all ranks
stop after the same one (on several processes the answer is the largest signal number over the ranks,
one small all-reduce per step). The trainer then writes ``last.pt``, sets ``status.json`` to
``preempted`` and raises :class:`Preempted`; the CLI prints its one line and exits with ``128 +`` the
signal's number (143 for SIGTERM, 138 for SIGUSR1, 130 for SIGINT), as a shell reports a process the
signal stopped. A second Ctrl-C interrupts at once (``KeyboardInterrupt``).
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Any, Iterator

import torch

from contrasuite.pipelines import distributed

STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)


class Preempted(Exception):
    """The run stopped on a signal after saving ``last.pt``; ``exit_code`` is ``128 + signal``."""

    def __init__(self, message: str, signum: int) -> None:
        super().__init__(message)
        self.exit_code = 128 + signum


class StopSignals:
    """The first stop signal received while :meth:`installed` (0 for none)."""

    def __init__(self) -> None:
        self.signum = 0

    def _record(self, signum: int, frame: Any) -> None:
        self.signum = self.signum or signum
        if signum == signal.SIGINT:  # the second Ctrl-C interrupts at once
            signal.signal(signal.SIGINT, signal.default_int_handler)

    @contextmanager
    def installed(self) -> Iterator[None]:
        """Record the signals instead of dying on them (main thread only: elsewhere Python cannot install handlers)."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {s: signal.signal(s, self._record) for s in STOP_SIGNALS}
        try:
            yield
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)

    def requested(self, device: torch.device) -> int:
        """The signal to stop on, agreed by every rank (0: go on)."""
        return distributed.max_over_ranks(self.signum, device)
