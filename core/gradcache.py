"""GradCache: the exact full-batch gradient of any contrastive loss, with the memory of one chunk.

Gao, Zhang, Han, Callan, "Scaling Deep Contrastive Learning Batch Size under Memory Limited Setup"
(RepL4NLP 2021, arXiv:2101.06983). A contrastive loss couples every pair in the batch, so plain
gradient accumulation changes the loss. With embeddings ``f_k = f(x_k; theta)`` of chunks ``k``::

    dL/dtheta = sum_k (dL/df_k)^T (df_k/dtheta)

1. embed every chunk without a graph, recording the RNG state before each chunk;
2. compute the loss on the concatenated (detached, grad-requiring) embeddings and backpropagate it
   to get ``dL/df`` (and the gradient of any parameter of the loss itself, e.g. a temperature);
3. re-embed each chunk with a graph under its recorded RNG state (so dropout or in-model
   augmentation draws the same numbers) and backpropagate ``dL/df_k`` through it.

Cost: one extra forward pass. BatchNorm breaks exactness (per-chunk statistics, running statistics
updated twice): use :func:`warn_if_batchnorm` and prefer GroupNorm/LayerNorm or frozen BatchNorm.
The loss must not modify the embeddings in place.
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Any, Callable, ContextManager, Iterator, Sequence

import torch
from torch import Tensor, nn


class RngState:
    """The CPU and CUDA generator states at one moment, to replay a forward pass's random draws."""

    def __init__(self) -> None:
        self.cpu = torch.get_rng_state()
        self.cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else []

    @contextlib.contextmanager
    def replay(self) -> Iterator[None]:
        """Run the enclosed code from this state; the outer RNG streams are left untouched."""
        devices = list(range(len(self.cuda)))
        with torch.random.fork_rng(devices=devices):
            torch.set_rng_state(self.cpu)
            if self.cuda:
                torch.cuda.set_rng_state_all(self.cuda)
            yield


def _as_tuple(out: Tensor | Sequence[Tensor]) -> tuple[Tensor, ...]:
    return (out,) if isinstance(out, Tensor) else tuple(out)


def cached_backward(
    embed: Callable[[Any], Tensor | Sequence[Tensor]],
    chunks: Sequence[Any],
    loss_fn: Callable[..., Tensor],
    *,
    scale: Callable[[Tensor], Tensor] | None = None,
    no_sync: Callable[[], ContextManager] | None = None,
) -> Tensor:
    """Accumulate ``d loss_fn(cat(embed(chunk) for chunk)) / d params`` into ``.grad``; return the loss.

    ``embed(chunk)`` returns one tensor ``[n_k, D]`` or a tuple of them (e.g. two views); output ``j``
    of every chunk is concatenated along dim 0 and passed as ``loss_fn``'s ``j``-th argument.
    ``scale`` multiplies the loss before backward (a GradScaler's ``scale``). ``no_sync`` is entered
    around every re-embedding (forward and backward) but the last, so DDP all-reduces once.
    """
    if not chunks:
        raise ValueError("cached_backward: no chunks")
    states, cached = [], []
    with torch.no_grad():
        for chunk in chunks:
            states.append(RngState())
            cached.append(_as_tuple(embed(chunk)))
    n_out = len(cached[0])
    if any(len(c) != n_out for c in cached):
        raise ValueError("cached_backward: embed returned a different number of tensors for different chunks")
    reps = [torch.cat([c[j] for c in cached]).detach().requires_grad_(True) for j in range(n_out)]
    loss = loss_fn(*reps)
    (scale(loss) if scale is not None else loss).backward()
    grads = [r.grad if r.grad is not None else torch.zeros_like(r) for r in reps]
    offsets = [0] * n_out
    for k, (chunk, state) in enumerate(zip(chunks, states)):
        last = k == len(chunks) - 1
        sync = contextlib.nullcontext() if last or no_sync is None else no_sync()
        with sync:
            with state.replay():
                outs = _as_tuple(embed(chunk))
            chunk_grads = []
            for j, out in enumerate(outs):
                chunk_grads.append(grads[j][offsets[j] : offsets[j] + out.shape[0]].to(out.dtype))
                offsets[j] += out.shape[0]
            torch.autograd.backward(outs, chunk_grads)
    return loss.detach()


def warn_if_batchnorm(*modules: nn.Module) -> bool:
    """Warn (and return True) when a module holds BatchNorm in training mode: GradCache is then inexact."""
    found = any(isinstance(m, nn.modules.batchnorm._BatchNorm) and m.training for mod in modules for m in mod.modules())
    if found:
        warnings.warn(
            "GradCache with BatchNorm in training mode is not exact (per-chunk batch statistics, running "
            "statistics updated twice); use GroupNorm/LayerNorm or freeze BatchNorm",
            stacklevel=2,
        )
    return found
