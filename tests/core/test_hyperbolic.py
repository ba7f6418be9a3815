"""Poincare-ball ops and HyperbolicPairwiseCE: Mobius reference, plain loops, gradcheck, bf16."""

import math

import pytest
import torch
import torch.nn.functional as F

from contrasuite.core.objectives import HyperbolicPairwiseCE
from contrasuite.core.pairs import resolve_pairs, two_view
from contrasuite.core.similarity.poincare import (
    clip_features,
    expmap0,
    mobius_add,
    pairwise_poincare_distance,
    poincare_distance,
    to_ball,
)
from tests.bf16_check import assert_finite_in_bf16, hard_pair


def test_expmap0_hand_made():
    v = torch.tensor([[3.0, 4.0]], dtype=torch.float64)  # |v| = 5
    c = 0.1
    expected = math.tanh(math.sqrt(c) * 5) / (math.sqrt(c) * 5) * v
    assert torch.allclose(expmap0(v, c), expected)
    assert torch.allclose(clip_features(v, 2.3), v * 2.3 / 5)
    assert torch.allclose(clip_features(v, 10.0), v)


def test_distance_from_origin_closed_form():
    # d(0, y) = 2/sqrt(c) artanh(sqrt(c)|y|).
    y = torch.tensor([[0.3, 0.4]], dtype=torch.float64)
    c = 0.5
    assert poincare_distance(torch.zeros_like(y), y, c).item() == pytest.approx(
        2 / math.sqrt(c) * math.atanh(math.sqrt(c) * 0.5)
    )


def test_pairwise_closed_form_matches_mobius_and_arcosh():
    torch.manual_seed(0)
    c = 0.1
    x = to_ball(torch.randn(6, 5, dtype=torch.float64), c)
    y = to_ball(torch.randn(7, 5, dtype=torch.float64), c)
    fast = pairwise_poincare_distance(x, y, c)
    mobius = torch.stack([torch.stack([poincare_distance(x[i], y[j], c) for j in range(7)]) for i in range(6)])
    assert torch.allclose(fast, mobius, atol=1e-10)
    # Closed form via arcosh: d = 1/sqrt(c) arcosh(1 + 2c|x-y|^2 / ((1-c|x|^2)(1-c|y|^2))).
    sq = torch.cdist(x, y) ** 2
    denom = (1 - c * (x * x).sum(1, keepdim=True)) * (1 - c * (y * y).sum(1)[None])
    assert torch.allclose(fast, torch.acosh(1 + 2 * c * sq / denom) / math.sqrt(c), atol=1e-8)


def test_mobius_add_identities():
    torch.manual_seed(1)
    x = to_ball(torch.randn(4, 3, dtype=torch.float64), 0.3)
    assert torch.allclose(mobius_add(x, torch.zeros_like(x), 0.3), x)
    assert torch.allclose(mobius_add(-x, x, 0.3), torch.zeros_like(x), atol=1e-12)


def loop_reference(anchors, candidates, pos, valid, c, t, clip_r):
    """InfoNCE on -d/t with every quantity computed pair by pair through Mobius addition."""
    a = [to_ball(v[None].double(), c, clip_r)[0] for v in anchors]
    b = [to_ball(v[None].double(), c, clip_r)[0] for v in candidates]
    total, count = 0.0, 0
    for i in range(len(a)):
        logit = lambda j: -poincare_distance(a[i], b[j], c).item() / t
        positives = [j for j in range(len(b)) if valid[i, j] and pos[i, j]]
        negatives = [j for j in range(len(b)) if valid[i, j] and not pos[i, j]]
        if not positives:
            continue
        row = 0.0
        for p in positives:
            denom = math.exp(logit(p)) + sum(math.exp(logit(j)) for j in negatives)
            row += -logit(p) + math.log(denom)
        total += row / len(positives)
        count += 1
    return total / count


