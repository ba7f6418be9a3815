"""InfoNCE against a plain-loop reference, closed forms, gradcheck and bf16 autocast."""

import math

import pytest
import torch
import torch.nn.functional as F

from contrasuite.core.objectives import InfoNCE
from contrasuite.core.pairs import append_negatives, resolve_pairs, two_view
from contrasuite.core.similarity import normalize
from tests.bf16_check import assert_finite_in_bf16, hard_pair


def loop_reference(anchors, candidates, pos, valid, t, weight=None, a=1.0, supcon=False):
    """Plain Python loops over the weighted-denominator formula."""
    z = F.normalize(anchors.double(), dim=1)
    c = F.normalize(candidates.double(), dim=1)
    total, count = 0.0, 0
    for i in range(z.shape[0]):
        positives = [j for j in range(c.shape[0]) if pos[i, j] and valid[i, j]]
        negatives = [j for j in range(c.shape[0]) if not pos[i, j] and valid[i, j]]
        if not positives:
            continue
        row = 0.0
        for p in positives:
            e = lambda j: math.exp(float(z[i] @ c[j]) / t)
            denom = a * e(p) + sum((1.0 if weight is None else float(weight[i, j])) * e(j) for j in negatives)
            if supcon:
                denom += sum(e(q) for q in positives if q != p)
            row += -math.log(e(p) / denom)
        total += row / len(positives)
        count += 1
    return total / count


def test_uniform_embeddings_closed_form():
    n = 16
    z = F.normalize(torch.ones(2 * n, 8), dim=1)
    anchors, labels = two_view(z[:n], z[n:])
    loss = InfoNCE(temperature=0.5)(anchors, labels=labels)
    assert loss.item() == pytest.approx(-math.log(1 / (2 * n - 1)), rel=1e-6)


@pytest.mark.parametrize("a,supcon", [(1.0, False), (0.0, False), (1.0, True)])
def test_matches_loop_with_labels(a, supcon):
    torch.manual_seed(0)
    x = torch.randn(12, 5)
    labels = torch.tensor([0, 0, 1, 1, 1, 2, 3, 3, 4, 5, 5, 5])
    loss = InfoNCE(0.3, positive_in_denominator=a == 1.0, other_positives_in_denominator=supcon)(x, labels=labels)
    _, pairs = resolve_pairs(x, labels=labels)
    ref = loop_reference(x, x, pairs.pos, pairs.valid, 0.3, a=a, supcon=supcon)
    assert loss.item() == pytest.approx(ref, rel=1e-5)


def test_matches_loop_with_weights_and_extra_negatives():
    torch.manual_seed(1)
    q, k, gen = torch.randn(6, 4), torch.randn(6, 4), torch.randn(3, 4)
    cands, pos = append_negatives(k, None, gen, n_anchors=6)
    w = torch.rand(6, 9) + 0.1
    loss = InfoNCE(0.2)(q, cands, pos_mask=pos, neg_weight=w)
    ref = loop_reference(q, cands, pos, torch.ones_like(pos), 0.2, weight=w)
    assert loss.item() == pytest.approx(ref, rel=1e-5)


def test_zero_weight_removes_negative():
    torch.manual_seed(2)
    q, k = torch.randn(4, 3), torch.randn(4, 3)
    w = torch.ones(4, 4)
    w[:, 3] = 0
    w[3, :] = 1
    full = InfoNCE(0.5)(q[:3], k[:3])
    dropped = InfoNCE(0.5)(q, k, neg_weight=w)
    per_ref = loop_reference(q, k, torch.eye(4, dtype=torch.bool), torch.ones(4, 4, dtype=torch.bool), 0.5, weight=w)
    assert dropped.item() == pytest.approx(per_ref, rel=1e-5)
    assert full.item() != pytest.approx(dropped.item())


def test_gradcheck_float64():
    torch.manual_seed(3)
    q = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
    k = torch.randn(7, 3, dtype=torch.float64, requires_grad=True)
    w = (torch.rand(5, 7, dtype=torch.float64) + 0.5).requires_grad_()
    fn = lambda q, k, w: InfoNCE(0.2)(q, k, neg_weight=w)
    assert torch.autograd.gradcheck(fn, (q, k, w))


@pytest.mark.parametrize("near_duplicate", [False, True])
def test_bf16_autocast_low_temperature_finite(near_duplicate):
    q, k = hard_pair(4, near_duplicate)
    assert_finite_in_bf16(lambda: InfoNCE(0.01)(q, k), q, k)


def test_bad_shapes_name_the_argument():
    with pytest.raises(ValueError, match="pos_mask"):
        InfoNCE()(torch.randn(4, 3), torch.randn(5, 3), pos_mask=torch.ones(4, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="labels or pos_mask"):
        InfoNCE()(torch.randn(4, 3))


def test_logsumexp_excluding_matches_autograd_of_masked_logsumexp():
    from contrasuite.core.numerics import masked_logsumexp
    from contrasuite.core.objectives.infonce import logsumexp_excluding

    torch.manual_seed(11)
    logits = torch.randn(5, 7, dtype=torch.float64, requires_grad=True)
    rows, cols = torch.tensor([0, 1, 1, 4]), torch.tensor([0, 1, 6, 2])
    targets = torch.tensor([3, 1, 0, 2, 2])  # rows 1 and 4: the target is also excluded (DCL)
    keep = torch.ones(5, 7, dtype=torch.bool)
    keep[rows, cols] = False
    w = torch.randn(5, dtype=torch.float64)
    (logsumexp_excluding(logits, (rows, cols), targets) * w).sum().backward()
    ref = logits.detach().clone().requires_grad_()
    expected = masked_logsumexp(ref, keep, dim=1) - ref[torch.arange(5), targets]
    (expected * w).sum().backward()
    assert torch.allclose(logsumexp_excluding(logits, (rows, cols), targets), expected, atol=1e-12)
    assert torch.allclose(logits.grad, ref.grad, atol=1e-12)
    assert torch.autograd.gradcheck(lambda x: logsumexp_excluding(x, (rows, cols)), (logits,))


def test_normalize_matches_f_normalize_and_gradcheck():
    torch.manual_seed(9)
    x = torch.randn(5, 4, dtype=torch.float64)
    x[3] = 1e-14  # a row below eps: the clamped norm is a constant, as in F.normalize
    ours, ref = x.clone().requires_grad_(), x.clone().requires_grad_()
    w = torch.randn(5, 4, dtype=torch.float64)
    (normalize(ours) * w).sum().backward()
    (F.normalize(ref, dim=-1) * w).sum().backward()
    assert torch.allclose(normalize(x), F.normalize(x, dim=-1)) and torch.allclose(ours.grad, ref.grad)
    assert torch.autograd.gradcheck(normalize, (x[:3].clone().requires_grad_(),))
