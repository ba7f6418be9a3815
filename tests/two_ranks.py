"""Run a test function on two gloo processes of this machine (``torch.multiprocessing.spawn``)."""

from __future__ import annotations

import contextlib
import socket
from typing import Any, Callable, Iterator


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn_two(worker: Callable[..., None], *args: Any) -> None:
    """``worker(rank, port, *args)`` on ranks 0 and 1 (``port``: a free port for their rendezvous)."""
    import torch.multiprocessing as mp

    mp.spawn(worker, args=(free_port(), *args), nprocs=2)


@contextlib.contextmanager
def gloo_group(rank: int, port: int) -> Iterator[None]:
    """This process as ``rank`` of a two-process gloo group on ``port``, destroyed on leaving."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        yield
    finally:
        dist.destroy_process_group()
