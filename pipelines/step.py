"""The step context a task's ``train_step`` receives: backward, finiteness check, clip, step, zero.

``optimize(name, loss)`` for each optimizer in the task's order; ``optimize_cached(...)`` does the
same with GradCache (:mod:`contrasuite.core.gradcache`) for batches too large to backpropagate at once.
After every update the weights are checked: an update that made them non-finite cannot be skipped
(the old weights are gone), so it always raises, under ``run.non_finite=skip`` too.

Per optimizer and step the checks read three values to the host, each because a decision needs it: the
loss's finiteness (backward or not), the gradients' global norm (logged; step or not; clip or not) and the
finiteness of the updated weights' norms (fail or not). Each is one fused pass over its tensors
(``torch._foreach_norm``); no pass runs whose result is known (a clip that would multiply by 1).
"""

from __future__ import annotations

import math
from contextlib import AbstractContextManager
from typing import Any, Callable, Mapping, Sequence

import torch
import torch.distributed as dist
from torch import Tensor, nn

from contrasuite.core.gradcache import cached_backward


class NonFiniteStepError(FloatingPointError):
    """A non-finite loss or gradient under ``run.non_finite=stop``."""


def _finite_everywhere(value: Tensor, read: float | None = None) -> bool:
    """True when ``value`` is finite on every rank (ranks must agree to skip, or DDP would hang).

    ``read``: a 0-d ``value`` already read to the host, which one process decides on without reading it again.
    """
    several_ranks = dist.is_initialized() and dist.get_world_size() > 1
    if read is not None and not several_ranks:
        return math.isfinite(read)
    finite = torch.isfinite(value.detach()).all()
    if not several_ranks:
        return bool(finite)
    flag = finite.to(torch.int32).reshape(1)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    return bool(flag.item())


def _scales_by_one(norm: Tensor, read: float, max_norm: float) -> bool:
    """True when ``clip_grad_norm_(.., max_norm)`` would multiply every gradient by exactly 1 (a no-op).

    Its coefficient ``min(1, max_norm / (norm + 1e-6))`` is computed in ``norm``'s dtype, 3 to 4 roundings of at
    most ``eps / 2`` each; ``(read + 1e-6) * (1 + 4 eps) <= max_norm`` keeps it at or above 1 despite them.
    """
    return math.isfinite(read) and (read + 1e-6) * (1 + 4 * torch.finfo(norm.dtype).eps) <= max_norm


