"""Soft-InfoNCE weights and loss against plain loops, InfoNCE special cases, gradcheck, bf16, errors."""

import math

import pytest
import torch
import torch.nn.functional as F

from contrasuite.core.objectives import OBJECTIVES, InfoNCE, SoftInfoNCE, soft_infonce_weights
from contrasuite.core.pairs import append_negatives, resolve_pairs
from tests.bf16_check import assert_finite_in_bf16, hard_pair


def loop_weights(prior, pos, t, alpha, beta):
    """w_ij = max(0.1, (beta - alpha p_ij) / (beta - alpha / K_i)), p = softmax over negatives of prior / t."""
    n, m = prior.shape
    w = [[1.0] * m for _ in range(n)]
    for i in range(n):
        negs = [j for j in range(m) if not pos[i][j]]
        z = sum(math.exp(float(prior[i, j]) / t) for j in negs)
        for j in negs:
            p = math.exp(float(prior[i, j]) / t) / z
            w[i][j] = max(0.1, (beta - alpha * p) / (beta - alpha / len(negs)))
    return torch.tensor(w, dtype=torch.float64)


def loop_loss(q, c, pos, w):
    """-x_ii + log(exp(x_ii) + sum_j w_ij exp(x_ij)), raw dot products, one positive per row."""
    total = 0.0
    for i in range(q.shape[0]):
        x = [float(q[i].double() @ c[j].double()) for j in range(c.shape[0])]
        p = [j for j in range(c.shape[0]) if pos[i][j]][0]
        denom = math.exp(x[p]) + sum(float(w[i, j]) * math.exp(x[j]) for j in range(c.shape[0]) if not pos[i][j])
        total += -x[p] + math.log(denom)
    return total / q.shape[0]


def test_registered_with_official_defaults():
    obj = OBJECTIVES["soft_infonce"]()
    assert isinstance(obj, SoftInfoNCE)
    assert (obj.t, obj.alpha, obj.beta, obj.temperature, obj.similarity) == (1.0, 1.0, 1.0, 1.0, "dot")


@pytest.mark.parametrize("t,alpha,beta", [(1.0, 1.0, 1.0), (0.2, 0.7, 1.3), (0.05, 5.0, 1.0)])
def test_weights_match_loop(t, alpha, beta):
    torch.manual_seed(0)
    prior = torch.randn(6, 9)
    _, pos = append_negatives(torch.randn(6, 3), None, torch.randn(3, 3), n_anchors=6)
    _, pairs = resolve_pairs(torch.randn(6, 3), torch.randn(9, 3), pos_mask=pos)
    w = soft_infonce_weights(prior, t, alpha, beta, pairs)
    assert torch.allclose(w.double(), loop_weights(prior, pos.tolist(), t, alpha, beta), atol=1e-6)
    assert float(w.min()) >= 0.1


def test_uniform_prior_or_zero_alpha_is_infonce():
    torch.manual_seed(1)
    q, k = torch.randn(8, 4), torch.randn(8, 4)
    plain = InfoNCE(temperature=1.0, similarity="dot")(q, k)
    assert SoftInfoNCE()(q, k, prior=torch.zeros(8, 8)).item() == pytest.approx(plain.item(), rel=1e-6)
    assert SoftInfoNCE(alpha=0.0)(q, k, prior=torch.randn(8, 8)).item() == pytest.approx(plain.item(), rel=1e-6)
    assert SoftInfoNCE()(q, k).item() == pytest.approx(plain.item(), rel=1e-6)


def test_floor_and_relevant_negative_weighted_down():
    prior = torch.tensor([[0.0, 50.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0], [0.0] * 4, [0.0] * 4])
    w = soft_infonce_weights(prior, t=1.0, alpha=1.0, beta=1.0)
    assert w[0, 1].item() == pytest.approx(0.1)  # p ~ 1 -> (1 - 1) / (1 - 1/3) = 0 -> floor
    assert w[0, 2].item() == pytest.approx(1.0 / (1 - 1 / 3), rel=1e-5)  # p ~ 0
    assert torch.allclose(w[1:], torch.ones(3, 4))


