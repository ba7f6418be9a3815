"""``torchrun`` DDP: env:// init (gloo on CPU, nccl on CUDA), gather with gradient, module wrapping.

Under ``torchrun`` the environment holds ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` and the rendezvous
address; without it everything is a no-op on one process.
"""

from __future__ import annotations

import contextlib
import datetime
import gc
import os
from dataclasses import dataclass
from typing import Any, Iterator

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.nn.parallel import DistributedDataParallel

from contrasuite.core.distributed import all_gather_with_grad


@dataclass(frozen=True)
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1


def env_info() -> DistInfo:
    """Rank, world size and local rank from the ``torchrun`` environment (defaults: one process)."""
    return DistInfo(
        rank=int(os.environ.get("RANK", 0)),
        world_size=int(os.environ.get("WORLD_SIZE", 1)),
        local_rank=int(os.environ.get("LOCAL_RANK", 0)),
    )


def init(info: DistInfo, device: torch.device, timeout_minutes: float = 60.0) -> None:
    """Join the process group (env://) when several processes run and none is initialised yet.

    ``timeout_minutes`` bounds every collective, including the wait of ranks 1.. while rank 0 evaluates."""
    if info.enabled and not dist.is_initialized():
        backend = "nccl" if device.type == "cuda" else "gloo"
        timeout = datetime.timedelta(minutes=timeout_minutes)
        store, _, _ = next(dist.rendezvous("env://", info.rank, info.world_size, timeout=timeout))
        # torchrun keeps one store across the restarts of --max-restarts: without an attempt's own prefix a
        # restarted rank can read the address its dead peer published and fail to connect (gloo: "Connection
        # refused" in connectFullMesh).
        attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        dist.init_process_group(backend=backend, store=dist.PrefixStore(f"contrasuite/attempt_{attempt}", store),
                                rank=info.rank, world_size=info.world_size, timeout=timeout)


def shutdown() -> None:
    """Leave the process group, after collecting the garbage that still holds it.

    A trainer lives on in reference cycles (task -> context -> trainer) after its command returns, and
    its DDP wrappers keep the group alive past ``destroy_process_group``; the group was then destroyed
    during interpreter shutdown, where gloo aborted the process in 4 of 103 two-rank evals (SIGABRT,
    "terminate called without an active exception")."""
    if dist.is_initialized():
        gc.collect()
        dist.destroy_process_group()


def barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


def broadcast_object(obj: Any) -> Any:
    """Rank 0's ``obj`` on every rank."""
    if not dist.is_initialized():
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def all_gather_object(obj: Any) -> list[Any]:
    """Every rank's ``obj``, in rank order (``[obj]`` on one process)."""
    if not dist.is_initialized():
        return [obj]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def max_over_ranks(value: int, device: torch.device) -> int:
    """The largest ``value`` over the ranks (``value`` itself on one process)."""
    if not dist.is_initialized():
        return value
    box = torch.tensor([value], dtype=torch.int64, device=device if dist.get_backend() == "nccl" else "cpu")
    dist.all_reduce(box, op=dist.ReduceOp.MAX)
    return int(box.item())


class RanksDivergedError(RuntimeError):
    """The ranks' parameters differ: some gradient was not averaged over ranks."""


def check_in_sync(modules: dict[str, nn.Module]) -> None:
    """Raise :class:`RanksDivergedError` on every rank when any module's parameters differ between ranks.

    Compares a float64 sum and sum of squares per module (buffers such as BatchNorm's running statistics
    may differ by design). A task that trains a module neither wrapped by DDP nor averaged would
    otherwise train W different models silently."""
    if not dist.is_initialized():
        return
    local = {name: [float(sum(p.detach().double().sum() for p in m.parameters()) or 0.0),
                    float(sum(p.detach().double().square().sum() for p in m.parameters()) or 0.0)]
             for name, m in modules.items()}
    ranks = all_gather_object(local)
    diverged = sorted({name for other in ranks for name in local if other.get(name) != local[name]})
    if diverged:
        raise RanksDivergedError(f"the ranks' parameters differ in {diverged}: their gradients are not averaged over "
                                 "ranks (wrap the module with ctx.wrap, or average its gradients)")


def gather_with_grad(x: Tensor) -> Tensor:
    """All-gather along dim 0; the gradient of every rank's copy flows back to its local slice."""
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return x
    return all_gather_with_grad(x)


def wrap_module(module: nn.Module, device: torch.device) -> nn.Module:
    """DistributedDataParallel around a module with trainable parameters (identity on one process)."""
    if not dist.is_initialized() or not any(p.requires_grad for p in module.parameters()):
        return module
    ids = [device.index] if device.type == "cuda" else None
    return DistributedDataParallel(module, device_ids=ids)


def unwrap(module: nn.Module) -> nn.Module:
    """The module inside a DDP wrapper (itself otherwise)."""
    return module.module if isinstance(module, DistributedDataParallel) else module


@contextlib.contextmanager
def no_sync(modules: list[nn.Module]) -> Iterator[None]:
    """Skip DDP gradient all-reduce for the enclosed backward passes of every wrapped module."""
    with contextlib.ExitStack() as stack:
        for m in modules:
            if isinstance(m, DistributedDataParallel):
                stack.enter_context(m.no_sync())
        yield


@contextlib.contextmanager
def local_only(modules: list[nn.Module]) -> Iterator[None]:
    """DDP wrappers that run without collectives: no buffer broadcast before a forward, no gradient
    all-reduce. Rank 0 evaluates inside it while the other ranks wait, so a forward through a wrapper
    cannot block on ranks that are not there."""
    wrappers = [m for m in modules if isinstance(m, DistributedDataParallel)]
    saved = [m.require_forward_param_sync for m in wrappers]
    with no_sync(wrappers):
        for m in wrappers:
            m.require_forward_param_sync = False
        try:
            yield
        finally:
            for m, flag in zip(wrappers, saved):
                m.require_forward_param_sync = flag
