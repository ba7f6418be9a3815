import math

import pytest
import torch

from contrasuite.core.objectives import InfoNCE
from contrasuite.domains.super_resolution.losses import contrastive_layout, dual_contrastive_d_loss


def test_layout_marks_own_positives_and_negatives():
    pos_mask, weight = contrastive_layout(batch=2, n_pos=2, n_neg=3, in_batch=True, device=torch.device("cpu"))
    # columns: pos0(img0, img1), pos1(img0, img1), neg0(...), neg1(...), neg2(...)
    assert pos_mask.tolist() == [[1, 0, 1, 0, 0, 0, 0, 0, 0, 0], [0, 1, 0, 1, 0, 0, 0, 0, 0, 0]]
    assert weight is None
    _, own = contrastive_layout(2, 2, 3, in_batch=False, device=torch.device("cpu"))
    assert own.tolist() == [[0, 0, 0, 0, 1, 0, 1, 0, 1, 0], [0, 0, 0, 0, 0, 1, 0, 1, 0, 1]]


def test_infonce_with_layout_is_pcl_sr_loss():
    # Paper form with t = 1, own negatives only: mean over positives p of
    # -log(e^{s_p} / (e^{s_p} + sum_n e^{s_n})).
    torch.manual_seed(0)
    b, p, k, d = 3, 2, 4, 5
    anchors = torch.nn.functional.normalize(torch.randn(b, d), dim=1)
    cand = torch.nn.functional.normalize(torch.randn((p + k) * b, d), dim=1)
    pos_mask, weight = contrastive_layout(b, p, k, in_batch=False, device=torch.device("cpu"))
    got = InfoNCE(temperature=1.0)(anchors, cand, pos_mask=pos_mask, neg_weight=weight)
    sims = anchors @ cand.T
    want = 0.0
    for i in range(b):
        negs = [sims[i, (p + n) * b + i] for n in range(k)]
        for q in range(p):
            sp = sims[i, q * b + i]
            want += -(sp - math.log(math.exp(sp) + sum(math.exp(v) for v in negs))) / (p * b)
    assert got.item() == pytest.approx(float(want), rel=1e-5)


def test_dual_contrastive_loss_matches_a_loop():
    real, fake = torch.tensor([[1.0, -0.5]]), torch.tensor([[0.3], [2.0]])
    r, f = [1.0, -0.5], [0.3, 2.0]
    want = sum(-x + math.log(math.exp(x) + sum(math.exp(y) for y in f)) for x in r) / 2
    want += sum(y + math.log(math.exp(-y) + sum(math.exp(-x) for x in r)) for y in f) / 2
    assert dual_contrastive_d_loss(real, fake).item() == pytest.approx(want, rel=1e-6)
    # Finite for extreme logits and in bf16.
    big = dual_contrastive_d_loss(torch.full((4,), 1e4, dtype=torch.bfloat16), torch.full((4,), -1e4, dtype=torch.bfloat16))
    assert torch.isfinite(big) and big.dtype == torch.float32