class Step:
    """One optimisation step. Implements ``contrasuite.core.task.protocol.StepContext``."""

    def __init__(
        self,
        *,
        epoch: int,
        step: int,
        optimizers: Mapping[str, torch.optim.Optimizer],
        schedulers: Mapping[str, Any],
        autocast: Callable[[], AbstractContextManager],
        scaler: torch.amp.GradScaler | None,
        grad_clip: float | None,
        non_finite: str,
        no_sync: Callable[[], AbstractContextManager],
        chunk_size: int | None = None,
        param_names: Mapping[int, str] | None = None,
        grad_clip_value: float | None = None,
    ) -> None:
        self.epoch, self.step = epoch, step
        self._optimizers, self._schedulers = optimizers, schedulers
        self._autocast, self._scaler = autocast, scaler
        self._grad_clip, self._grad_clip_value, self._non_finite = grad_clip, grad_clip_value, non_finite
        self._no_sync = no_sync
        self.chunk_size = chunk_size
        self._param_names = param_names or {}
        self._scaler_stepped = False
        self.stats: dict[str, float] = {}
        """What the engine logs for this step: ``grad_norm/<name>``, ``skipped/<name>``."""
        self.skip_reasons: list[str] = []
        """Why each skipped optimizer was skipped (the message ``run.non_finite=stop`` would raise)."""

    def autocast(self) -> AbstractContextManager:
        return self._autocast()

    def _optimizer(self, name: str) -> torch.optim.Optimizer:
        if name not in self._optimizers:
            raise KeyError(f"step.optimize({name!r}): the task has no optimizer {name!r}; it has {list(self._optimizers)}")
        return self._optimizers[name]

    def _fail(self, name: str, what: str, optimizer: torch.optim.Optimizer) -> bool:
        """Stop (raise) or skip (zero the grads, return True) on a non-finite statistic."""
        message = f"step {self.step} (epoch {self.epoch}), optimizer {name!r}: non-finite {what}"
        optimizer.zero_grad(set_to_none=True)
        if self._non_finite == "stop":
            raise NonFiniteStepError(message + " (run.non_finite=skip drops such steps instead)")
        self.stats[f"skipped/{name}"] = 1.0
        self.skip_reasons.append(message)
        return True

    def optimize(self, name: str, loss: Tensor, terms: Mapping[str, Tensor] | None = None) -> None:
        """Backward ``loss`` (scaled under fp16), check it, clip, step optimizer ``name`` and its scheduler, zero grads.

        ``terms`` (optional, e.g. each objective term) makes a non-finite message name the culprit.
        """
        optimizer = self._optimizer(name)
        if not _finite_everywhere(loss):
            self._fail(name, _loss_message(loss, terms), optimizer)
            return
        (self._scaler.scale(loss) if self._scaler else loss).backward()
        self._finish(name, optimizer)

    def optimize_cached(
        self,
        name: str,
        embed: Callable[[Any], Tensor | Sequence[Tensor]],
        chunks: Sequence[Any],
        loss_fn: Callable[..., Tensor],
        terms: Mapping[str, Tensor] | None = None,
    ) -> Tensor:
        """GradCache step: embed ``chunks`` without graph, loss on all embeddings, backprop chunk by chunk.

        ``embed(chunk)`` runs under this step's autocast; returns the detached full-batch loss.
        ``terms``, as in :meth:`optimize`, may be a dict that ``loss_fn`` fills.
        """
        optimizer = self._optimizer(name)

        def embed_autocast(chunk: Any) -> Tensor | Sequence[Tensor]:
            with self._autocast():
                return embed(chunk)

        def checked_loss(*reps: Tensor) -> Tensor:
            loss = loss_fn(*reps)
            if not _finite_everywhere(loss):
                raise _NonFiniteCachedLoss(loss.detach())
            return loss

        try:
            loss = cached_backward(
                embed_autocast, chunks, checked_loss, scale=self._scaler.scale if self._scaler else None,
                no_sync=self._no_sync,
            )
        except _NonFiniteCachedLoss as err:
            self._fail(name, _loss_message(err.value, terms), optimizer)
            return err.value
        self._finish(name, optimizer)
        return loss

    def _finish(self, name: str, optimizer: torch.optim.Optimizer) -> None:
        if self._scaler is not None:
            self._scaler.unscale_(optimizer)
        params = [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        norm = nn.utils.get_total_norm([p.grad for p in params])  # unclipped: logged and checked
        read = float(norm)
        self.stats[f"grad_norm/{name}"] = read
        if self._scaler is None and not _finite_everywhere(norm, read):
            self._fail(name, f"gradient norm {read}", optimizer)
            return
        self._clip(params, norm, read)
        if self._scaler is not None:
            self._scaler.step(optimizer)  # skips the update itself when fp16 gradients overflowed
            self._scaler_stepped = True
        else:
            optimizer.step()
        self._check_weights(name, params)
        if name in self._schedulers:
            self._schedulers[name].step()
        optimizer.zero_grad(set_to_none=True)

    def _clip(self, params: Sequence[Tensor], norm: Tensor, read: float) -> None:
        """Clip by ``grad_clip_value`` then ``grad_clip``, given the gradients' global ``norm`` (``read`` on the host).

        Clamping elements follows a finite norm only (it would hide an infinite gradient); a norm clip whose
        coefficient is 1 is skipped (:func:`_scales_by_one`), the others are ``clip_grad_norm_``'s own.
        """
        if self._grad_clip_value:
            if math.isfinite(read):
                nn.utils.clip_grad_value_(params, self._grad_clip_value)
                if self._grad_clip:
                    nn.utils.clip_grad_norm_(params, self._grad_clip)
        elif self._grad_clip and not _scales_by_one(norm, read, self._grad_clip):
            nn.utils.clip_grads_with_norm_(params, self._grad_clip, norm)

    def _check_weights(self, name: str, params: Sequence[Tensor]) -> None:
        """Raise when the update just made a weight non-finite, or so large that its norm overflows."""
        if not params:
            return
        with torch.no_grad():
            norms = torch.stack(torch._foreach_norm(list(params)))
        if _finite_everywhere(norms):
            return
        bad = params[int((~torch.isfinite(norms)).nonzero()[0])] if not torch.isfinite(norms).all() else params[0]
        where = self._param_names.get(id(bad), f"a tensor of shape {list(bad.shape)}")
        what = "non-finite" if not torch.isfinite(bad).all() else "so large that their norm overflows"
        raise NonFiniteStepError(
            f"step {self.step} (epoch {self.epoch}), optimizer {name!r}: the update made the weights {what} "
            f"({where}, gradient norm {self.stats.get(f'grad_norm/{name}', float('nan')):.3g}); not skippable, "
            "the previous weights are gone: lower the learning rate or set run.grad_clip")

    def finish(self) -> None:
        """End of the step: update the loss scale once, after every optimizer stepped."""
        if self._scaler is not None and self._scaler_stepped:
            self._scaler.update()


def _loss_message(loss: Tensor, terms: Mapping[str, Tensor] | None = None) -> str:
    """``loss [values]`` and, when given, which of the loss's terms are non-finite."""
    bad = [k for k, v in (terms or {}).items() if not torch.isfinite(v.detach()).all()]
    return f"loss {loss.detach().float().flatten()[:4].tolist()}" + (f" from terms {bad}" if bad else "")


class _NonFiniteCachedLoss(Exception):
    def __init__(self, value: Tensor) -> None:
        super().__init__("non-finite loss")
        self.value = value
