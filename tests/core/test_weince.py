"""WEINCE: the gate against a NumPy re-derivation of the official procedure, the loss against loops,
gradcheck with a fixed gate, bf16 autocast, the repro variant's beta EMA and top-M terms, the gather hook."""

import importlib
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from contrasuite.core.objectives import OBJECTIVES, InfoNCE, WEINCE, WEINCERepro, weince, weince_gate
from contrasuite.core.objectives.weince_gate import Gating, tail_statistics
from contrasuite.core.objectives.weince_repro import pooled_tail_beta
from contrasuite.core.pairs import Pairs, resolve_pairs, two_view
from tests.bf16_check import assert_finite_in_bf16, hard_pair

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
    blend, gating = obj.config.blend, obj.config.gating
    assert (blend.temperature, blend.beta, gating.q, gating.kappa_rho, gating.kappa_aic, gating.aic_margin) == (0.5, 1.0, 0.2, 10.0, 1.0, 2.0)
    assert (gating.tail_frac, gating.min_tail_points, gating.gate) == (0.1, 32, "both")
    assert isinstance(OBJECTIVES["weince_repro"](), WEINCERepro)



def test_flat_keys_configure_the_parts_and_are_listed():
    """A config's flat keys go to the part that has them; a key no part has is named; ``contrasuite list``
    shows every key with its default; only the repro keeps state (its beta_t EMA)."""
    from contrasuite.pipelines.catalog import objective_parameters

    config = WEINCERepro(temperature=0.3, q=0.4, top_m=7, r2_min=0.5).config
    assert (config.blend.temperature, config.gating.q, config.aux.top_m, config.ema.r2_min) == (0.3, 0.4, 7, 0.5)
    assert WEINCE().config.aux is None and list(WEINCE().state_dict()) == []
    assert list(WEINCERepro().state_dict()) == ["beta_ema"]
    with pytest.raises(TypeError, match="unexpected key 'top_m'"):
        WEINCE(top_m=7)
    listed = objective_parameters()
    assert "q=0.2" in listed["weince"] and "top_m" not in listed["weince"]
    assert listed["weince_repro"].endswith("beta_momentum=0.9, r2_min=0.85")


