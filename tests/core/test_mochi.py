"""MoCHi: mixtures are convex combinations of the right hardest negatives; per-anchor columns."""

import pytest
import torch
import torch.nn.functional as F

from contrasuite.core.negatives.mochi import mochi, per_anchor_columns
from contrasuite.core.objectives import InfoNCE


def test_negative_mixes_lie_in_span_of_hardest_pair():
    # orthonormal negatives; the query is closest to e0 and e1, so with n_hard=2 only those mix
    neg = torch.eye(6)
    q = F.normalize(torch.tensor([[1.0, 0.9, 0.1, 0.0, 0.0, 0.0]]), dim=1)
    out = mochi(q, neg, n_hard=2, s=50, s_prime=0, generator=torch.Generator().manual_seed(0))
    assert out.shape == (1, 50, 6)
    assert torch.allclose(out.norm(dim=2), torch.ones(1, 50))
    assert (out[0, :, 2:].abs() < 1e-6).all() and (out[0, :, :2] >= -1e-6).all()  # convex: nonnegative on e0,e1


def test_query_mixes_have_beta_below_half():
    neg = torch.eye(4)
    q = F.normalize(torch.tensor([[0.0, 0.0, 0.0, 1.0]]) + 0.1 * torch.tensor([[1.0, 0, 0, 0]]), dim=1)
    out = mochi(q, neg[:3], n_hard=1, s=0, s_prime=200, generator=torch.Generator().manual_seed(1))
    # hardest of e0,e1,e2 for this q is e0; h' = normalize(beta q + (1-beta) e0), beta in [0, 0.5)
    h = out[0]
    assert (h[:, 1:3].abs() < 1e-6).all()
    # recover beta from the unnormalised ratio: component on e3 is beta*q3, on e0 is beta*q0 + 1 - beta
    ratio = h[:, 3] / h[:, 0]
    beta = ratio / (q[0, 3] - ratio * (q[0, 0] - 1))
    assert ((beta >= 0) & (beta < 0.5)).all() and beta.max() > 0.4


def test_matches_loop_reference_with_same_draws():
    torch.manual_seed(0)
    q, neg = torch.randn(3, 5), torch.randn(20, 5)
    out = mochi(q, neg, n_hard=4, s=3, s_prime=2, generator=torch.Generator().manual_seed(5))
    qn, nn_ = F.normalize(q, dim=1), F.normalize(neg, dim=1)
    hard = (qn @ nn_.T).topk(4, dim=1).indices
    # draw order in mochi: alpha, the two picks, beta, the pick
    gen = torch.Generator().manual_seed(5)
    alpha = torch.rand(3, 3, 1, generator=gen)
    i1 = torch.randint(0, 4, (3, 3), generator=gen)
    i2 = torch.randint(0, 4, (3, 3), generator=gen)
    beta = 0.5 * torch.rand(3, 2, 1, generator=gen)
    i3 = torch.randint(0, 4, (3, 2), generator=gen)
    for b in range(3):
        for j in range(3):
            want = F.normalize(alpha[b, j] * nn_[hard[b, i1[b, j]]] + (1 - alpha[b, j]) * nn_[hard[b, i2[b, j]]], dim=0)
            assert torch.allclose(out[b, j], want, atol=1e-6)
        for j in range(2):
            want = F.normalize(beta[b, j] * qn[b] + (1 - beta[b, j]) * nn_[hard[b, i3[b, j]]], dim=0)
            assert torch.allclose(out[b, 3 + j], want, atol=1e-6)


def test_detached_and_per_anchor_columns_match_loop():
    torch.manual_seed(1)
    q = torch.randn(4, 6, requires_grad=True)
    k, queue = torch.randn(4, 6), torch.randn(12, 6)
    syn = mochi(q, queue, n_hard=5, s=2, s_prime=1, generator=torch.Generator().manual_seed(0))
    assert not syn.requires_grad
    cands, pos, w = per_anchor_columns(k, None, syn)
    assert cands.shape == (16, 6) and pos.shape == (4, 16) and w.shape == (4, 16)
    loss = InfoNCE(0.2)(q, cands, pos_mask=pos, neg_weight=w)
    z, c = F.normalize(q.detach(), dim=1), F.normalize(cands, dim=1)
    ref = 0.0
    for i in range(4):
        cols = list(range(4)) + [4 + 3 * i + j for j in range(3)]
        logits = torch.stack([z[i] @ c[j] for j in cols]) / 0.2
        ref += float(torch.logsumexp(logits, 0) - logits[i])
    assert loss.item() == pytest.approx(ref / 4, rel=1e-5)
    loss.backward()
    assert torch.isfinite(q.grad).all()


def test_bf16_autocast_finite():
    torch.manual_seed(2)
    q = torch.randn(16, 8, requires_grad=True)
    queue = q.detach().repeat(4, 1) + 1e-4 * torch.randn(64, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        syn = mochi(q, queue, n_hard=8, s=4, s_prime=2, generator=torch.Generator().manual_seed(0))
        cands, pos, w = per_anchor_columns(queue[:16], None, syn)
        loss = InfoNCE(0.01)(q, cands, pos_mask=pos, neg_weight=w)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(q.grad).all()


def test_bad_shapes():
    with pytest.raises(ValueError, match="share D"):
        mochi(torch.randn(2, 3), torch.randn(4, 5))
