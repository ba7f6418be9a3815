"""Top-k hard negative mining against a plain-loop reference."""

import pytest
import torch
import torch.nn.functional as F

from contrasuite.core.negatives.topk import hardest_negatives, mine_hard_negatives
from contrasuite.core.objectives import InfoNCE


def test_picks_true_hardest_hand_made():
    sim = torch.tensor([[0.9, 0.1, 0.5, 0.7], [0.2, 0.8, 0.3, 0.6]])
    neg = torch.tensor([[False, True, True, True], [True, False, True, True]])
    hard = hardest_negatives(sim, neg, k=2)
    assert hard.indices.tolist() == [[3, 2], [3, 2]]
    assert hard.valid.all()
    assert hard.neg_weight.tolist() == [[1, 0, 1, 1], [0, 1, 1, 1]]


def test_matches_loop_reference_random():
    torch.manual_seed(0)
    a, labels = torch.randn(10, 6), torch.randint(0, 3, (10,))
    hard = mine_hard_negatives(a, k=3, labels=labels)
    z = F.normalize(a, dim=1)
    for i in range(10):
        negs = [j for j in range(10) if labels[j] != labels[i]]
        ranked = sorted(negs, key=lambda j: -float(z[i] @ z[j]))[:3]
        got = [int(j) for j, v in zip(hard.indices[i], hard.valid[i]) if v]
        assert got == ranked


def test_rows_with_few_negatives_are_marked():
    sim = torch.rand(2, 3)
    neg = torch.tensor([[True, False, False], [True, True, True]])
    hard = hardest_negatives(sim, neg, k=2)
    assert hard.valid.tolist() == [[True, False], [True, True]]
    assert hard.neg_weight[0].tolist() == [1, 1, 1]  # positives and unmined non-negatives keep weight 1


def test_neg_weight_restricts_infonce_to_mined():
    torch.manual_seed(1)
    q, k = torch.randn(5, 4), torch.randn(5, 4)
    hard = mine_hard_negatives(q, k, k=2)
    loss = InfoNCE(0.5)(q, k, neg_weight=hard.neg_weight)
    z, c = F.normalize(q, dim=1), F.normalize(k, dim=1)
    ref = 0.0
    for i in range(5):
        cols = [i] + [int(j) for j in hard.indices[i]]
        logits = torch.stack([z[i] @ c[j] for j in cols]) / 0.5
        ref += float(torch.logsumexp(logits, 0) - logits[0])
    assert loss.item() == pytest.approx(ref / 5, rel=1e-5)
    assert not mine_hard_negatives(q.requires_grad_(), k, k=2).neg_weight.requires_grad


def test_bad_k():
    with pytest.raises(ValueError, match="k must be"):
        hardest_negatives(torch.rand(2, 3), torch.ones(2, 3, dtype=torch.bool), k=4)
