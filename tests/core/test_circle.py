"""CircleLoss against a plain-loop reference, hand-made cases, gradcheck and bf16 autocast."""

import math

import pytest
import torch
import torch.nn.functional as F

from contrasuite.core.objectives import CircleLoss
from contrasuite.core.pairs import resolve_pairs
from tests.bf16_check import assert_finite_in_bf16, hard_pair
from tests.pair_similarities import positives_and_negatives


def loop_reference(anchors, candidates, pos, valid, m, gamma):
    """Eq. 4 of Sun et al. with plain loops, in float64; mean over anchors that have a positive."""
    rows = positives_and_negatives(anchors, candidates, pos, valid)
    total = 0.0
    for sp, sn in rows:
        neg_sum = sum(math.exp(gamma * max(s + m, 0.0) * (s - m)) for s in sn)
        pos_sum = sum(math.exp(-gamma * max(1 + m - s, 0.0) * (s - (1 - m))) for s in sp)
        total += math.log1p(neg_sum * pos_sum)
    return total / len(rows)


@pytest.mark.parametrize("m,gamma", [(0.4, 80.0), (0.25, 128.0), (0.25, 8.0)])
def test_matches_loop_with_labels(m, gamma):
    torch.manual_seed(0)
    x = torch.randn(12, 6)
    labels = torch.tensor([0, 0, 1, 1, 1, 2, 3, 3, 4, 5, 5, 5])
    loss = CircleLoss(m=m, gamma=gamma)(x, labels=labels)
    _, pairs = resolve_pairs(x, labels=labels)
    assert loss.item() == pytest.approx(loop_reference(x, x, pairs.pos, pairs.valid, m, gamma), rel=1e-5)


def test_matches_loop_with_candidates_and_pos_mask():
    torch.manual_seed(1)
    q, k = torch.randn(5, 4), torch.randn(8, 4)
    pos = torch.rand(5, 8) < 0.3
    pos[:, 0] = True
    loss = CircleLoss(gamma=32.0)(q, k, pos_mask=pos)
    ref = loop_reference(q, k, pos, torch.ones_like(pos), 0.4, 32.0)
    assert loss.item() == pytest.approx(ref, rel=1e-5)


def test_hand_made_two_dimensional_case():
    # Anchor at angle 0; positive at 60 degrees (s_p = 0.5); negative at 90 degrees (s_n = 0).
    a = torch.tensor([[1.0, 0.0]])
    cands = torch.tensor([[0.5, math.sqrt(3) / 2], [0.0, 1.0]])
    m, gamma = 0.25, 10.0
    expected = math.log1p(math.exp(gamma * m * (0 - m)) * math.exp(-gamma * (1 + m - 0.5) * (0.5 - (1 - m))))
    loss = CircleLoss(m=m, gamma=gamma)(a, cands, pos_mask=torch.tensor([[True, False]]))
    assert loss.item() == pytest.approx(expected, rel=1e-6)


def test_anchor_without_negatives_contributes_zero():
    a = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    c = torch.tensor([[0.5, 0.5], [0.0, 1.0]])
    only_pos = torch.tensor([[True, True], [False, True]])
    loss = CircleLoss()(a, c, pos_mask=only_pos)
    single = CircleLoss()(a[1:], c, pos_mask=only_pos[1:])
    assert loss.item() == pytest.approx(single.item() / 2, rel=1e-6)


def test_detached_weights_gradient_matches_manual():
    torch.manual_seed(2)
    q = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    k = torch.randn(6, 3, dtype=torch.float64)
    pos = torch.eye(4, 6, dtype=torch.bool)
    CircleLoss(m=0.3, gamma=5.0)(q, k, pos_mask=pos).backward()
    # Manual: the weights are constants computed from the current similarities.
    q2 = q.detach().clone().requires_grad_()
    s = F.normalize(q2, dim=1) @ F.normalize(k, dim=1).T
    ap, an = torch.relu(1.3 - s.detach()), torch.relu(s.detach() + 0.3)
    pos_l = torch.where(pos, -5.0 * ap * (s - 0.7), torch.full_like(s, -1e9))
    neg_l = torch.where(~pos, 5.0 * an * (s - 0.3), torch.full_like(s, -1e9))
    F.softplus(torch.logsumexp(pos_l, 1) + torch.logsumexp(neg_l, 1)).mean().backward()
    assert torch.allclose(q.grad, q2.grad, atol=1e-10)


def test_gradcheck_float64_undetached():
    torch.manual_seed(3)
    q = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
    k = torch.randn(7, 3, dtype=torch.float64, requires_grad=True)
    pos = torch.eye(5, 7, dtype=torch.bool)
    pos[0, 6] = True
    fn = lambda q, k: CircleLoss(m=0.25, gamma=4.0, detach_weights=False)(q, k, pos_mask=pos)
    assert torch.autograd.gradcheck(fn, (q, k))


@pytest.mark.parametrize("near_duplicate", [False, True])
def test_bf16_autocast_large_gamma_finite(near_duplicate):
    q, k = hard_pair(4, near_duplicate)
    assert_finite_in_bf16(lambda: CircleLoss(m=0.25, gamma=256.0)(q, k), q, k)


def test_rejects_neg_weight_and_bad_gamma():
    with pytest.raises(ValueError, match="neg_weight"):
        CircleLoss()(torch.randn(3, 2), torch.randn(3, 2), neg_weight=torch.ones(3, 3))
    with pytest.raises(ValueError, match="gamma"):
        CircleLoss(gamma=0)


@pytest.mark.parametrize("form", ["two_view", "labels", "mask"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_fused_rows_equal_the_whole_matrix_form_in_loss_and_gradient(monkeypatch, form, dtype):
    """Blocks of 4 rows (so the rows split unevenly), against autograd through the whole-matrix form."""
    from contrasuite.core.objectives import circle
    from contrasuite.core.pairs import Pairs

    monkeypatch.setattr(circle, "BLOCK_BYTES", 4 * 4 * 13)
    torch.manual_seed(4)
    n, m = 13, 13
    if form == "two_view":  # diagonal positives at offset n // 2, self-pairs excluded
        pairs = Pairs.single_positive((torch.arange(n) + 6) % n, m, exclude_self=True)
    elif form == "labels":
        labels = torch.tensor([0, 0, 1, 1, 1, 2, 3, 3, 4, 5, 5, 5, 6])  # 2, 4 and 6 alone: no positive
        pairs = Pairs.of_labels(labels, labels, 0)
    else:
        pos = torch.rand(n, m) < 0.3
        pos[0] = True  # an anchor without negatives
        pairs = Pairs(pos=pos, valid=torch.ones(n, m, dtype=torch.bool))
    sim = (torch.rand(n, m, dtype=dtype) * 2 - 1).requires_grad_()
    upstream = torch.rand(n, dtype=dtype)
    fused = circle.circle_loss(sim, pairs, m=0.25, gamma=32.0)
    (fused_grad,) = torch.autograd.grad(fused, sim, upstream)
    whole = circle.circle_loss_autograd(sim, pairs, m=0.25, gamma=32.0)
    (whole_grad,) = torch.autograd.grad(whole, sim, upstream)
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    assert torch.allclose(fused, whole, rtol=tol, atol=tol) and bool((fused == 0).any()) == (form != "two_view")
    assert torch.allclose(fused_grad, whole_grad, rtol=tol, atol=tol * float(whole_grad.abs().max()))
