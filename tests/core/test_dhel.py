"""DHEL against a plain-loop reference of the official formula, closed form, gradcheck, bf16, errors."""

import math

import pytest
import torch
import torch.nn.functional as F

from contrasuite.core.numerics import masked_logsumexp
from contrasuite.core.objectives import DHEL, OBJECTIVES
from contrasuite.core.objectives.dhel import same_view_energy
from contrasuite.core.pairs import append_negatives, two_view
from tests.bf16_check import assert_finite_in_bf16, hard_pair


def loop_reference(anchors, candidates, t, include_augs=True, weight=None):
    """Python loops over -a_i.p_i/t + log sum_{j!=i} w exp(a_i.a_j/t) [+ extras] + log sum_{j!=i} exp(p_i.p_j/t)."""
    a = F.normalize(anchors.double(), dim=1)
    c = F.normalize(candidates.double(), dim=1)
    n, m = a.shape[0], c.shape[0]
    w = (lambda i, j: 1.0) if weight is None else (lambda i, j: float(weight[i, j]))
    total = 0.0
    for i in range(n):
        anchor_side = sum(w(i, j) * math.exp(float(a[i] @ a[j]) / t) for j in range(n) if j != i)
        anchor_side += sum(w(i, j) * math.exp(float(a[i] @ c[j]) / t) for j in range(n, m))
        row = -float(a[i] @ c[i]) / t + math.log(anchor_side)
        if include_augs:
            row += math.log(sum(math.exp(float(c[i] @ c[j]) / t) for j in range(n) if j != i))
        total += row
    return total / n


def test_registered_with_official_defaults():
    obj = OBJECTIVES["dhel"]()
    assert isinstance(obj, DHEL) and obj.temperature == 0.3 and obj.include_augs


def test_identical_embeddings_closed_form():
    n, t = 6, 0.3
    z = torch.ones(n, 4)
    # -1/t + 2 log((N - 1) e^{1/t}) = 1/t + 2 log(N - 1)
    assert DHEL(t)(z, z.clone()).item() == pytest.approx(1 / t + 2 * math.log(n - 1), rel=1e-6)
    assert DHEL(t, include_augs=False)(z, z.clone()).item() == pytest.approx(math.log(n - 1), rel=1e-6)


@pytest.mark.parametrize("include_augs", [True, False])
def test_matches_loop(include_augs):
    torch.manual_seed(0)
    a, p = torch.randn(7, 5), torch.randn(7, 5)
    loss = DHEL(0.3, include_augs=include_augs)(a, p)
    assert loss.item() == pytest.approx(loop_reference(a, p, 0.3, include_augs), rel=1e-5)


def test_official_vectorised_form():
    # The official code: -log(exp(a.p/t) / (sum_{j!=i} exp(a.a/t) * sum_{j!=i} exp(p.p/t))), mean.
    torch.manual_seed(1)
    a, p = F.normalize(torch.randn(9, 4), dim=1), F.normalize(torch.randn(9, 4), dim=1)
    off = 1 - torch.eye(9)
    ea, ep = torch.exp(a @ a.T / 0.3) * off, torch.exp(p @ p.T / 0.3) * off
    official = -torch.log(torch.exp((a * p).sum(1) / 0.3) / (ea.sum(1) * ep.sum(1))).mean()
    assert DHEL()(a, p).item() == pytest.approx(official.item(), rel=1e-5)


def test_extra_columns_and_weights_join_anchor_side():
    torch.manual_seed(2)
    a, p, gen = torch.randn(5, 4), torch.randn(5, 4), torch.randn(3, 4)
    cands, pos = append_negatives(p, None, gen, n_anchors=5)
    w = torch.rand(5, 8) + 0.2
    loss = DHEL(0.5)(a, cands, pos_mask=pos, neg_weight=w)
    assert loss.item() == pytest.approx(loop_reference(a, cands, 0.5, True, w), rel=1e-5)
    assert DHEL(0.5)(a, cands).item() == pytest.approx(loop_reference(a, cands, 0.5), rel=1e-5)


def test_gradcheck_float64():
    torch.manual_seed(3)
    a = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
    c = torch.randn(7, 3, dtype=torch.float64, requires_grad=True)
    w = (torch.rand(5, 7, dtype=torch.float64) + 0.5).requires_grad_()
    assert torch.autograd.gradcheck(lambda a, c, w: DHEL(0.3)(a, c, neg_weight=w), (a, c, w))
    # Without extra columns or weights: the fused same-view energies (both, and include_augs=False).
    p = c[:5].detach().clone().requires_grad_()
    assert torch.autograd.gradcheck(lambda a, p: DHEL(0.3)(a, p), (a, p))
    assert torch.autograd.gradcheck(lambda a, p: DHEL(0.3, include_augs=False)(a, p), (a, p))


def test_same_view_energy_matches_masked_logsumexp_and_gradcheck():
    torch.manual_seed(5)
    z = torch.randn(2, 6, 3, dtype=torch.float64)
    z[1, 4] = z[1, 1]  # duplicate rows: the self-pair must still be the only one left out
    off_diagonal = ~torch.eye(6, dtype=torch.bool)
    expected = torch.stack([masked_logsumexp(2.5 * v @ v.T, off_diagonal, dim=1) for v in z])
    assert torch.allclose(same_view_energy(z, 2.5), expected, atol=1e-12)
    assert torch.autograd.gradcheck(lambda v: same_view_energy(v, 2.5), (z.requires_grad_(),))


@pytest.mark.parametrize("near_duplicate", [False, True])
def test_bf16_autocast_low_temperature_finite(near_duplicate):
    a, p = hard_pair(4, near_duplicate)
    assert_finite_in_bf16(lambda: DHEL(0.01)(a, p), a, p)


def test_bad_input_errors():
    x = torch.randn(4, 3)
    anchors, labels = two_view(x, x)
    with pytest.raises(ValueError, match="every label must occur exactly twice"):
        DHEL()(anchors, labels=torch.zeros(8, dtype=torch.long))
    with pytest.raises(ValueError, match="takes no candidate_labels, pos_mask or neg_weight"):
        DHEL()(anchors, labels=labels, neg_weight=torch.ones(8, 8))
    with pytest.raises(ValueError, match="DHEL pairs anchor i with candidate i"):
        DHEL()(x, torch.randn(4, 3), pos_mask=torch.ones(4, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="at least 2 anchors"):
        DHEL()(torch.randn(1, 3), torch.randn(1, 3))
    with pytest.raises(ValueError, match="temperature"):
        DHEL(temperature=-1.0)
