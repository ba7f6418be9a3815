"""Representation health metrics against hand-computed values."""

import math

import pytest
import torch

from contrasuite.core.metrics.health import (
    alignment,
    effective_rank,
    health,
    similarity_gap,
    similarity_samples,
    uniformity,
)


def test_alignment_identical_and_antipodal():
    x = torch.randn(5, 3)
    assert alignment(x, 2 * x) == pytest.approx(0.0, abs=1e-6)  # scale does not matter: unit vectors
    assert alignment(x, -x) == pytest.approx(4.0, abs=1e-5)  # ||u - (-u)||^2 = 4


def test_uniformity_of_orthonormal_vectors():
    # every pair at squared distance 2: log exp(-2 * 2) = -4
    assert uniformity(torch.eye(4)) == pytest.approx(-4.0, abs=1e-5)
    # all equal (collapsed): distance 0 -> log 1 = 0
    assert uniformity(torch.ones(6, 3)) == pytest.approx(0.0, abs=1e-6)


def test_similarity_gap_and_samples():
    e = torch.eye(3)
    pos, neg = similarity_samples(e, e)
    assert pos.tolist() == [1.0, 1.0, 1.0] and neg.numel() == 6 and neg.abs().max() == 0
    assert similarity_gap(e, e) == pytest.approx(1.0)
    assert similarity_gap(e, -e) == pytest.approx(-1.0)


def test_effective_rank_bounds():
    assert effective_rank(torch.eye(5)) == pytest.approx(5.0, rel=1e-5)
    collapsed = torch.randn(8, 1) @ torch.randn(1, 6)
    assert effective_rank(collapsed) == pytest.approx(1.0, abs=1e-3)
    # two equal singular values plus nothing else: exp(log 2) = 2
    assert effective_rank(torch.tensor([[1.0, 0, 0], [0, 1.0, 0]])) == pytest.approx(2.0, rel=1e-5)


def test_health_keys_and_shape_errors():
    a, b = torch.randn(10, 4), torch.randn(10, 4)
    values = health(a, b)
    assert set(values) == {"alignment", "uniformity", "similarity_gap", "effective_rank"}
    assert all(math.isfinite(v) for v in values.values())
    with pytest.raises(ValueError, match=r"\[N, D\]"):
        effective_rank(torch.randn(3))
    with pytest.raises(ValueError, match="pair row by row"):
        alignment(torch.randn(3, 2), torch.randn(4, 2))
