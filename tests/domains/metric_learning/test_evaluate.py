"""Recall@K and MAP@R against pytorch-metric-learning's AccuracyCalculator, core metrics and a loop."""

import pytest
import torch
import torch.nn.functional as F

from contrasuite.core.metrics.retrieval import map_at_r, recall_at_k
from contrasuite.core.similarity.poincare import poincare_distance, to_ball
from contrasuite.domains.metric_learning.evaluate import retrieval_metrics, scorer_for
from contrasuite.domains.metric_learning.objectives import MetricObjective


def data(seed=0, n_classes=12, per_class=(1, 2, 3, 4)):
    g = torch.Generator().manual_seed(seed)
    labels = torch.tensor([c for c in range(n_classes) for _ in range(per_class[c % len(per_class)] + 1)])
    centres = torch.randn(n_classes, 16, generator=g)
    emb = centres[labels] + 0.9 * torch.randn(len(labels), 16, generator=g)
    return emb, labels


def test_matches_pml_accuracy_calculator_leave_one_out():
    pytest.importorskip("pytorch_metric_learning")
    from pytorch_metric_learning.distances import CosineSimilarity
    from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator
    from pytorch_metric_learning.utils.inference import CustomKNN

    emb, labels = data()
    calc = AccuracyCalculator(include=("precision_at_1", "mean_average_precision_at_r"), knn_func=CustomKNN(CosineSimilarity()))
    ref = calc.get_accuracy(emb, labels, emb, labels, ref_includes_query=True)
    ours = retrieval_metrics(emb, labels, emb, labels, same_set=True, ks=(1, 2, 4, 8), chunk=7)
    assert ours["recall@1"] == pytest.approx(100 * ref["precision_at_1"], abs=1e-4)  # percent, PML's fraction
    assert ours["map@r"] == pytest.approx(100 * ref["mean_average_precision_at_r"], abs=1e-4)
    assert 10 < ours["recall@1"] < 100  # the data is neither trivial nor hopeless


def test_matches_core_metrics_both_protocols():
    emb, labels = data(1)
    ours = retrieval_metrics(emb, labels, emb, labels, same_set=True, ks=(1, 2, 4, 8))
    core_r = recall_at_k(emb, labels, ks=(1, 2, 4, 8))
    for k in (1, 2, 4, 8):
        assert ours[f"recall@{k}"] == pytest.approx(100 * core_r[k])
    assert ours["map@r"] == pytest.approx(100 * map_at_r(emb, labels))
    q, g = emb[::3], emb[1::3]
    ql, gl = labels[::3], labels[1::3]
    ours = retrieval_metrics(q, ql, g, gl, same_set=False, ks=(1, 4))
    keep = (ql[:, None] == gl[None, :]).any(dim=1)
    core_r = recall_at_k(q[keep], ql[keep], g, gl, ks=(1, 4))
    assert ours["recall@1"] == pytest.approx(100 * core_r[1]) and ours["recall@4"] == pytest.approx(100 * core_r[4])


def test_recall_loop_reference():
    emb, labels = data(2)
    s = F.normalize(emb, dim=1) @ F.normalize(emb, dim=1).T
    s.fill_diagonal_(-2)
    hits = sum(int(labels[s[i].argmax()] == labels[i]) for i in range(len(labels)))
    assert retrieval_metrics(emb, labels, emb, labels, same_set=True, ks=(1,))["recall@1"] == pytest.approx(100 * hits / len(labels))


def test_hyperbolic_objective_ranks_by_poincare_distance():
    emb, _ = data(3)
    scorer = scorer_for(MetricObjective([{"name": "hyperbolic_pairwise_ce", "c": 0.1, "clip_r": 2.3}]))
    scores = scorer(emb[:3], emb)
    ball = to_ball(emb, 0.1, 2.3)
    expected = -poincare_distance(ball[:3, None, :], ball[None, :, :], 0.1)
    assert torch.allclose(scores[:, 3:], expected[:, 3:], atol=1e-4)  # off self: fp32 cancellation at d=0
    cos = scorer_for(MetricObjective([{"name": "circle"}]))(emb[:3], emb)
    assert torch.allclose(cos, F.normalize(emb[:3], dim=1) @ F.normalize(emb, dim=1).T)


@pytest.mark.parametrize("same_set", [True, False])
def test_embeddings_on_cuda_with_labels_on_the_cpu(same_set):
    """The task's evaluation: embeddings on the device, labels on the CPU (checked on the fake CUDA device)."""
    from contrasuite.pipelines.testing.fake_cuda import fake_cuda

    emb, labels = data(2)
    q = torch.arange(len(labels)) % 3 == 0
    args = (emb, labels, emb, labels) if same_set else (emb[q], labels[q], emb[~q], labels[~q])
    on_cpu = retrieval_metrics(*args, same_set=same_set, chunk=7)
    with fake_cuda():
        on_cuda = retrieval_metrics(*(t.to("cuda") if i % 2 == 0 else t for i, t in enumerate(args)), same_set=same_set, chunk=7)
    assert on_cuda == pytest.approx(on_cpu, abs=1e-6)
