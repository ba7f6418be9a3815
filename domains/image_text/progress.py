"""Progress of the long setup phases (decoding images, generating negatives, trunk features), shown through
``TaskContext.progress`` (a transient tqdm bar on rank 0 when ``run.progress`` is on)."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterable, Iterator

Progress = Callable[..., Iterable]
"""``progress(iterable, desc, total=None)``: the iterable, shown as a progress bar (``TaskContext.progress``)."""


def no_progress(iterable: Iterable, desc: str = "", total: int | None = None) -> Iterable:
    """A :data:`Progress` that shows nothing."""
    return iterable


@contextmanager
def shown(progress: Progress, desc: str) -> Iterator[None]:
    """A one-item bar named ``desc`` while the block runs (a phase that has no items to count)."""
    for _ in progress([None], desc, total=1):
        yield
