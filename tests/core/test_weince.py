"""WEINCE: the gate against a NumPy re-derivation of the official procedure, the loss against loops,
gradcheck with a fixed gate, bf16 autocast, the repro variant's beta EMA and top-M terms, the gather hook."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from contrasuite.core.objectives import OBJECTIVES, InfoNCE, WEINCE, WEINCERepro, weince, weince_gate
from contrasuite.core.objectives.weince import pooled_tail_beta, tail_statistics
from contrasuite.core.pairs import Pairs, resolve_pairs, two_view

EPS = 1e-6


def numpy_gate(sim, neg, q=0.2, kappa_rho=10.0, kappa_aic=1.0, margin=2.0, tail_frac=0.1, min_pts=32, mode="both"):
    """The official tlambda_select gate, re-derived anchor by anchor with NumPy (float64)."""
    n = sim.shape[0]
    k_neg = int(neg.sum(1).min())
    k_tail = max(10, min(int(max(min_pts, round(tail_frac * k_neg))), k_neg))
    k_tail = min(k_tail, k_neg)
    burn = max(1, k_tail // 20)
    cdf = np.maximum(np.arange(1, k_tail + 1) / (k_tail + 1.0), EPS)[burn:]
    rho, daic = np.zeros(n), np.zeros(n)
    for i in range(n):
        s = np.sort(sim[i][neg[i]])[::-1][:k_tail]
        rho[i] = max(1 - s[0], EPS)
        x = np.log(np.maximum(1 - s, EPS))[burn:]
        aic = []
        for y, bad in ((np.log(cdf), lambda b: b <= 0), (np.log(-np.log(cdf)), lambda b: b >= 0)):
            slope, intercept = np.polyfit(x, y, 1)
            sse = max(float(((y - (slope * x + intercept)) ** 2).sum()), 1e-12) + (1e6 if bad(slope) else 0.0)
            aic.append(len(x) * math.log(sse / len(x)) + 4)
        daic[i] = aic[1] - aic[0]
    rho0 = np.sort(rho)[int(round(q * (n - 1)))]
    sig = lambda v: 1 / (1 + np.exp(-v))
    lam_rho = sig(kappa_rho * (np.log(max(rho0, EPS)) - np.log(rho)))
    lam_aic = sig(kappa_aic * (daic - margin))
    lam = {"both": lam_rho * lam_aic, "rho": lam_rho, "aic": lam_aic}[mode]
    return rho, daic, lam


def loop_loss(sim, pos, neg, lam, t, beta=1.0):
    """Cross-entropy of each positive over itself and the negatives, blended logits, plain loops."""
    total, count = 0.0, 0
    for i in range(sim.shape[0]):
        logit = lambda j: (1 - lam[i]) * sim[i, j] / t - lam[i] * beta * math.log(1 - min(sim[i, j], 1 - EPS))
        positives = [j for j in range(sim.shape[1]) if pos[i, j]]
        negs = [j for j in range(sim.shape[1]) if neg[i, j]]
        if not positives:
            continue
        total += sum(-logit(p) + math.log(math.exp(logit(p)) + sum(math.exp(logit(j)) for j in negs)) for p in positives) / len(positives)
        count += 1
    return total / count


def two_view_batch(n=48, d=8, seed=0, noise=0.6):
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(n, d, generator=g)
    anchors, labels = two_view(base + noise * torch.randn(n, d, generator=g), base + noise * torch.randn(n, d, generator=g))
    _, pairs = resolve_pairs(anchors, labels=labels)
    return anchors, labels, pairs


def test_registered_with_official_defaults():
    obj = OBJECTIVES["weince"]()
    assert isinstance(obj, WEINCE)
    assert (obj.temperature, obj.beta, obj.q, obj.kappa_rho, obj.kappa_aic, obj.aic_margin) == (0.5, 1.0, 0.2, 10.0, 1.0, 2.0)
    assert (obj.tail_frac, obj.min_tail_points, obj.gate) == (0.1, 32, "both")
    assert isinstance(OBJECTIVES["weince_repro"](), WEINCERepro)


@pytest.mark.parametrize("mode", ["both", "rho", "aic"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_gate_matches_numpy_rederivation(mode, dtype):
    anchors, _, pairs = two_view_batch(n=64, d=32, noise=0.3)
    sim = (F.normalize(anchors.double(), dim=1) @ F.normalize(anchors.double(), dim=1).T).to(dtype)
    rho, daic, lam = numpy_gate(sim.double().numpy(), pairs.neg.numpy(), mode=mode)
    got, stats = weince_gate(sim, pairs, gate=mode)
    tol = 1e-8 if dtype == torch.float64 else 2e-3
    assert stats.n_eff == 32 - 1  # K = 126 negatives: k_tail = max(32, round(12.6)), burn 1
    assert np.allclose(stats.rho.double().numpy(), rho, rtol=1e-5 if dtype == torch.float32 else 1e-10)
    assert np.allclose(stats.delta_aic.double().numpy(), daic, atol=tol * 10, rtol=tol)
    assert np.allclose(got.double().numpy(), lam, atol=tol)
    assert 0.0 < lam.max() and lam.std() > 1e-3  # the gate is not trivially constant on this batch


def test_gate_is_zero_with_too_few_tail_points():
    # 3 anchors against 3 candidates: 2 negatives per anchor -> k_tail = 2, burn 1, one fit point.
    torch.manual_seed(1)
    q, k = torch.randn(3, 4), torch.randn(3, 4)
    _, pairs = resolve_pairs(q, k)
    sim = F.normalize(q, dim=1) @ F.normalize(k, dim=1).T
    lam, stats = weince_gate(sim, pairs)
    assert stats.n_eff < 2 and torch.equal(lam, torch.zeros(3))
    assert WEINCE(0.5)(q, k).item() == pytest.approx(InfoNCE(0.5)(q, k).item(), rel=1e-6)


def test_loss_matches_loop_with_numpy_gate():
    anchors, labels, pairs = two_view_batch(n=40, seed=2)
    obj = WEINCE(temperature=0.5)
    loss = obj(anchors, labels=labels)
    sim = (F.normalize(anchors.double(), dim=1) @ F.normalize(anchors.double(), dim=1).T).numpy()
    _, _, lam = numpy_gate(sim, pairs.neg.numpy())
    assert np.allclose(obj.last_lambda.double().numpy(), lam, atol=2e-3)
    assert loss.item() == pytest.approx(loop_loss(sim, pairs.pos.numpy(), pairs.neg.numpy(), lam, 0.5), rel=1e-3)


def test_fixed_gate_limits_and_beta():
    torch.manual_seed(3)
    q, k = torch.randn(6, 5), torch.randn(6, 5)
    _, pairs = resolve_pairs(q, k)
    sim = F.normalize(q, dim=1) @ F.normalize(k, dim=1).T
    zero = weince(sim, pairs, torch.zeros(6), 0.3).mean()
    assert zero.item() == pytest.approx(InfoNCE(0.3)(q, k).item(), rel=1e-6)
    lam = torch.rand(6)
    got = weince(sim.double(), pairs, lam.double(), 0.3, beta=2.5).mean()
    ref = loop_loss(sim.double().numpy(), pairs.pos.numpy(), pairs.neg.numpy(), lam.double().numpy(), 0.3, beta=2.5)
    assert got.item() == pytest.approx(ref, rel=1e-9)


def test_gate_is_detached_and_gradient_treats_it_as_constant():
    anchors, labels, pairs = two_view_batch(n=24, seed=4)
    x = anchors.double().requires_grad_()
    obj = WEINCE()
    obj(x, labels=labels).backward()
    lam = obj.last_lambda
    assert not lam.requires_grad
    y = anchors.double().requires_grad_()
    sim = F.normalize(y, dim=1) @ F.normalize(y, dim=1).T
    weince(sim, pairs, lam, 0.5).mean().backward()
    assert torch.allclose(x.grad, y.grad, atol=1e-12)


def test_gradcheck_fixed_gate_float64():
    torch.manual_seed(5)
    q = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
    k = torch.randn(7, 3, dtype=torch.float64, requires_grad=True)
    _, pairs = resolve_pairs(q, k)
    lam = torch.rand(5, dtype=torch.float64)
    w = torch.rand(5, 7, dtype=torch.float64) + 0.5

    def fn(q, k):
        sim = F.normalize(q, dim=1) @ F.normalize(k, dim=1).T
        return weince(sim, pairs, lam, 0.2, beta=1.5, neg_weight=w).mean()

    assert torch.autograd.gradcheck(fn, (q, k))


@pytest.mark.parametrize("cls", [WEINCE, WEINCERepro])
@pytest.mark.parametrize("near_duplicate", [False, True])
def test_bf16_autocast_low_temperature_finite(cls, near_duplicate):
    torch.manual_seed(6)
    base = torch.randn(64, 32)
    other = base + 1e-4 * torch.randn_like(base) if near_duplicate else torch.randn(64, 32)
    anchors, labels = two_view(base, other)
    anchors.requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = cls(temperature=0.01)(anchors, labels=labels)
    loss.backward()
    assert loss.dtype == torch.float32
    assert torch.isfinite(loss) and torch.isfinite(anchors.grad).all()


def test_gather_hook_gives_global_rho_pivot():
    # Two "ranks" holding anchor rows 0-23 and 24-47 against all candidates (as after a gather):
    # with rho gathered, each rank's gate equals the full-batch gate on its rows.
    g = torch.Generator().manual_seed(7)
    q, k = torch.randn(48, 16, generator=g), torch.randn(48, 16, generator=g)
    full = WEINCE()
    full(q, k)
    eye = torch.eye(48, dtype=torch.bool)
    sim = F.normalize(q, dim=1) @ F.normalize(k, dim=1).T
    halves = [slice(0, 24), slice(24, 48)]
    rho_all = torch.cat([tail_statistics(sim[h], resolve_pairs(q[h], k, pos_mask=eye[h])[1]).rho for h in halves])
    calls = []
    for h in halves:
        part = WEINCE()
        part.gather_statistics = lambda x: calls.append(tuple(x.shape)) or rho_all
        part(q[h], k, pos_mask=eye[h])
        assert torch.allclose(part.last_lambda, full.last_lambda[h], atol=1e-6)
    assert calls == [(24,), (24,)]
    # Without the hook the pivot is local and the gate differs.
    local = WEINCE()
    local(q[:24], k, pos_mask=eye[:24])
    assert not torch.allclose(local.last_lambda, full.last_lambda[:24], atol=1e-6)


def numpy_pooled_beta(sim, neg, tail_frac=0.05, min_pts=1024):
    delta = np.maximum(1 - sim[neg], EPS)
    k_tail = min(int(max(min_pts, tail_frac * delta.size)), delta.size)
    tail = np.sort(delta)[:k_tail]
    burn = max(1, k_tail // 20)
    x, y = np.log(tail)[burn:], np.log(np.arange(1, k_tail + 1) / (k_tail + 1.0))[burn:]
    slope, intercept = np.polyfit(x, y, 1)
    r2 = 1 - ((y - slope * x - intercept) ** 2).sum() / ((y - y.mean()) ** 2).sum()
    return max(slope, 0.0), min(max(r2, 0.0), 1.0)


def test_pooled_tail_beta_matches_numpy():
    anchors, _, pairs = two_view_batch(n=48, seed=8)
    sim = F.normalize(anchors.double(), dim=1) @ F.normalize(anchors.double(), dim=1).T
    beta_hat, r2 = pooled_tail_beta(sim, pairs)
    ref_beta, ref_r2 = numpy_pooled_beta(sim.numpy(), pairs.neg.numpy())
    assert beta_hat == pytest.approx(ref_beta, rel=1e-8) and r2 == pytest.approx(ref_r2, rel=1e-8)
    small = Pairs(pos=pairs.pos[:3, :3], valid=pairs.valid[:3, :3])
    assert pooled_tail_beta(sim[:3, :3], small) is None  # fewer than 10 points


def test_repro_beta_ema_buffer():
    anchors, labels, pairs = two_view_batch(n=48, seed=8)
    sim = F.normalize(anchors.double(), dim=1) @ F.normalize(anchors.double(), dim=1).T
    ref_beta, _ = numpy_pooled_beta(sim.numpy(), pairs.neg.numpy())
    accept = WEINCERepro(r2_min=0.0)
    assert "beta_ema" in accept.state_dict() and float(accept.beta_ema) == 4.0
    accept(anchors, labels=labels)
    expected = 0.9 * 4.0 + 0.1 * min(max(ref_beta, 0.5), 16.0)
    assert float(accept.beta_ema) == pytest.approx(expected, rel=1e-5)
    reject = WEINCERepro(r2_min=1.01)
    reject(anchors, labels=labels)
    assert float(reject.beta_ema) == 4.0
    accept.eval()
    accept(anchors, labels=labels)
    assert float(accept.beta_ema) == pytest.approx(expected, rel=1e-5)  # eval does not move the EMA


def test_repro_loss_matches_loop():
    anchors, labels, pairs = two_view_batch(n=20, seed=9)
    obj = WEINCERepro(top_m=5).eval()  # eval: beta_t = the EMA's 4.0
    loss = obj(anchors, labels=labels)
    sim = (F.normalize(anchors.double(), dim=1) @ F.normalize(anchors.double(), dim=1).T).numpy()
    pos, neg = pairs.pos.numpy(), pairs.neg.numpy()
    lam = obj.last_lambda.double().numpy()
    blend = loop_loss(sim, pos, neg, lam, 0.5)
    top = np.zeros_like(neg)
    for i in range(sim.shape[0]):
        idx = np.where(neg[i])[0]
        top[i, idx[np.argsort(-sim[i, idx])[:5]]] = True
    weibit = loop_loss(sim, pos, top, np.ones(len(sim)), 0.5, beta=4.0)
    plackett_luce = loop_loss(sim, pos, top, np.zeros(len(sim)), 0.5)
    assert loss.item() == pytest.approx(blend + 0.5 * weibit + 0.5 * plackett_luce, rel=1e-4)


def test_bad_input_errors():
    with pytest.raises(ValueError, match="gate must be one of"):
        WEINCE(gate="hard")
    with pytest.raises(ValueError, match="q must be in"):
        WEINCE(q=1.5)
    with pytest.raises(ValueError, match="temperature"):
        WEINCE(temperature=0.0)
    with pytest.raises(ValueError, match="top_m"):
        WEINCERepro(top_m=0)
    with pytest.raises(ValueError, match="beta_min"):
        WEINCERepro(beta_min=2.0, beta_max=1.0)


@pytest.mark.parametrize("paired", [True, False])
def test_fused_single_positive_kernel_matches_masks_and_gradcheck(paired):
    # The fused blend + cross-entropy of single-positive pairs against the same logits through the
    # general mask path; rows with a similarity past 1 - eps (the clamp) included.
    torch.manual_seed(10)
    if paired:
        q, k = torch.randn(6, 4, dtype=torch.float64), torch.randn(8, 4, dtype=torch.float64)
        k[2] = 3.0 * q[2]  # cosine 1: clamped positive
        k[7] = q[4]  # clamped negative
        _, pairs = resolve_pairs(q, k)
    else:
        base = torch.randn(5, 4, dtype=torch.float64)
        q, labels = two_view(base, base + 0.3 * torch.randn(5, 4, dtype=torch.float64))
        q[1] = q[6]  # a clamped positive pair
        k, (_, pairs) = q, resolve_pairs(q, labels=labels)
    assert pairs.targets is not None and pairs.exclude_self is not paired
    masks = Pairs(pos=pairs.pos, valid=pairs.valid)
    lam = torch.rand(6 if paired else 10, dtype=torch.float64)
    sim = lambda a, b: F.normalize(a, dim=1) @ F.normalize(b, dim=1).T
    weights = torch.rand(lam.shape[0], dtype=torch.float64)
    grads = []
    for p in (pairs, masks):
        a, b = q.clone().requires_grad_(), k.clone().requires_grad_()
        loss = weince(sim(a, b) if paired else sim(a, a), p, lam, 0.2, beta=1.5)
        (loss * weights).sum().backward()
        grads.append((loss.detach(), a.grad, b.grad if paired else a.grad))
    for got, ref in zip(*grads):
        assert torch.allclose(got, ref, rtol=1e-10, atol=1e-12)
    # gradcheck away from the clamp (finite differences would cross it)
    inside = (0.9 * (sim(q, k) if paired else sim(q, q))).requires_grad_()
    assert torch.autograd.gradcheck(lambda x: weince(x, pairs, lam, 0.2, beta=1.5), (inside,))


def test_largest_sorts_or_partitions_to_the_same_values():
    from contrasuite.core.objectives.weince import SORT_WHOLE_ROWS_UP_TO, largest

    torch.manual_seed(11)
    for m in (SORT_WHOLE_ROWS_UP_TO, SORT_WHOLE_ROWS_UP_TO + 1):
        x = torch.randn(7, m)
        x[0, :5] = x[0, 5]  # ties
        for k in (1, 33):
            assert torch.equal(largest(x, k), x.topk(k, dim=-1).values)
    assert torch.equal(largest(x.flatten(), 100), x.flatten().topk(100).values)


def test_top_m_columns_from_the_tail_values_match_a_partition():
    """``restrict_to_top_m`` with the tail's sorted values (a comparison per row) keeps the same
    columns as with ``np.argpartition``; a tie at a row's k-th value falls back to the partition."""
    from contrasuite.core.objectives.weince import columns_at_least, negatives_only, restrict_to_top_m

    torch.manual_seed(12)
    sim = torch.rand(9, 40) * 2 - 1
    _, pairs = resolve_pairs(torch.randn(9, 3), torch.randn(40, 3))
    negatives = negatives_only(sim, pairs)
    hardest = tail_statistics(sim, pairs, tail_frac=0.5, min_tail_points=10).hardest
    for k in (1, 7, 20):
        plain, _, _ = restrict_to_top_m(sim, pairs, k, negatives=negatives)
        fast, _, _ = restrict_to_top_m(sim, pairs, k, negatives=negatives, hardest=hardest)
        assert torch.equal(plain[:, 0], fast[:, 0])
        assert torch.equal(plain[:, 1:].sort(dim=1).values, fast[:, 1:].sort(dim=1).values)
    tied = negatives.clone()
    tied[3, :2] = tied[3].max()  # three entries at row 3's largest value
    assert columns_at_least(tied, tied.max(dim=1).values, 1) is None
