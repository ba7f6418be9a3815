"""Feature Transformation: the mixing formulas, the Beta sampler, gradcheck and bf16 autocast."""

import pytest
import torch
import torch.nn.functional as F

from contrasuite.core.negatives.feature_transformation import (
    FeatureTransformation,
    extrapolate_positive,
    interpolate_negatives,
    sample_beta,
)
from contrasuite.core.objectives import InfoNCE


@pytest.mark.parametrize("alpha", [0.5, 1.6, 2.0])
def test_beta_sampler_moments_and_range(alpha):
    x = sample_beta(alpha, (100_000,), torch.Generator().manual_seed(0), torch.float64)
    assert ((x > 0) & (x < 1)).all()
    assert x.mean().item() == pytest.approx(0.5, abs=0.005)
    assert x.var().item() == pytest.approx(1 / (4 * (2 * alpha + 1)), rel=0.03)


def test_same_generator_same_draws():
    a = sample_beta(2.0, (5,), torch.Generator().manual_seed(7))
    b = sample_beta(2.0, (5,), torch.Generator().manual_seed(7))
    assert torch.equal(a, b) and not torch.equal(a, sample_beta(2.0, (5,), torch.Generator().manual_seed(8)))


@pytest.mark.parametrize("per_sample", [False, True])
def test_extrapolation_formula_and_range(per_sample):
    torch.manual_seed(0)
    q, k = torch.randn(6, 4, dtype=torch.float64), torch.randn(6, 4, dtype=torch.float64)
    q_hat, k_hat, lam = extrapolate_positive(q, k, 2.0, per_sample=per_sample, generator=torch.Generator().manual_seed(1))
    assert lam.shape == ((6, 1) if per_sample else (1, 1))
    assert ((lam >= 1) & (lam <= 2)).all()
    for i in range(6):
        l = float(lam[i if per_sample else 0])
        assert torch.allclose(q_hat[i], l * q[i] + (1 - l) * k[i])
        assert torch.allclose(k_hat[i], l * k[i] + (1 - l) * q[i])
    # the pair is pushed apart along q - k: distance grows by 2 lambda - 1 >= 1
    assert ((q_hat - k_hat).norm(dim=1) >= (q - k).norm(dim=1) - 1e-12).all()


def test_interpolation_formula_and_normalize():
    torch.manual_seed(1)
    n = torch.randn(7, 3, dtype=torch.float64)
    mixed, lam, perm = interpolate_negatives(n, 1.6, per_sample=True, generator=torch.Generator().manual_seed(2))
    assert ((lam > 0) & (lam < 1)).all() and sorted(perm.tolist()) == list(range(7))
    for i in range(7):
        assert torch.allclose(mixed[i], lam[i] * n[i] + (1 - lam[i]) * n[perm[i]])
    normed, _, _ = interpolate_negatives(n, 1.6, normalize=True, generator=torch.Generator().manual_seed(2))
    assert torch.allclose(normed.norm(dim=1), torch.ones(7, dtype=torch.float64))


def test_module_builds_contract_inputs():
    torch.manual_seed(2)
    q, k, queue = torch.randn(4, 8), torch.randn(4, 8), torch.randn(10, 8)
    out = FeatureTransformation()(q, k, queue, generator=torch.Generator().manual_seed(0))
    assert out.candidates.shape == (14, 8) and out.pos_mask.shape == (4, 14)
    assert out.pos_mask[:, :4].diagonal().all() and out.pos_mask.sum() == 4
    loss = InfoNCE(0.2)(out.anchors, out.candidates, pos_mask=out.pos_mask)
    assert torch.isfinite(loss)
    # extrapolation makes the positive harder: the positive cosine drops
    assert (F.cosine_similarity(out.anchors, out.candidates[:4]) <= F.cosine_similarity(q, k) + 1e-6).all()


def test_gradcheck_through_mixing():
    torch.manual_seed(3)
    q = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    k = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    neg = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)

    def fn(q, k, neg):
        out = FeatureTransformation(per_sample=True, normalize=True)(q, k, neg, generator=torch.Generator().manual_seed(0))
        return InfoNCE(0.3)(out.anchors, out.candidates, pos_mask=out.pos_mask)

    assert torch.autograd.gradcheck(fn, (q, k, neg))


def test_bf16_autocast_finite():
    torch.manual_seed(4)
    q = torch.randn(32, 16, requires_grad=True)
    k = (q.detach() + 1e-4 * torch.randn(32, 16)).requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = FeatureTransformation()(q.to(torch.bfloat16), k.to(torch.bfloat16), torch.randn(64, 16).to(torch.bfloat16),
                                      generator=torch.Generator().manual_seed(0))
        loss = InfoNCE(0.01)(out.anchors, out.candidates, pos_mask=out.pos_mask)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(q.grad).all() and torch.isfinite(k.grad).all()
