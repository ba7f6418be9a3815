"""Focal-InfoNCE against a plain loop and the official square-logits form, closed form, gradients, bf16."""

import math

import pytest
import torch
import torch.nn.functional as F

from contrasuite.core.objectives import OBJECTIVES, FocalInfoNCE, focal_logits
from contrasuite.core.pairs import Pairs, append_negatives, resolve_pairs, two_view
from tests.bf16_check import assert_finite_in_bf16, hard_pair


def loop_reference(anchors, candidates, pos, valid, t, m, weight=None):
    z = F.normalize(anchors.double(), dim=1)
    c = F.normalize(candidates.double(), dim=1)
    total, count = 0.0, 0
    for i in range(z.shape[0]):
        s = [float(z[i] @ c[j]) for j in range(c.shape[0])]
        positives = [j for j in range(c.shape[0]) if pos[i, j] and valid[i, j]]
        negatives = [j for j in range(c.shape[0]) if valid[i, j] and not pos[i, j]]
        if not positives:
            continue
        neg_sum = sum((1.0 if weight is None else float(weight[i, j])) * math.exp((s[j] + m) * s[j] / t) for j in negatives)
        total += sum(-s[p] * s[p] / t + math.log(math.exp(s[p] * s[p] / t) + neg_sum) for p in positives) / len(positives)
        count += 1
    return total / count


def test_registered_with_official_defaults():
    obj = OBJECTIVES["focal_infonce"]()
    assert isinstance(obj, FocalInfoNCE) and (obj.temperature, obj.margin) == (0.05, 0.3)


def test_identical_embeddings_closed_form():
    n, t, m = 8, 0.05, 0.3
    z = torch.ones(n, 4)
    # -1/t + log(e^{1/t} + (N - 1) e^{(1 + m)/t}) = log(1 + (N - 1) e^{m/t})
    expected = math.log1p((n - 1) * math.exp(m / t))
    assert FocalInfoNCE(t, m)(z, z.clone()).item() == pytest.approx(expected, rel=1e-6)


def test_official_square_form():
    # Official sp_logits: cos matrix, diagonal s*s/t, off-diagonal (s+m)*s/t, cross-entropy with arange labels.
    torch.manual_seed(0)
    a, b = torch.randn(10, 6), torch.randn(10, 6)
    cos = F.normalize(a, dim=1) @ F.normalize(b, dim=1).T
    eye = torch.eye(10, dtype=torch.bool)
    logits = torch.where(eye, cos * cos, (cos + 0.3) * cos) / 0.05
    official = F.cross_entropy(logits, torch.arange(10))
    assert FocalInfoNCE()(a, b).item() == pytest.approx(official.item(), rel=1e-5)


def test_matches_loop_labels_weights_extra_columns():
    torch.manual_seed(1)
    x = torch.randn(10, 5)
    labels = torch.tensor([0, 0, 1, 1, 1, 2, 3, 3, 4, 4])
    _, pairs = resolve_pairs(x, labels=labels)
    assert FocalInfoNCE(0.2, 0.1)(x, labels=labels).item() == pytest.approx(
        loop_reference(x, x, pairs.pos, pairs.valid, 0.2, 0.1), rel=1e-5
    )
    q, k, gen = torch.randn(5, 4), torch.randn(5, 4), torch.randn(2, 4)
    cands, pos = append_negatives(k, None, gen, n_anchors=5)
    w = torch.rand(5, 7) + 0.2
    loss = FocalInfoNCE(0.2)(q, cands, pos_mask=pos, neg_weight=w)
    assert loss.item() == pytest.approx(loop_reference(q, cands, pos, torch.ones_like(pos), 0.2, 0.3, w), rel=1e-5)


def test_modulation_is_not_detached():
    s = torch.tensor([[0.6, -0.2]], requires_grad=True)
    pos = torch.tensor([[True, False]])
    focal_logits(s, Pairs(pos=pos, valid=torch.ones_like(pos)), 0.5, 0.3).sum().backward()
    assert torch.allclose(s.grad, torch.tensor([[2 * 0.6 / 0.5, (2 * -0.2 + 0.3) / 0.5]]))


def test_gradcheck_float64():
    torch.manual_seed(2)
    q = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
    k = torch.randn(7, 3, dtype=torch.float64, requires_grad=True)
    w = (torch.rand(5, 7, dtype=torch.float64) + 0.5).requires_grad_()
    assert torch.autograd.gradcheck(lambda q, k, w: FocalInfoNCE(0.2)(q, k, neg_weight=w), (q, k, w))


@pytest.mark.parametrize("near_duplicate", [False, True])
def test_bf16_autocast_low_temperature_finite(near_duplicate):
    anchors, labels = two_view(*hard_pair(3, near_duplicate, grad=False))
    anchors.requires_grad_()
    assert_finite_in_bf16(lambda: FocalInfoNCE(0.01)(anchors, labels=labels), anchors)


def test_bad_input_errors():
    with pytest.raises(ValueError, match="temperature"):
        FocalInfoNCE(temperature=0.0)
    with pytest.raises(ValueError, match="labels or pos_mask"):
        FocalInfoNCE()(torch.randn(4, 3))


def test_focal_logits_gradient_matches_autograd_of_the_formula():
    torch.manual_seed(3)
    s = (torch.rand(4, 6, dtype=torch.float64) * 2 - 1).requires_grad_()
    pos = torch.zeros(4, 6, dtype=torch.bool)
    pos[[0, 1, 1, 3], [0, 1, 4, 5]] = True  # two positives in row 1, none in row 2
    w = torch.randn(4, 6, dtype=torch.float64)
    (focal_logits(s, Pairs(pos=pos, valid=torch.ones_like(pos)), 0.3, 0.2) * w).sum().backward()
    ref = s.detach().clone().requires_grad_()
    (torch.where(pos, ref * ref, (ref + 0.2) * ref) / 0.3 * w).sum().backward()
    assert torch.allclose(s.grad, ref.grad, atol=1e-12)
    assert torch.autograd.gradcheck(lambda x: focal_logits(x, Pairs(pos=pos, valid=pos | ~pos), 0.3, 0.2), (s,))
