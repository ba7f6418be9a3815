"""Numerics shared by every objective: fp32 loss math under any autocast, finite masking.

Policy (docs/architecture.md, from the agreed design): similarities are upcast before ``exp``/``log``/``logsumexp``; masks never use
``-inf`` or magic constants; clamps use an epsilon that exists in the working dtype.
"""

from __future__ import annotations

import contextlib
import math
from typing import Iterator

import torch
from torch import Tensor


def loss_dtype(x: Tensor) -> torch.dtype:
    """The dtype loss math runs in: float32, or float64 when the input already is (gradcheck)."""
    return torch.float64 if x.dtype == torch.float64 else torch.float32


@contextlib.contextmanager
def full_precision(*tensors: Tensor) -> Iterator[None]:
    """Disable autocast for the device type of ``tensors`` so matmuls and reductions stay in fp32
    (nothing to do, and no autocast context entered, when it is already off)."""
    device_type = tensors[0].device.type if tensors else "cpu"
    if not torch.amp.is_autocast_available(device_type) or not torch.is_autocast_enabled(device_type):
        yield
        return
    with torch.autocast(device_type=device_type, enabled=False):
        yield


def upcast(x: Tensor) -> Tensor:
    """Return ``x`` in the loss dtype (a no-op for float32/float64 input)."""
    return x.to(loss_dtype(x))


def masked_logsumexp(x: Tensor, mask: Tensor, dim: int = -1, keepdim: bool = False) -> Tensor:
    """``log(sum_{mask} exp(x))`` along ``dim`` with max-subtraction and no ``-inf`` masking.

    Masked-out entries are replaced by the dtype's lowest finite value before ``torch.logsumexp``
    (which subtracts the row max), so they contribute exactly 0 and their gradient is exactly 0: no
    ``inf`` is ever formed, even where ``x`` is large outside the mask. Rows whose mask is empty
    return ``log(tiny)`` of the dtype (a large, finite negative number, constant in ``x``), so that
    ``logaddexp(a, masked_logsumexp(...))`` reduces to ``a`` without producing NaN.
    """
    filled = torch.where(mask, x, torch.finfo(x.dtype).min)
    out = torch.logsumexp(filled, dim=dim, keepdim=True)
    empty_value = math.log(torch.finfo(x.dtype).tiny)
    out = torch.where(mask.any(dim=dim, keepdim=True), out, empty_value)
    return out if keepdim else out.squeeze(dim)


def logsumexp_rows(x: Tensor, scratch_bytes: int = 1 << 20) -> Tensor:
    """``torch.logsumexp(x, dim=1)`` of a 2-D ``x``, to the bit, a block of rows at a time.

    The same operations as ``torch.logsumexp`` (row max, infinite maxima taken as 0, ``exp(x - max)``, sum, log,
    plus the max), with ``exp(x - max)`` written into one scratch buffer of about ``scratch_bytes`` that each block
    of rows reuses instead of a fresh ``N x M`` tensor. A multiple of 64 rows per block keeps each row's place
    relative to 64-byte boundaries as in the whole tensor. A large temporary costs a page fault per 4 KB page each
    time it is allocated and first written (glibc maps and unmaps anything above 32 MB: 15,774 faults for
    4,019 x 4,019 floats); a 1 MB scratch is reused and stays in the CPU's cache for the sum.
    """
    n, m = x.shape
    block = max(64, scratch_bytes // max(1, m * x.element_size()) // 64 * 64)
    scratch = torch.empty(min(block, n), m, dtype=x.dtype, device=x.device)
    out = torch.empty(n, dtype=x.dtype, device=x.device)
    for start in range(0, n, block):
        rows, result = x[start : start + block], out[start : start + block]
        top = rows.amax(dim=1, keepdim=True)
        top.masked_fill_(top.abs() == math.inf, 0)
        e = torch.sub(rows, top, out=scratch[: rows.shape[0]]).exp_()
        torch.sum(e, dim=1, out=result)
        result.log_().add_(top.squeeze(1))
    return out


def logsumexp_backward(x: Tensor, lse: Tensor, grad: Tensor) -> Tensor:
    """The gradient ``g_i exp(x_ij - lse_i)`` of ``lse = logsumexp(x, dim=1)`` for ``grad [N]``: autograd's own
    formula for ``torch.logsumexp`` (the same operations, so the same bits) in one new ``[N, M]`` buffer."""
    return (x - lse[:, None]).exp_().mul_(grad[:, None])


def exp_shifted_(x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Overwrite ``x`` with ``E = exp(x - max)`` along the last dimension; return ``(E, s, lse)``, ``s`` the
    sums of ``E`` and ``lse = max + log s`` (``torch.logsumexp``). The backward of ``lse`` is then
    ``g E / s``, with no exponential recomputed; entries at the dtype's lowest value get ``E = 0`` exactly."""
    top = x.amax(dim=-1, keepdim=True)
    e = x.sub_(top).exp_()
    total = e.sum(dim=-1)
    return e, total, top.squeeze(-1) + total.log()


def safe_log1m(s: Tensor, eps: float = 1e-6) -> Tensor:
    """``log(1 - s)`` with ``s`` clamped to ``<= 1 - eps``; ``eps`` is raised to the dtype's resolution.

    ``log(1 - s)`` rather than ``log1p(-s)``: for ``s <= 1 - eps`` they differ by about one unit in the
    last place of ``1``, and torch's CPU ``log1p`` is not vectorised (measured 12x slower than ``log``
    on ``[256, 51]``, 250x on ``[1024, 1024]``)."""
    eps = max(eps, float(torch.finfo(s.dtype).eps))
    return torch.rsub(s.clamp(max=1.0 - eps), 1.0).log_()


class NonFiniteLossError(FloatingPointError):
    """Raised when an objective produces a non-finite value; the message names the statistic."""


def check_finite(value: Tensor, what: str) -> Tensor:
    """Raise :class:`NonFiniteLossError` naming ``what`` when ``value`` holds NaN or Inf."""
    if not torch.isfinite(value).all():
        raise NonFiniteLossError(f"non-finite {what}: {value.detach().flatten()[:8].tolist()}")
    return value
