"""Frozen-feature evaluation: weighted kNN by hand, linear probe on separable data, BN in eval mode."""

import math

import pytest
import torch
from torch import nn

from contrasuite.core.metrics.probe import (
    extract_features,
    knn_accuracy,
    knn_predict,
    linear_probe,
    stratified_split,
)


def blobs(n_per_class: int, num_classes: int, dim: int, seed: int, spread: float = 0.3):
    gen = torch.Generator().manual_seed(seed)
    centres = torch.eye(num_classes, dim) * 3.0
    labels = torch.arange(num_classes).repeat_interleave(n_per_class)
    feats = centres[labels] + spread * torch.randn(len(labels), dim, generator=gen)
    return feats, labels


def test_knn_weighted_vote_matches_hand_computation():
    # Two neighbours of class 0 at cos 0.6, one of class 1 at cos 1.0: with T = 0.1 the single close
    # neighbour wins (e^10 > 2 e^6); with T = 10 the two far ones win (2 e^0.06 > e^0.1).
    bank = torch.tensor([[0.6, 0.8], [0.6, -0.8], [1.0, 0.0]])
    labels = torch.tensor([0, 0, 1])
    query = torch.tensor([[2.0, 0.0]])
    assert math.exp(1 / 0.1) > 2 * math.exp(0.6 / 0.1)
    assert knn_predict(bank, labels, query, k=3, temperature=0.1).item() == 1
    assert knn_predict(bank, labels, query, k=3, temperature=10.0).item() == 0
    assert knn_predict(bank, labels, query, k=1, temperature=10.0).item() == 1


def test_knn_on_separable_blobs():
    train, y_train = blobs(50, 4, 8, seed=0)
    test, y_test = blobs(20, 4, 8, seed=1)
    assert knn_accuracy(train, y_train, test, y_test, k=200, temperature=0.1) == 1.0
    shuffled = y_train[torch.randperm(len(y_train), generator=torch.Generator().manual_seed(0))]
    assert knn_accuracy(train, shuffled, test, y_test, k=5) < 0.6


def test_knn_chunking_does_not_change_predictions():
    train, y_train = blobs(30, 3, 6, seed=2, spread=2.0)
    test, _ = blobs(10, 3, 6, seed=3, spread=2.0)
    full = knn_predict(train, y_train, test, k=7, chunk_size=1024)
    chunked = knn_predict(train, y_train, test, k=7, chunk_size=4)
    assert torch.equal(full, chunked)


def test_stratified_split_keeps_every_class_and_is_disjoint():
    labels = torch.arange(5).repeat_interleave(20)
    fit, val = stratified_split(labels, 0.1, seed=0)
    assert len(set(fit.tolist()) & set(val.tolist())) == 0
    assert len(fit) + len(val) == len(labels)
    assert torch.equal(labels[val].bincount(), torch.full((5,), 2))


def test_linear_probe_separates_blobs_and_selects_on_validation():
    train, y_train = blobs(60, 5, 10, seed=0, spread=0.5)
    test, y_test = blobs(20, 5, 10, seed=1, spread=0.5)
    result = linear_probe(train, y_train, test, y_test, weight_decays=(0.0, 1e-3), epochs=30, lr=0.05)
    assert result.test_accuracy > 0.95
    assert result.val_accuracy > 0.95
    assert result.weight_decay in (0.0, 1e-3) and 1 <= result.epoch <= 30


def test_linear_probe_ignores_test_labels_for_selection():
    train, y_train = blobs(40, 3, 6, seed=0, spread=1.5)
    test, y_test = blobs(20, 3, 6, seed=1, spread=1.5)
    a = linear_probe(train, y_train, test, y_test, epochs=10, batch_size=16)
    b = linear_probe(train, y_train, test, (y_test + 1) % 3, epochs=10, batch_size=16)
    assert (a.weight_decay, a.epoch, a.val_accuracy) == (b.weight_decay, b.epoch, b.val_accuracy)
    assert a.test_accuracy != b.test_accuracy


def test_extract_features_uses_batchnorm_running_stats_and_restores_mode():
    net = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4))
    net.train()
    net[1].running_mean.fill_(5.0)
    x = torch.randn(8, 4)
    feats = extract_features(net, [x[:4], x[4:]])
    assert net.training and net[1].training  # mode restored
    assert torch.equal(net[1].running_mean, torch.full((4,), 5.0))  # statistics not updated
    net.eval()
    expected = net(x)
    assert torch.allclose(feats, expected.detach())
    # In train mode the batch statistics would give a per-batch zero mean instead.
    assert not torch.allclose(feats[:4].mean(0), torch.zeros(4), atol=1e-3)


def test_bad_shapes_are_named():
    with pytest.raises(ValueError, match="train_feats labels"):
        knn_predict(torch.randn(4, 2), torch.zeros(3, dtype=torch.long), torch.randn(1, 2))
    with pytest.raises(ValueError, match="width"):
        linear_probe(torch.randn(10, 2), torch.arange(10) % 2, torch.randn(4, 3), torch.arange(4) % 2)