def test_loss_matches_loop_with_prior():
    torch.manual_seed(2)
    q, k, prior = torch.randn(6, 4), torch.randn(6, 4), torch.randn(6, 6)
    eye = torch.eye(6, dtype=torch.bool)
    loss = SoftInfoNCE(t=0.5, alpha=0.8)(q, k, prior=prior)
    ref = loop_loss(q, k, eye.tolist(), loop_weights(prior, eye.tolist(), 0.5, 0.8, 1.0))
    assert loss.item() == pytest.approx(ref, rel=1e-5)


def test_prior_gets_no_gradient():
    prior = torch.randn(5, 5, requires_grad=True)
    assert not soft_infonce_weights(prior).requires_grad
    q = torch.randn(5, 3, requires_grad=True)
    SoftInfoNCE()(q, torch.randn(5, 3), prior=prior).backward()
    assert prior.grad is None and q.grad is not None


def test_gradcheck_float64():
    torch.manual_seed(3)
    q = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
    k = torch.randn(7, 3, dtype=torch.float64, requires_grad=True)
    w = soft_infonce_weights(torch.randn(5, 7, dtype=torch.float64), pairs=resolve_pairs(q, k)[1])
    assert torch.autograd.gradcheck(lambda q, k: SoftInfoNCE(temperature=0.5)(q, k, neg_weight=w), (q, k))


@pytest.mark.parametrize("similarity", ["dot", "cosine"])
@pytest.mark.parametrize("near_duplicate", [False, True])
def test_bf16_autocast_low_temperature_finite(similarity, near_duplicate):
    q, k = hard_pair(4, near_duplicate)
    assert_finite_in_bf16(lambda: SoftInfoNCE(temperature=0.01, similarity=similarity)(q, k, prior=q.detach() @ k.detach().T), q, k)


def test_bad_input_errors():
    q, k = torch.randn(4, 3), torch.randn(4, 3)
    with pytest.raises(ValueError, match="either prior or neg_weight"):
        SoftInfoNCE()(q, k, prior=torch.zeros(4, 4), neg_weight=torch.ones(4, 4))
    with pytest.raises(ValueError, match="prior must be"):
        SoftInfoNCE()(q, k, prior=torch.zeros(4, 5))
    with pytest.raises(ValueError, match="beta - alpha / K"):
        SoftInfoNCE(alpha=3.0, beta=1.0)(q, k, prior=torch.zeros(4, 4))
    with pytest.raises(ValueError, match="unknown similarity"):
        SoftInfoNCE(similarity="l2")
    with pytest.raises(ValueError, match="t must be > 0"):
        SoftInfoNCE(t=0.0)


def test_objective_sum_hands_the_prior_only_to_terms_that_take_it():
    from contrasuite.core.objectives import ObjectiveSum

    torch.manual_seed(3)
    q, k = F.normalize(torch.randn(2, 6, 4), dim=2)
    prior = torch.randn(6, 6)
    total = ObjectiveSum([{"name": "infonce", "temperature": 0.5}, {"name": "soft_infonce", "t": 0.5, "alpha": 0.8}])
    assert total.takes_prior and not ObjectiveSum([{"name": "infonce"}]).takes_prior
    parts = total.parts(q, k, prior=prior)  # InfoNCE would raise on an unexpected prior= argument
    torch.testing.assert_close(parts["0:infonce"], InfoNCE(0.5)(q, k))
    torch.testing.assert_close(parts["1:soft_infonce"], SoftInfoNCE(t=0.5, alpha=0.8)(q, k, prior=prior))


def test_log_values_report_the_negatives_the_prior_flags():
    """One negative per row holds almost all the prior's mass: its weight hits the floor, the rest rise to 1.5."""
    n = 4
    prior = torch.zeros(n, n)
    prior[torch.arange(n), (torch.arange(n) + 1) % n] = 20.0
    z = F.normalize(torch.randn(n, 8, generator=torch.Generator().manual_seed(0)), dim=1)
    loss = SoftInfoNCE()
    assert loss.log_values() == {}
    loss(z, z.flip(0), prior=prior)
    values = loss.log_values()
    assert values["flagged_share"] == pytest.approx(1 / 3) and values["floor_share"] == pytest.approx(1 / 3)
    assert values["weight_min"] == pytest.approx(0.1)
    tiled = SoftInfoNCE(tile_size=2)
    tiled(z, z.flip(0), prior=prior)
    assert tiled.log_values() == {}  # the tiled path never holds the N x M weights
