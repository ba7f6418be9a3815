"""core.negatives.paired: a registered source on a paired batch, laid out over ranks, from a domain's
``config.negatives`` (image_ssl and code_search use it)."""

import pytest
import torch
import torch.nn.functional as F

from contrasuite.core.negatives import mine_hard_negatives
from contrasuite.core.negatives.paired import paired_negatives
from contrasuite.core.objectives import InfoNCE


def test_queue_source_appends_slices_and_enqueues():
    source = paired_negatives({"name": "queue", "size": 8}, dim=4)
    a, p = F.normalize(torch.randn(2, 3, 4), dim=2)
    assert source(a, p, epoch=0, seed=0).candidates.shape == (3, 4)
    source.update(a, p)
    ext = source(a, p, epoch=0, seed=0)
    assert ext.candidates.shape == (9, 4) and torch.equal(ext.candidates[:3], p)
    halves = [source.source.queued(r, 2) for r in range(2)]
    assert sum(len(h) for h in halves) == 6


def test_mochi_adds_own_columns_with_zero_weight_elsewhere():
    source = paired_negatives({"name": "mochi", "size": 8, "n_hard": 4, "s": 2, "s_prime": 1}, dim=4)
    a, p = F.normalize(torch.randn(2, 3, 4), dim=2)
    source.update(a, p)
    ext = source(a, p, epoch=0, seed=1)
    assert ext.candidates.shape == (3 + 6 + 3 * 3, 4)
    w = ext.neg_weight
    assert w.shape == (3, 18) and torch.all(w[:, :9] == 1)
    assert torch.equal(w[:, 9:].sum(dim=1), torch.full((3,), 3.0))
    again = source(a, p, epoch=0, seed=1)
    assert torch.equal(again.candidates, ext.candidates)  # seeded mixing


def test_feature_transformation_source_extrapolates_the_positive_pair():
    source = paired_negatives({"name": "feature_transformation", "size": 8}, dim=4)
    a, p = F.normalize(torch.randn(2, 3, 4), dim=2)
    ext = source(a, p, epoch=0, seed=0)
    assert ext.candidates.shape == (3, 4)
    # lambda+ in [1, 2] moves both ends apart: the positive similarity cannot increase.
    assert torch.all((ext.anchors * ext.candidates).sum(1) <= (a * p).sum(1) + 1e-6)


def test_any_core_source_is_used_by_name_and_mining_stays_on_one_process():
    source = paired_negatives({"name": "topk", "k": 2}, dim=4)
    a, p = F.normalize(torch.randn(2, 3, 4), dim=2)
    ext = source(a, p, epoch=0, seed=0)
    assert torch.equal(ext.candidates, p) and torch.equal(ext.neg_weight, mine_hard_negatives(a, p, k=2).neg_weight)
    with pytest.raises(ValueError, match="one process"):
        source(a, p, epoch=0, seed=0, rank=0, world=2)
    with pytest.raises(ValueError, match="no negatives"):
        paired_negatives({"name": "topk", "in_batch": False}, dim=4)


def test_negative_source_errors_name_the_key():
    with pytest.raises(ValueError, match="config.negatives.name"):
        paired_negatives({"name": "memory_bank"}, dim=4)
    with pytest.raises(ValueError, match="queue"):
        paired_negatives({"name": "queue", "sise": 3}, dim=4)


def test_queue_only_negatives_give_moco_logits():
    """``in_batch: false``: the loss is CE over ``[q.k+, q.queue] / T`` (MoCo), not over the other positives."""
    source = paired_negatives({"name": "queue", "size": 6, "in_batch": False}, dim=4)
    q, k, queued = F.normalize(torch.randn(3, 5, 4), dim=2)
    source.update(queued[:3], queued[3:])
    ext = source(q, k, epoch=0, seed=0)
    loss = InfoNCE(temperature=0.2, similarity="dot")(ext.anchors, ext.candidates, neg_weight=ext.neg_weight)
    logits = torch.cat([(q * k).sum(1, keepdim=True), q @ source.source.queue.negatives().T], dim=1) / 0.2
    torch.testing.assert_close(loss, F.cross_entropy(logits, torch.zeros(5, dtype=torch.long)))


def test_queue_only_weights_zero_every_ranks_positives():
    source = paired_negatives({"name": "queue", "size": 4, "in_batch": False}, dim=4)
    q, k = F.normalize(torch.randn(2, 3, 4), dim=2)
    source.update(k, k)
    ext = source(q, k, epoch=0, seed=0, rank=1, world=2)
    w = ext.neg_weight  # columns: rank 0 [3 positives, 2 queued], rank 1 [3 positives, 2 queued]
    assert w.shape == (3, 10)
    assert torch.equal(w[:, :3], torch.zeros(3, 3)) and torch.equal(w[:, 5:8], torch.eye(3))
    assert torch.all(w[:, 3:5] == 1) and torch.all(w[:, 8:] == 1)
