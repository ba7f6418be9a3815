"""DCL and DCLW against a plain-loop reference, closed forms, gradcheck, bf16 autocast, the gather hook."""

import math

import pytest
import torch
import torch.nn.functional as F

from contrasuite.core.objectives import DCL, DCLW, OBJECTIVES, decoupled_infonce, vmf_weights
from contrasuite.core.pairs import append_negatives, resolve_pairs, two_view
from tests.bf16_check import assert_finite_in_bf16, hard_pair


def loop_reference(anchors, candidates, pos, valid, t, weight=None, sigma=None):
    """Python loops over L_i = mean_p [-w_ip s_ip/t + log sum_{neg} w'_ij exp(s_ij/t)]."""
    z = F.normalize(anchors.double(), dim=1)
    c = F.normalize(candidates.double(), dim=1)
    n, m = pos.shape
    s = [[float(z[i] @ c[j]) for j in range(m)] for i in range(n)]
    if sigma is not None:
        pos_terms = [math.exp(s[i][j] / sigma) for i in range(n) for j in range(m) if pos[i, j] and valid[i, j]]
        mean = sum(pos_terms) / len(pos_terms)
    total, count = 0.0, 0
    for i in range(n):
        positives = [j for j in range(m) if pos[i, j] and valid[i, j]]
        negatives = [j for j in range(m) if valid[i, j] and not pos[i, j]]
        if not positives:
            continue
        denom = math.log(sum((1.0 if weight is None else float(weight[i, j])) * math.exp(s[i][j] / t) for j in negatives))
        row = 0.0
        for p in positives:
            w = 1.0 if sigma is None else 2.0 - math.exp(s[i][p] / sigma) / mean
            row += -w * s[i][p] / t + denom
        total += row / len(positives)
        count += 1
    return total / count


def test_registered():
    assert OBJECTIVES["dcl"] is DCL and OBJECTIVES["dclw"] is DCLW


def test_identical_embeddings_closed_form():
    n, t = 8, 0.2
    z = torch.ones(2 * n, 4)
    anchors, labels = two_view(z[:n], z[n:])
    # -1/t + log((2N - 2) e^{1/t}) = log(2N - 2); vMF weights are all 1 when every positive is alike.
    assert DCL(t)(anchors, labels=labels).item() == pytest.approx(math.log(2 * n - 2), rel=1e-6)
    assert DCLW(t)(anchors, labels=labels).item() == pytest.approx(math.log(2 * n - 2), rel=1e-6)


@pytest.mark.parametrize("cls", [DCL, DCLW])
def test_matches_loop_two_view(cls):
    torch.manual_seed(0)
    v1, v2 = torch.randn(6, 5), torch.randn(6, 5)
    anchors, labels = two_view(v1, v2)
    loss = cls(0.3)(anchors, labels=labels)
    _, pairs = resolve_pairs(anchors, labels=labels)
    ref = loop_reference(anchors, anchors, pairs.pos, pairs.valid, 0.3, sigma=0.5 if cls is DCLW else None)
    assert loss.item() == pytest.approx(ref, rel=1e-5)


@pytest.mark.parametrize("cls", [DCL, DCLW])
def test_matches_loop_multi_positive_weights_extra_columns(cls):
    torch.manual_seed(1)
    q, k, gen = torch.randn(5, 4), torch.randn(5, 4), torch.randn(3, 4)
    cands, pos = append_negatives(k, None, gen, n_anchors=5)
    pos[0, 1] = True  # a second positive for anchor 0
    w = torch.rand(5, 8) + 0.2
    loss = cls(0.25)(q, cands, pos_mask=pos, neg_weight=w)
    ref = loop_reference(q, cands, pos, torch.ones_like(pos), 0.25, weight=w, sigma=0.5 if cls is DCLW else None)
    assert loss.item() == pytest.approx(ref, rel=1e-5)


def test_positive_is_not_in_denominator():
    # Moving only the positive changes DCL by exactly -delta/t (InfoNCE would not be linear).
    torch.manual_seed(2)
    q = F.normalize(torch.randn(4, 3), dim=1)
    k = F.normalize(torch.randn(4, 3), dim=1)
    sim = q @ k.T
    _, pairs = resolve_pairs(q, k)
    base = decoupled_infonce(sim / 0.5, pairs)
    shifted = sim + torch.eye(4) * 0.1
    assert torch.allclose(decoupled_infonce(shifted / 0.5, pairs), base - 0.2, atol=1e-6)


def test_vmf_weights_detached_and_gather_hook_matches_full_batch():
    torch.manual_seed(3)
    q = torch.randn(8, 4, requires_grad=True)
    k = torch.randn(8, 4)
    _, pairs = resolve_pairs(q, k)
    sim = F.normalize(q, dim=1) @ F.normalize(k, dim=1).T
    full = vmf_weights(sim[pairs.pos])
    assert not full.requires_grad
    diag = torch.diagonal(sim).detach()
    assert torch.allclose(full, 2 - torch.exp(diag / 0.5) / torch.exp(diag / 0.5).mean(), atol=1e-6)
    # Two "ranks" holding rows 0-3 and 4-7: the gathered normaliser equals the full-batch one.
    halves = [slice(0, 4), slice(4, 8)]
    local_pairs = [resolve_pairs(q[h], k, pos_mask=pairs.pos[h])[1] for h in halves]

    def stats(h, p):
        s = sim[h].detach() / 0.5
        return torch.stack([torch.logsumexp(s[p.pos], 0), p.pos.sum().to(s.dtype)]).unsqueeze(0)

    all_stats = torch.cat([stats(h, p) for h, p in zip(halves, local_pairs)])
    for h, p in zip(halves, local_pairs):
        got = vmf_weights(sim[h][p.pos], gather=lambda x: all_stats)
        assert torch.allclose(got, full[h], atol=1e-6)


def test_gradcheck_float64():
    torch.manual_seed(4)
    q = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
    k = torch.randn(7, 3, dtype=torch.float64, requires_grad=True)
    w = (torch.rand(5, 7, dtype=torch.float64) + 0.5).requires_grad_()
    assert torch.autograd.gradcheck(lambda q, k, w: DCL(0.2)(q, k, neg_weight=w), (q, k, w))
    # DCLW's weights carry no gradient: check the kernel with a fixed positive weight.
    _, pairs = resolve_pairs(q, k)
    pw = torch.rand(5, dtype=torch.float64) + 0.5
    logits = (torch.randn(5, 7, dtype=torch.float64)).requires_grad_()
    assert torch.autograd.gradcheck(lambda l: decoupled_infonce(l, pairs, None, pw).sum(), (logits,))


@pytest.mark.parametrize("cls", [DCL, DCLW])
@pytest.mark.parametrize("near_duplicate", [False, True])
def test_bf16_autocast_low_temperature_finite(cls, near_duplicate):
    q, k = hard_pair(5, near_duplicate)
    assert_finite_in_bf16(lambda: cls(0.01)(q, k), q, k)


def test_bad_input_errors():
    with pytest.raises(ValueError, match="temperature"):
        DCL(0.0)
    with pytest.raises(ValueError, match="sigma"):
        DCLW(sigma=-1.0)
    with pytest.raises(ValueError, match="neg_weight"):
        DCL()(torch.randn(4, 3), torch.randn(4, 3), neg_weight=torch.ones(3, 4))
