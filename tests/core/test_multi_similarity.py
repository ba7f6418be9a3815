"""MultiSimilarityLoss and its miner against plain loops, hand-made cases, gradcheck and bf16."""

import math

import pytest
import torch

from contrasuite.core.objectives import MultiSimilarityLoss, multi_similarity_mine
from contrasuite.core.pairs import resolve_pairs
from tests.bf16_check import assert_finite_in_bf16, hard_pair
from tests.pair_similarities import positives_and_negatives


def loop_reference(anchors, candidates, pos, valid, alpha, beta, base, epsilon, mine):
    """Wang et al. 2019 with plain loops in float64: mining, then the two log(1 + sum exp) terms."""
    rows = positives_and_negatives(anchors, candidates, pos, valid)
    total = 0.0
    for sp, sn in rows:
        if mine:
            kept_p = [s for s in sp if sn and s - epsilon < max(sn)]
            kept_n = [s for s in sn if s + epsilon > min(sp)]
            sp, sn = kept_p, kept_n
        total += math.log1p(sum(math.exp(-alpha * (s - base)) for s in sp)) / alpha
        total += math.log1p(sum(math.exp(beta * (s - base)) for s in sn)) / beta
    return total / len(rows)


@pytest.mark.parametrize("mine", [True, False])
@pytest.mark.parametrize("alpha,beta,base,epsilon", [(2.0, 50.0, 0.5, 0.1), (2.0, 40.0, 1.0, 0.3)])
def test_matches_loop_with_labels(mine, alpha, beta, base, epsilon):
    torch.manual_seed(0)
    x = torch.randn(16, 6)
    labels = torch.arange(16) % 5
    loss = MultiSimilarityLoss(alpha, beta, base, epsilon, mine=mine)(x, labels=labels)
    _, pairs = resolve_pairs(x, labels=labels)
    ref = loop_reference(x, x, pairs.pos, pairs.valid, alpha, beta, base, epsilon, mine)
    assert loss.item() == pytest.approx(ref, rel=1e-5)


def test_miner_hand_made():
    # One anchor, cosine similarities: positives 0.9, 0.2; negatives 0.25, 0.05, -0.5.
    sim = torch.tensor([[0.9, 0.2, 0.25, 0.05, -0.5]])
    pos = torch.tensor([[True, True, False, False, False]])
    _, pairs = resolve_pairs(torch.randn(1, 2), torch.randn(5, 2), pos_mask=pos)
    mined = multi_similarity_mine(sim, pairs, epsilon=0.1)
    # Positives kept when s < 0.25 + 0.1: only 0.2. Negatives kept when s > 0.2 - 0.1: 0.25 only.
    assert mined.pos.tolist() == [[False, True, False, False, False]]
    assert mined.neg.tolist() == [[False, False, True, False, False]]


def test_mining_switch_changes_loss():
    torch.manual_seed(1)
    x, labels = torch.randn(10, 4), torch.arange(10) % 3
    assert MultiSimilarityLoss(mine=True)(x, labels=labels).item() != pytest.approx(
        MultiSimilarityLoss(mine=False)(x, labels=labels).item()
    )


def test_gradcheck_float64():
    torch.manual_seed(2)
    q = torch.randn(6, 3, dtype=torch.float64, requires_grad=True)
    k = torch.randn(8, 3, dtype=torch.float64, requires_grad=True)
    pos = torch.eye(6, 8, dtype=torch.bool)
    pos[1, 7] = True
    fn = lambda q, k: MultiSimilarityLoss(beta=10.0, epsilon=0.5)(q, k, pos_mask=pos)
    assert torch.autograd.gradcheck(fn, (q, k))


@pytest.mark.parametrize("near_duplicate", [False, True])
def test_bf16_autocast_finite(near_duplicate):
    q, k = hard_pair(3, near_duplicate)
    assert_finite_in_bf16(lambda: MultiSimilarityLoss(mine=False, beta=100.0)(q, k), q, k)
