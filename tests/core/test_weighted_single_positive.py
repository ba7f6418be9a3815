"""The single-positive, positive-out-of-the-denominator path of the weighted InfoNCE kernel
(``weighted_single_positive_infonce``, MEOW's and DCL's weighted form) gives the generic path's values and
gradients to the bit."""

import pytest
import torch
import torch.nn.functional as F

from contrasuite.core.numerics import logsumexp_rows
from contrasuite.core.objectives import InfoNCE
from contrasuite.core.objectives.infonce import weighted_infonce
from contrasuite.core.pairs import Pairs


def both(logits, pairs, weight):
    """(fast, generic) per-anchor losses and logit gradients; a weight that requires grad takes the generic path."""
    out = []
    for w in (weight, weight.clone().requires_grad_()):
        x = logits.clone().requires_grad_()
        loss = weighted_infonce(x, pairs, w, positive_in_denominator=False)
        (grad,) = torch.autograd.grad(loss.mul(torch.linspace(0.5, 1.5, loss.shape[0])).sum(), x)
        out.append((loss.detach(), grad))
    return out


@pytest.mark.parametrize("exclude_self", [False, True])
@pytest.mark.parametrize("n", [64, 700])  # 700: several blocks of logsumexp_rows' 1 MB scratch
def test_fast_path_is_the_generic_path_to_the_bit(exclude_self, n):
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(n, n, generator=g) * 3
    targets = torch.randperm(n, generator=g)
    if exclude_self:
        targets = (torch.arange(n) + 1) % n
    weight = torch.randint(0, 3, (n, n), generator=g).float()  # zero weights drop negatives
    weight[5] = 0.0  # a row without any negative
    pairs = Pairs.single_positive(targets, n, exclude_self=exclude_self)
    (fast, g_fast), (generic, g_generic) = both(logits, pairs, weight)
    assert torch.equal(fast, generic) and torch.equal(g_fast, g_generic)
    assert g_fast[5].abs().sum() > 0  # only the positive's gradient in the row without negatives


def test_meow_objective_call_is_unchanged():
    g = torch.Generator().manual_seed(1)
    a = F.normalize(torch.randn(300, 16, generator=g), dim=1)
    b = F.normalize(torch.randn(300, 16, generator=g), dim=1)
    c = torch.stack([torch.randint(7, (300,), generator=g), torch.randint(20, (300,), generator=g)])
    weight = sum((k[:, None] != k[None, :]).float() for k in c)
    objective = InfoNCE(temperature=0.4, positive_in_denominator=False)
    grads = []
    for w in (weight, weight.clone().requires_grad_()):
        x, y = a.clone().requires_grad_(), b.clone().requires_grad_()
        loss = objective(x, y, neg_weight=w)
        grads.append((loss.detach(), *torch.autograd.grad(loss, [x, y])))
    assert all(torch.equal(p, q) for p, q in zip(*grads))


@pytest.mark.parametrize("scratch_bytes", [1 << 20, 4096, 1 << 30])
def test_logsumexp_rows_is_torch_logsumexp_to_the_bit(scratch_bytes):
    g = torch.Generator().manual_seed(2)
    x = torch.randn(300, 517, generator=g) * 20  # 517 columns: no row a multiple of a vector's width
    x[x > 25] = torch.finfo(x.dtype).min  # masked entries, as the weighted kernel fills them
    x[3] = torch.finfo(x.dtype).min  # a row without any entry
    assert torch.equal(logsumexp_rows(x, scratch_bytes), torch.logsumexp(x, dim=1))
    special = torch.tensor([[float("inf"), 1.0], [float("-inf"), float("-inf")], [float("nan"), 0.0]])
    assert torch.equal(logsumexp_rows(special).isnan(), torch.logsumexp(special, 1).isnan())
    assert torch.equal(logsumexp_rows(special)[:2], torch.logsumexp(special, 1)[:2])
