"""One process per run folder: an exclusive ``flock`` on ``RUN_DIR/.lock`` that holds the owner's PID.

Two ``resume`` calls on one folder would interleave their steps, metrics and checkpoints; the second
is refused with the holder's PID instead. The kernel drops the lock when its process ends (also on
SIGKILL), so a stale ``.lock`` file never blocks a later run; a run that ends normally removes its
``.lock`` (while still holding it: a process that opened the old file then sees it unlinked and retries).
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path


class RunLockedError(RuntimeError):
    """The run folder is held by another live process; the message names its PID."""


class RunLock:
    """``acquire()`` or raise :class:`RunLockedError`; ``release()`` (idempotent) gives it back."""

    def __init__(self, run_dir: Path) -> None:
        self.path = Path(run_dir) / ".lock"
        self._handle = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            handle = open(self.path, "a+")
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.seek(0)
                holder = handle.read().strip() or "?"
                handle.close()
                raise RunLockedError(f"run folder {self.path.parent} is in use by process {holder} "
                                     f"(lock {self.path}); wait for it to end or stop it") from None
            if self._still_linked(handle):
                break
            handle.close()  # the holder removed the file as we opened it: lock the new one
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        self._handle = handle

    def _still_linked(self, handle) -> bool:
        """Whether ``self.path`` is still the file ``handle`` locked (release removes it while holding the lock)."""
        try:
            return os.stat(self.path).st_ino == os.fstat(handle.fileno()).st_ino
        except FileNotFoundError:
            return False

    def release(self) -> None:
        """Remove ``.lock`` while still holding it, then unlock: no lock file outlives its run."""
        if self._handle is not None:
            self.path.unlink(missing_ok=True)
            fcntl.flock(self._handle, fcntl.LOCK_UN)
            self._handle.close()
            self._handle = None
