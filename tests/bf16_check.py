"""The bf16 check of an objective's tests: on hard inputs (a near duplicate, a low temperature) a loss computed
under CPU bf16 autocast is fp32 and finite, and so are its gradients."""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor


def hard_pair(seed: int, near_duplicate: bool, grad: bool = True) -> tuple[Tensor, Tensor]:
    """Two ``[64, 32]`` batches drawn after ``torch.manual_seed(seed)``: random, the second a near duplicate of the
    first (noise 1e-4) or random too; leaves that require grad unless ``grad=False``."""
    torch.manual_seed(seed)
    base = torch.randn(64, 32)
    other = base + 1e-4 * torch.randn_like(base) if near_duplicate else torch.randn(64, 32)
    return base.requires_grad_(grad), other.requires_grad_(grad)


def assert_finite_in_bf16(loss_of: Callable[[], Tensor], *leaves: Tensor) -> None:
    """``loss_of()`` under CPU bf16 autocast is an fp32 scalar, finite, and backward gives each of ``leaves`` a finite
    gradient."""
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = loss_of()
    loss.backward()
    assert loss.dtype == torch.float32
    assert torch.isfinite(loss) and all(torch.isfinite(x.grad).all() for x in leaves)
