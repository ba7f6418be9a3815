"""Recall@K, MAP@R and MRR: hand-made cases, loops, and agreement with pytorch-metric-learning."""

import pytest
import torch
import torch.nn.functional as F

from contrasuite.core.metrics.retrieval import map_at_r, mean_reciprocal_rank, recall_at_k


def test_recall_hand_made_leave_one_out():
    # 1-D points on a circle: neighbours are obvious
    x = torch.tensor([[1.0, 0.0], [0.99, 0.1], [0.0, 1.0], [-0.1, 0.99], [-1.0, 0.05]])
    labels = torch.tensor([0, 0, 1, 2, 2])
    r = recall_at_k(x, labels, ks=(1, 2))
    # NN: 0->1 (hit), 1->0 (hit), 2->3 (miss), 3->2 (miss; 2nd is 4 -> hit), 4->3 (hit)
    assert r[1] == pytest.approx(3 / 5)
    # top-2: 2 -> {3, 1} miss
    assert r[2] == pytest.approx(4 / 5)


def test_recall_query_vs_gallery_and_chunking():
    torch.manual_seed(0)
    q, g = torch.randn(37, 8), torch.randn(50, 8)
    ql, gl = torch.randint(0, 6, (37,)), torch.randint(0, 6, (50,))
    full = recall_at_k(q, ql, g, gl, ks=(1, 5, 10), chunk_size=1000)
    assert recall_at_k(q, ql, g, gl, ks=(1, 5, 10), chunk_size=7) == full
    sim = F.normalize(q, dim=1) @ F.normalize(g, dim=1).T
    for k in (1, 5, 10):
        loop = sum(bool((gl[sim[i].argsort(descending=True)[:k]] == ql[i]).any()) for i in range(37)) / 37
        assert full[k] == pytest.approx(loop)


def map_at_r_loop(x, labels):
    z = F.normalize(x, dim=1)
    total, used = 0.0, 0
    for i in range(len(x)):
        others = [j for j in range(len(x)) if j != i]
        r = sum(int(labels[j] == labels[i]) for j in others)
        if r == 0:
            continue
        ranked = sorted(others, key=lambda j: -float(z[i] @ z[j]))[:r]
        hits, ap = 0, 0.0
        for rank, j in enumerate(ranked, start=1):
            if labels[j] == labels[i]:
                hits += 1
                ap += hits / rank
        total += ap / r
        used += 1
    return total / used


def test_map_at_r_hand_made():
    # query 0 (label 0) has R=2 matches; neighbours ranked 1 (hit), 2 (miss) -> (1/1)/2 = 0.5
    x = torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.8, 0.3], [0.0, 1.0]])
    labels = torch.tensor([0, 0, 1, 0])
    assert map_at_r(x, labels) == pytest.approx(map_at_r_loop(x, labels))


def test_map_at_r_matches_loop_and_chunking():
    torch.manual_seed(1)
    x, labels = torch.randn(60, 6), torch.randint(0, 5, (60,))
    assert map_at_r(x, labels, chunk_size=9) == pytest.approx(map_at_r_loop(x, labels), rel=1e-6)


def test_agrees_with_pytorch_metric_learning():
    calc_mod = pytest.importorskip("pytorch_metric_learning.utils.accuracy_calculator")
    torch.manual_seed(2)
    x, labels = torch.randn(120, 16), torch.randint(0, 8, (120,))
    from pytorch_metric_learning.distances import LpDistance
    from pytorch_metric_learning.utils.inference import CustomKNN

    calc = calc_mod.AccuracyCalculator(
        include=("mean_average_precision_at_r", "precision_at_1"),
        k="max_bin_count",
        device=torch.device("cpu"),
        knn_func=CustomKNN(LpDistance(normalize_embeddings=True)),  # no faiss needed
    )
    ref = calc.get_accuracy(x, labels)
    assert map_at_r(x, labels, chunk_size=17) == pytest.approx(ref["mean_average_precision_at_r"], rel=1e-5)
    assert recall_at_k(x, labels, ks=(1,))[1] == pytest.approx(ref["precision_at_1"], rel=1e-6)
    q, ql = torch.randn(30, 16), torch.randint(0, 8, (30,))
    ref_qg = calc.get_accuracy(q, ql, x, labels)
    assert map_at_r(q, ql, x, labels) == pytest.approx(ref_qg["mean_average_precision_at_r"], rel=1e-5)
    assert recall_at_k(q, ql, x, labels, ks=(1,))[1] == pytest.approx(ref_qg["precision_at_1"], rel=1e-6)


def test_mrr_hand_made_and_ties():
    scores = torch.tensor([[0.1, 0.9, 0.3], [0.5, 0.5, 0.2], [0.2, 0.1, 0.0]])
    target = torch.tensor([1, 0, 2])
    # ranks 1, 2 (tie counts against), 3
    assert mean_reciprocal_rank(scores, target) == pytest.approx((1 + 1 / 2 + 1 / 3) / 3)
    assert mean_reciprocal_rank(scores, target, chunk_size=1) == mean_reciprocal_rank(scores, target)


def test_errors_name_arguments():
    with pytest.raises(ValueError, match="target"):
        mean_reciprocal_rank(torch.rand(2, 3), torch.tensor([0, 3]))
    with pytest.raises(ValueError, match="ks asks"):
        recall_at_k(torch.randn(4, 2), torch.arange(4), ks=(4,))