# Without clipping, points reach |z| ~ 0.997 where fp32 distances lose ~1e-3 relative precision
# (the reason for feature clipping); that case is compared in float64.
@pytest.mark.parametrize("c,t,clip_r,dtype", [(0.1, 0.2, 2.3, torch.float32), (1.0, 0.5, 0.0, torch.float64)])
def test_matches_loop_with_labels(c, t, clip_r, dtype):
    torch.manual_seed(2)
    x = 1.5 * torch.randn(10, 4, dtype=dtype)
    labels = torch.tensor([0, 0, 1, 1, 1, 2, 3, 3, 4, 4])
    loss = HyperbolicPairwiseCE(c=c, temperature=t, clip_r=clip_r)(x, labels=labels)
    _, pairs = resolve_pairs(x, labels=labels)
    assert loss.item() == pytest.approx(loop_reference(x, x, pairs.pos, pairs.valid, c, t, clip_r), rel=1e-5)


def test_paper_two_slot_loss():
    """Two samples per class: the paper's contrastive_loss(x0, x1) averaged over both slot orders."""
    torch.manual_seed(3)
    x0, x1 = torch.randn(5, 4, dtype=torch.float64), torch.randn(5, 4, dtype=torch.float64)
    c, t = 0.1, 0.2
    z0, z1 = to_ball(x0, c), to_ball(x1, c)

    def paper(u, v):  # CE over [d(u_a, v_b) for all b] + [d(u_a, u_b) for b != a]
        logits = torch.cat([-pairwise_poincare_distance(u, v, c), -pairwise_poincare_distance(u, u, c)], 1) / t
        logits[:, 5:] -= 1e9 * torch.eye(5, dtype=torch.float64)
        return F.cross_entropy(logits, torch.arange(5))

    anchors, labels = two_view(x0, x1)
    ours = HyperbolicPairwiseCE(c=c, temperature=t)(anchors, labels=labels)
    assert ours.item() == pytest.approx(((paper(z0, z1) + paper(z1, z0)) / 2).item(), rel=1e-9)


def test_sphere_mode_is_cosine_infonce():
    from contrasuite.core.objectives import InfoNCE

    torch.manual_seed(4)
    q, k = torch.randn(6, 3), torch.randn(6, 3)
    assert HyperbolicPairwiseCE(c=0, temperature=0.1)(q, k).item() == pytest.approx(InfoNCE(0.1)(q, k).item())


def test_gradcheck_float64():
    torch.manual_seed(5)
    q = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
    k = (3 * torch.randn(6, 3, dtype=torch.float64)).requires_grad_()  # some rows past clip_r
    fn = lambda q, k: HyperbolicPairwiseCE(c=0.5, temperature=0.3, clip_r=2.3)(q, k)
    assert torch.autograd.gradcheck(fn, (q, k))


@pytest.mark.parametrize("near_duplicate", [False, True])
def test_bf16_autocast_low_temperature_finite(near_duplicate):
    q, k = hard_pair(6, near_duplicate)
    assert_finite_in_bf16(lambda: HyperbolicPairwiseCE(temperature=0.01)(q, k), q, k)


def test_bad_arguments():
    with pytest.raises(ValueError, match="curvature"):
        HyperbolicPairwiseCE(c=-1)
    with pytest.raises(ValueError, match="temperature"):
        HyperbolicPairwiseCE(temperature=0)


def autograd_pairwise_distance(x, y, c):
    """The closed form of pairwise_poincare_distance composed from torch ops (autograd's gradient)."""
    margin = max(1e-5, 4.0 * float(torch.finfo(x.dtype).eps))
    x2, y2 = (x * x).sum(-1, keepdim=True), (y * y).sum(-1, keepdim=True).T
    xy = x @ y.T
    u = (x2 + y2 - 2 * xy).clamp_min(0) / (1 - 2 * c * xy + c**2 * x2 * y2).clamp_min(margin)
    z = (math.sqrt(c) * u.clamp_min(float(torch.finfo(x.dtype).eps) ** 2).sqrt()).clamp(max=1.0 - margin)
    return 2.0 / math.sqrt(c) * torch.atanh(z)