@pytest.mark.parametrize("mode", ["both", "rho", "aic"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_gate_matches_numpy_rederivation(mode, dtype):
    anchors, _, pairs = two_view_batch(n=64, d=32, noise=0.3)
    sim = (F.normalize(anchors.double(), dim=1) @ F.normalize(anchors.double(), dim=1).T).to(dtype)
    rho, daic, lam = numpy_gate(sim.double().numpy(), pairs.neg.numpy(), mode=mode)
    got, stats = weince_gate(sim, pairs, Gating(gate=mode))
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
    assert WEINCE(temperature=0.5)(q, k).item() == pytest.approx(InfoNCE(0.5)(q, k).item(), rel=1e-6)


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
    anchors, labels = two_view(*hard_pair(6, near_duplicate, grad=False))
    anchors.requires_grad_()
    assert_finite_in_bf16(lambda: cls(temperature=0.01)(anchors, labels=labels), anchors)


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
    from contrasuite.core.negatives.topk import SORT_WHOLE_ROWS_UP_TO, largest

    torch.manual_seed(11)
    for m in (SORT_WHOLE_ROWS_UP_TO, SORT_WHOLE_ROWS_UP_TO + 1):
        x = torch.randn(7, m)
        x[0, :5] = x[0, 5]  # ties
        for k in (1, 33):
            assert torch.equal(largest(x, k), x.topk(k, dim=-1).values)
    assert torch.equal(largest(x.flatten(), 100), x.flatten().topk(100).values)


def test_largest_under_torch_compile_takes_topk_and_gives_the_same_values():
    """Dynamo cannot trace NumPy's in-place sorts (it failed on WEINCE-repro); compiled, ``largest`` is ``topk``."""
    from contrasuite.core.negatives.topk import SORT_WHOLE_ROWS_UP_TO, largest

    torch.manual_seed(12)
    x = torch.randn(5, SORT_WHOLE_ROWS_UP_TO + 3)
    compiled = torch.compile(lambda t: largest(t, 9), backend="eager", fullgraph=True)
    assert torch.equal(compiled(x), largest(x, 9))


def test_top_m_columns_from_the_tail_values_match_a_partition():
    """``restrict_to_top_m`` with the tail's sorted values (a comparison per row) keeps the same
    columns as with ``np.argpartition``; a tie at a row's k-th value falls back to the partition."""
    from contrasuite.core.negatives.topk import columns_at_least, negatives_only
    from contrasuite.core.objectives.weince_repro import restrict_to_top_m

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


# Loss, beta_t EMA and gradients at N = 512 (D = 128, fp32) as the implementation of commit 180261f
# (before the speed work of issue 27) gave them: the gradients by their norms and their dot products
# with three fixed random directions. Scenarios: random rows (the bench's); every candidate twice (ties
# at rows' top-M boundaries: the column fallback); nearly all similarities negative (the integer
# partition's fallback in the pooled tail); ten anchors close to 300 candidates (the pooled tail's
# fallback to all negatives). WEINCE is stateless (one step); WEINCE-repro's EMA moves (two steps).
FROZEN = {  # (loss, beta_ema, |grad a|, |grad b|, grad a . probes, grad b . probes) per step
    'WEINCE/random/paired': [
        (6.255187511444092, 0.0, 0.07018023228868149, 0.07055642622942479,
         (-0.041726399444378476, 0.0210984053774412, 0.036958750226327344),
         (-0.06642927335372477, 0.02611997608123354, 0.11070129128033968)),
    ],
    'WEINCE/random/two_view': [
        (6.947702884674072, 0.0, 0.07030640093326267, 0.0707016596718846,
         (-0.03351367991866079, 0.01649831484454407, 0.03774446174902579),
         (-0.06564085516084536, 0.028969997813193118, 0.11283831574814084)),
    ],
    'WEINCE/duplicates/paired': [
        (3.145702362060547, 0.0, 0.4233235093408734, 0.5743418615479153,
         (0.22174284348225912, 0.3222416496709089, 0.05626400810051759),
         (-0.4422730473009225, -0.473025198179839, 0.23078551348069368)),
    ],
    'WEINCE/duplicates/two_view': [
        (4.446261405944824, 0.0, 0.43289754799986624, 0.44239165025008764,
         (0.3750393413697791, -0.0848298623141557, -0.7443584182484155),
         (-0.4197213265741081, 0.08811373506722996, 0.7705626984324031)),
    ],
    'WEINCE/negative/paired': [
        (6.238927841186523, 0.0, 0.015360818722470778, 0.015410102009794457,
         (-0.0057463764241671, 0.00373591726349852, 0.005000766424292389),
         (-0.016583118489167135, 0.005594113416364254, 0.026557406843647387)),
    ],
    'WEINCE/negative/two_view': [
        (9.768007278442383, 0.0, 0.08038312649883757, 0.08615735977469953,
         (-0.07496163534096538, 0.0162615177298354, 0.10956849698951115),
         (-0.0397129190009405, 0.028739975430508744, 0.10041431864983381)),
    ],
    'WEINCE/crowded/paired': [
        (6.240486145019531, 0.0, 0.06515283638316187, 0.08153633313744425,
         (-0.05150777572131699, -0.029751815130779277, 0.06473935018651755),
         (-0.012777750625852818, 0.008171307742021761, 0.11723924953965)),
    ],
    'WEINCE/crowded/two_view': [
        (7.400808811187744, 0.0, 0.0768316586609706, 0.12382599855534486,
         (-0.01314010070295606, -0.06864282987849613, 0.025832894367886317),
         (-0.12269817099876779, 0.10702187481731913, 0.21174454443764812)),
    ],
    'WEINCERepro/random/paired': [
        (10.79964828491211, 5.199999809265137, 0.230480222129949, 0.2318591479274068,
         (-0.1334790866860963, 0.08961533761236741, 0.08228649904415478),
         (-0.17483625570505015, 0.0739333936718016, 0.37562901391808967)),
        (10.898370742797852, 6.279999732971191, 0.2549529713176839, 0.25648811401345634,
         (-0.14973502366482971, 0.10459006947462458, 0.08688630307677367),
         (-0.19150629648776873, 0.07891065100893581, 0.41719042443229515)),
    ],
    'WEINCERepro/random/two_view': [
        (11.597793579101562, 5.199999809265137, 0.2308011728035975, 0.2321206419339451,
         (-0.13379386549177963, 0.08757133158622707, 0.07265042133698861),
         (-0.2019418667644552, 0.0943756595286736, 0.3726522997000036)),
        (11.71255111694336, 6.279999732971191, 0.25530755852870163, 0.25677982151060375,
         (-0.15075377282924513, 0.09984961670766199, 0.07775748300342332),
         (-0.22325081779540792, 0.10312074184676807, 0.40986385431520267)),
    ],
    'WEINCERepro/duplicates/paired': [
        (4.694754600524902, 5.199999809265137, 0.4247661957326074, 3.6865351613472703,
         (0.22361462638092705, 0.3193148079588924, 0.04064381619636678),
         (-7.9276006399539485, -2.2787772214981126, 6.702624546251293)),
        (4.694754600524902, 6.279999732971191, 0.4247661817933745, 4.365848862560662,
         (0.2236157963847929, 0.3193262594456507, 0.04063174983425591),
         (-9.482222203552348, -2.6540015775448786, 8.048438546393566)),
    ],
    'WEINCERepro/duplicates/two_view': [
        (15.140494346618652, 5.199999809265137, 2.760776309369537, 4.120277331887989,
         (2.2682517173819123, -0.5700297670828595, -4.684515323980028),
         (-6.216257983620448, -0.27088785794367753, 8.019830146724534)),
        (17.0615177154541, 6.279999732971191, 3.243965383043848, 4.879442818548876,
         (2.72107919529402, -0.642417199319861, -5.51709818214907),
         (-7.442994486611483, -0.36832010168933893, 9.514128367423124)),
    ],
    'WEINCERepro/negative/paired': [
        (10.209918975830078, 5.199999809265137, 0.04366778019083043, 0.05972686334019274,
         (-0.014838321124872137, 0.010283723219061583, 0.008470085618832352),
         (-0.06192548263806346, 0.004072328622731608, 0.0938858711794563)),
        (10.214618682861328, 6.279999732971191, 0.04707047656944747, 0.06557063846693416,
         (-0.015917733777845618, 0.011047188530624957, 0.008862368616474312),
         (-0.06734818669374934, 0.0038384264689595273, 0.10196879336002052)),
    ],
    'WEINCERepro/negative/two_view': [
        (24.284343719482422, 5.194441795349121, 0.5437346656444271, 0.5598160968616658,
         (-0.26647172673551905, -0.20275652036743308, 0.45314909540024323),
         (0.04960913912912772, 0.1472117983083514, 0.62417180900561)),
        (26.1008358001709, 6.269439697265625, 0.6390741717288558, 0.6573094136131603,
         (-0.29986683166552885, -0.2594717868436993, 0.5258167523500159),
         (0.07154245704083793, 0.17273588872756868, 0.7211454524543747)),
    ],
    'WEINCERepro/crowded/paired': [
        (10.56402587890625, 4.0, 0.200723021904871, 0.24003227395110557,
         (-0.10718221276366997, -0.10704507249884257, 0.10063256728034949),
         (0.025654186836060477, -0.005884731466594029, 0.3543590040414051)),
        (10.56402587890625, 4.0, 0.200723021904871, 0.24003227395110557,
         (-0.10718221276366997, -0.10704507249884257, 0.10063256728034949),
         (0.025654186836060477, -0.005884731466594029, 0.3543590040414051)),
    ],
    'WEINCERepro/crowded/two_view': [
        (14.29730224609375, 4.62877893447876, 0.2369913918948932, 0.5879758172223304,
         (-0.05776572167197716, -0.16472425954057218, 0.03089199979571914),
         (-0.3241440590303057, 0.4361672598340854, 0.9188558094883643)),
        (14.614337921142578, 5.1946797370910645, 0.25210816651408896, 0.6447033907162,
         (-0.06508252551513215, -0.17004722907589304, 0.03445678967210464),
         (-0.3421497317159892, 0.47732225179668597, 0.993010461572418)),
    ],
}


def frozen_inputs(scenario, n=512, d=128):
    g = torch.Generator().manual_seed(n)
    a = torch.randn(n, d, generator=g, dtype=torch.float64) / d**0.5
    b = torch.randn(n, d, generator=g, dtype=torch.float64) / d**0.5
    u = torch.randn(d, generator=g, dtype=torch.float64)
    u = u / u.norm()
    if scenario == "duplicates":
        b[n // 2 :] = b[: n // 2]
        a = b + 0.05 * a
    elif scenario == "negative":
        b = u + 0.3 * b
        a = -u + 0.3 * a
    elif scenario == "crowded":
        b[:300] = u + 0.2 * b[:300]
        a[:10] = u + 0.2 * a[:10]
    return a.float(), b.float()


@pytest.mark.parametrize("key", sorted(FROZEN))
def test_loss_ema_and_gradients_equal_the_frozen_results_at_n512(key):
    name, scenario, form = key.split("/")
    a, b = frozen_inputs(scenario)
    obj = {"WEINCE": WEINCE, "WEINCERepro": WEINCERepro}[name]()
    probe = torch.randn(a.numel(), 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    for loss_ref, ema_ref, norm_a, norm_b, probe_a, probe_b in FROZEN[key]:
        x, y = a.clone().requires_grad_(), b.clone().requires_grad_()
        if form == "paired":
            loss = obj(x, y)
        else:
            z, labels = two_view(x, y)
            loss = obj(z, labels=labels)
        loss.backward()
        assert loss.item() == pytest.approx(loss_ref, rel=1e-6)
        assert float(getattr(obj, "beta_ema", 0.0)) == pytest.approx(ema_ref, rel=1e-6)
        for grad, norm, dots in ((x.grad, norm_a, probe_a), (y.grad, norm_b, probe_b)):
            g = grad.double().flatten()
            assert g.norm().item() == pytest.approx(norm, rel=1e-6)
            # |(g - g_ref) . r| <= |g - g_ref| |r|: within 1e-6 of |g| in every probed direction
            bound = 1e-6 * norm * probe.norm(dim=0)
            assert torch.all((g @ probe - torch.tensor(dots, dtype=torch.float64)).abs() <= bound)


def test_frozen_scenarios_take_the_fallback_paths():
    from contrasuite.core.negatives.topk import _partitioned_top, columns_at_least, largest, negatives_only

    def sim_pairs(scenario):
        a, b = frozen_inputs(scenario)
        _, pairs = resolve_pairs(a, b)
        return F.normalize(a, dim=1) @ F.normalize(b, dim=1).T, pairs

    sim, pairs = sim_pairs("random")
    hardest = tail_statistics(sim, pairs).hardest
    rows = torch.arange(512)
    assert columns_at_least(sim, hardest[:, 49], 50, (rows, pairs.targets)) is not None
    k = int(0.05 * 512 * 511)
    assert bool((hardest[:, -1] <= largest(hardest.flatten(), k)[-1]).all())  # the pooled tail within the rows' tails
    sim, pairs = sim_pairs("duplicates")
    assert columns_at_least(sim, tail_statistics(sim, pairs).hardest[:, 49], 50, (rows, pairs.targets)) is None
    sim, pairs = sim_pairs("crowded")
    hardest = tail_statistics(sim, pairs).hardest
    assert not bool((hardest[:, -1] <= largest(hardest.flatten(), k)[-1]).all())
    sim, pairs = sim_pairs("negative")
    top = _partitioned_top(tail_statistics(sim, pairs).hardest.flatten().numpy(), k, overwrite=False)
    assert (top < 0).all()  # selected after the integer partition's check failed
    assert torch.equal(largest(negatives_only(sim, pairs).flatten(), k), negatives_only(sim, pairs).flatten().topk(k).values)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("overwrite", [False, True])
def test_largest_by_integer_partition_and_its_fallback(dtype, overwrite):
    from contrasuite.core.negatives.topk import SORT_WHOLE_ROWS_UP_TO, largest

    torch.manual_seed(13)
    m = SORT_WHOLE_ROWS_UP_TO + 100
    for x in (torch.rand(6, m, dtype=dtype) * 2 - 1, -torch.rand(6, m, dtype=dtype), torch.rand(6, m, dtype=dtype) - 0.9):
        x[0, :3] = 0.0
        x[1, :3] = -0.0
        for k in (1, 40, m // 2):
            ref = x.topk(k, dim=-1).values
            work = x.clone()
            assert torch.equal(largest(work, k, overwrite), ref)
            assert torch.equal(work.sort(dim=1).values, x.sort(dim=1).values)  # rows keep their values
            assert torch.equal(largest(x.flatten(), k), x.flatten().topk(k).values)


@pytest.mark.parametrize("paired", [True, False])
def test_blend_cross_entropy_blocks_of_rows_give_the_same_values(paired, monkeypatch):
    module = importlib.import_module("contrasuite.core.objectives.weince")  # the package's `weince` is the function

    a, b = frozen_inputs("random", n=96, d=16)
    a[3] = b[3] * 2.0  # a similarity at 1: the clamp in some block

    def run():
        x, y = a.clone().requires_grad_(), b.clone().requires_grad_()
        obj = WEINCERepro(top_m=7)
        loss = obj(x, y) if paired else obj(torch.cat([x, y]), labels=torch.arange(96).repeat(2))
        loss.backward()
        return loss.detach(), x.grad, y.grad

    whole = run()
    monkeypatch.setattr(module, "BLEND_BLOCK_ELEMENTS", 7 * 96 + 5)  # blocks of 7 rows (paired; the last shorter) or 3
    blocks = run()
    for got, ref in zip(blocks, whole):
        assert torch.equal(got, ref)


@pytest.mark.parametrize("cls", [WEINCE, WEINCERepro])
@pytest.mark.parametrize("paired", [True, False])
def test_fused_path_matches_the_general_path_at_n512(cls, paired):
    """The single-positive fast path (fused blend, top-M terms in the same function, the gate's copy of
    the negatives partitioned in place and reused) against the general path that any weight takes."""
    a, b = frozen_inputs("random")
    results = []
    for weight in (None, 1.0):
        x, y = a.clone().requires_grad_(), b.clone().requires_grad_()
        obj = cls()
        if paired:
            loss = obj(x, y, neg_weight=None if weight is None else torch.ones(512, 512))
        else:
            z, labels = two_view(x, y)
            loss = obj(z, labels=labels, neg_weight=None if weight is None else torch.ones(1024, 1024))
        loss.backward()
        results.append((loss.detach(), x.grad, y.grad, float(getattr(obj, "beta_ema", 0.0))))
    (l0, gx0, gy0, e0), (l1, gx1, gy1, e1) = results
    assert e0 == e1
    assert l0.item() == pytest.approx(l1.item(), rel=1e-6)
    for g0, g1 in ((gx0, gx1), (gy0, gy1)):
        assert (g0 - g1).norm() <= 1e-5 * g1.norm()