def test_pairwise_distance_gradient_matches_autograd():
    # Includes exact and near duplicates (u at the floor) and a point at the ball's edge (z clamped).
    torch.manual_seed(7)
    c = 0.5
    x = to_ball(torch.randn(6, 4, dtype=torch.float64), c)
    y = torch.cat([x[:2], x[2:3] + 1e-9, to_ball(torch.randn(3, 4, dtype=torch.float64), c), 40 * x[3:4]])
    y = to_ball(y, c, clip_r=0.0)
    weights = torch.randn(6, 7, dtype=torch.float64)

    def run(fn, dtype):
        a, b = x.detach().to(dtype).requires_grad_(), y.detach().to(dtype).requires_grad_()
        out = fn(a, b)
        (out * weights.to(dtype)).sum().backward()
        return [t.double() for t in (out.detach(), a.grad, b.grad)]

    ours = lambda a, b: pairwise_poincare_distance(a, b, c, scale=-2.0)
    composed = lambda a, b: -2.0 * autograd_pairwise_distance(a, b, c)
    exact = run(ours, torch.float64)
    for got, ref in zip(exact, run(composed, torch.float64)):
        assert torch.allclose(got, ref, rtol=1e-8, atol=1e-8)
    # float32: the edge point is ill-conditioned; ours is at least as close to float64 as autograd's.
    for got, ref, truth in zip(run(ours, torch.float32), run(composed, torch.float32), exact):
        assert (got - truth).abs().max() <= (ref - truth).abs().max() + 1e-5


def test_pairwise_distance_gradcheck_including_self_pairs():
    torch.manual_seed(8)
    c = 0.3
    x = to_ball(torch.randn(5, 3, dtype=torch.float64), c).detach().requires_grad_()
    y = to_ball(torch.randn(4, 3, dtype=torch.float64), c).detach().requires_grad_()
    assert torch.autograd.gradcheck(lambda a, b: pairwise_poincare_distance(a, b, c, scale=0.7), (x, y))
    # Self-comparison: the same tensor as both arguments (the diagonal sits at the floor).
    assert torch.autograd.gradcheck(lambda a: pairwise_poincare_distance(a, a, c)[~torch.eye(5, dtype=torch.bool)], (x,))


def composed_to_ball(v, c, clip_r):
    """Clipping, exponential map and projection as three maps on [N, D] rows (autograd's gradient)."""
    margin = max(1e-5, 4.0 * float(torch.finfo(v.dtype).eps))
    x = v * (clip_r / v.norm(dim=-1, keepdim=True).clamp_min(margin)).clamp(max=1.0) if clip_r > 0 else v
    norm = x.norm(dim=-1, keepdim=True).clamp_min(margin)
    u = torch.tanh((math.sqrt(c) * norm).clamp(max=15.0)) * x / (math.sqrt(c) * norm)
    max_norm = (1.0 - max(1e-3, 4.0 * float(torch.finfo(v.dtype).eps))) / math.sqrt(c)
    return u * (max_norm / u.norm(dim=-1, keepdim=True).clamp_min(margin)).clamp(max=1.0)


@pytest.mark.parametrize("c,clip_r", [(0.1, 2.3), (1.0, 2.3), (0.5, 0.0), (2.0, 0.0)])
def test_to_ball_matches_composed_maps(c, clip_r):
    # Rows inside and past clip_r, past the tanh saturation (projection active), and a zero row.
    torch.manual_seed(9)
    v = torch.cat([0.3 * torch.randn(4, 5), 3.0 * torch.randn(4, 5), 40.0 * torch.randn(2, 5), torch.zeros(1, 5)]).double()
    weights = torch.randn(11, 5, dtype=torch.float64)
    results = []
    for fn in (lambda x: to_ball(x, c, clip_r), lambda x: composed_to_ball(x, c, clip_r)):
        x = v.clone().requires_grad_()
        out = fn(x)
        (out * weights).sum().backward()
        results.append((out.detach(), x.grad))
    for got, ref in zip(*results):
        assert torch.allclose(got, ref, rtol=1e-12, atol=1e-12)
    x = v[:10].clone().requires_grad_()  # gradcheck away from the zero row
    assert torch.autograd.gradcheck(lambda a: to_ball(a, c, clip_r), (x,))
