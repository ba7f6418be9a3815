"""The fast paths of MEOW's training step compute what the plain forms compute, to the bit: the GCN's
sparse product with a transpose built once (``graphs.Propagator``), k-means' assignment step
(``core/negatives/cluster_weights._assign``) and its final distances, the disagreement weights counted in bytes, and the weighted
InfoNCE's single-positive path (``core/objectives/infonce.weighted_single_positive_infonce``); k-means stopping at
Lloyd's fixed point gives what all its iterations give."""

import json
from pathlib import Path

import torch

from contrasuite.core.negatives import cluster_weights
from contrasuite.core.objectives import infonce
from contrasuite.core.task.protocol import TaskContext
from contrasuite.domains.graph.graphs import Propagator
from contrasuite.domains.graph.task import GraphTask
from contrasuite.pipelines.api import StepRunner
from contrasuite.pipelines.config import load_config

CONFIGS = Path(__file__).resolve().parents[3] / "configs" / "graph"


def test_propagator_is_the_sparse_product_and_its_autograd_gradient():
    g = torch.Generator().manual_seed(0)
    n, m, d = 40, 30, 5
    dense = torch.rand(n, m, generator=g) * (torch.rand(n, m, generator=g) > 0.7)
    adj = dense.to_sparse_csr()
    x = torch.randn(m, d, generator=g, requires_grad=True)
    grad = torch.randn(n, d, generator=g)
    plain = torch.sparse.mm(adj, x)
    (expected,) = torch.autograd.grad(plain, x, grad)
    prop = Propagator.of(adj)
    out = prop(x)
    (got,) = torch.autograd.grad(out, x, grad)
    assert torch.equal(out, plain) and torch.equal(got, expected)
    with torch.no_grad():
        assert torch.equal(prop(x), plain)


def _plain_assign(x, centroids, spherical):
    """The assignment step as it was written first (a batched product, ``argmax``)."""
    if spherical:
        return (x @ centroids.transpose(1, 2)).argmax(-1)
    return cluster_weights._sq_dist(x, centroids).argmin(-1)


def _plain_weights(assignments, *, normalize=False):
    a = torch.stack(list(assignments))
    w = torch.zeros(a.shape[1], a.shape[1])
    for c in a:
        w += (c[:, None] != c[None, :]).float()
    return w / a.shape[0] if normalize else w


def _generic_weighted(logits, pairs, neg_weight):
    """The generic path of ``weighted_infonce`` (taken for a weight that requires grad)."""
    return infonce.weighted_infonce(logits, pairs, neg_weight.clone().requires_grad_(), positive_in_denominator=False)


def _steps(tmp_path, make_tiny_graph, steps=3):
    dataset = make_tiny_graph(tmp_path / "tiny", 2)
    cfg = load_config(
        CONFIGS / "meow_acm.yaml",
        [f"config.dataset={json.dumps(dataset)}", "config.eval_ratios=[5]", "config.model.nei_max=[8, 8]",
         "config.negatives.num_clusters=[3, 5]"],
    ).config
    task = GraphTask()
    task.setup(TaskContext(cfg, torch.device("cpu"), "fp32", tmp_path, tmp_path, 0))
    step = StepRunner(task, torch.device("cpu"), "fp32")
    logs = [step(e, e, e) for e in range(steps)]
    return logs, {k: v.clone() for k, v in task.model.state_dict().items()}


def test_meow_steps_are_the_same_bits_as_with_the_plain_forms(tmp_path, make_tiny_graph, monkeypatch):
    fast_logs, fast_state = _steps(tmp_path / "fast", make_tiny_graph)
    monkeypatch.setattr(Propagator, "__call__", lambda self, x: torch.sparse.mm(self.matrix, x))
    monkeypatch.setattr(cluster_weights, "_assign", _plain_assign)
    monkeypatch.setattr(cluster_weights, "disagreement_weights", _plain_weights)
    monkeypatch.setattr(infonce, "weighted_single_positive_infonce", _generic_weighted)
    plain_logs, plain_state = _steps(tmp_path / "plain", make_tiny_graph)
    assert fast_logs == plain_logs
    assert all(torch.equal(fast_state[k], plain_state[k]) for k in plain_state)


def test_kmeans_assignment_and_nearest_distance_match_the_batched_forms_ties_included():
    g = torch.Generator().manual_seed(0)
    x = torch.nn.functional.normalize(torch.randn(9000, 16, generator=g), dim=1)  # several blocks of rows
    centroids = torch.nn.functional.normalize(torch.randn(3, 40, 16, generator=g), dim=-1)
    centroids[:, 7] = centroids[:, 3]  # exact ties: the first index wins in both forms
    centroids[1, 20:] = centroids[1, :20]
    for spherical in (True, False):
        assert torch.equal(cluster_weights._assign(x, centroids, spherical), _plain_assign(x, centroids, spherical))
    nearest, plain = cluster_weights._nearest(x, centroids), cluster_weights._sq_dist(x, centroids).min(-1)
    assert torch.equal(nearest[0], plain.values) and torch.equal(nearest[1], plain.indices)


def _all_iterations(x, k, n_iter, n_init, spherical, seed):
    """k-means as ``kmeans`` runs it, every one of the ``n_iter`` iterations."""
    x = torch.nn.functional.normalize(x, dim=1) if spherical else x
    centroids = cluster_weights._kmeans_pp(x, k, n_init, torch.Generator().manual_seed(seed))
    for _ in range(n_iter):
        centroids = cluster_weights._update(x, cluster_weights._assign(x, centroids, spherical), centroids, spherical)
    best_dist, assign = cluster_weights._sq_dist(x, centroids).min(-1)
    best = int(best_dist.sum(1).argmin())
    return assign[best], centroids[best]


_assign = cluster_weights._assign  # the unpatched assignment, for the counting wrapper below


def test_kmeans_stops_at_lloyds_fixed_point_with_the_bits_of_all_iterations(monkeypatch):
    g = torch.Generator().manual_seed(0)
    spread = torch.randn(600, 8, generator=g)
    repeated = torch.randn(5, 8, generator=g).repeat_interleave(40, dim=0)  # k > 5 distinct points: empty clusters
    calls = []
    monkeypatch.setattr(cluster_weights, "_assign", lambda *a: calls.append(1) or _assign(*a))
    for x, k in ((spread, 30), (repeated, 9)):
        for spherical in (True, False):
            calls.clear()
            result = cluster_weights.kmeans(x, k, n_iter=60, n_init=3, spherical=spherical,
                                            generator=torch.Generator().manual_seed(4))
            assert len(calls) < 60  # it stopped early
            assign, centroids = _all_iterations(x, k, 60, 3, spherical, seed=4)
            assert torch.equal(result.assignments, assign) and torch.equal(result.centroids, centroids)


def test_against_official_skips_in_one_line_without_the_official_folder(tmp_path, capsys):
    import contrasuite.domains.graph.bench as bench

    out = tmp_path / "record.json"
    assert bench.main(["--against", "official", "--official", str(tmp_path / "absent"), "--output", str(out)]) == 0
    printed = capsys.readouterr().out.strip().splitlines()
    assert len(printed) == 1 and "no official code_meow" in printed[0] and not out.exists()


def test_against_official_report_renders_its_section(tmp_path):
    import contrasuite.domains.graph.bench as bench

    facts = {"nodes": 4019, "dim": 64, "metapath_edges": [10, 20], "parameters": 1000, "num_clusters": [100, 300],
             "kmeans": "k-means"}
    rounds = [{"ours_cpu_s": 1.0, "peer_cpu_s": 1.4, "ours_wall_s": 2.0, "peer_wall_s": 2.6, "ratio": 1.4}] * 3
    record = {"section": "graph", "against": "official", "levers": [], "ours": "ours", "peer": "official",
              "dataset": "acm", "ours_facts": facts, "official_facts": {**facts, "faiss": "1"},
              "first_loss": {"ours": 13.3, "peer": 16.7}, "precision": "fp32", "device": "cpu", "threads": 1,
              "clock": "cpu", "steps_per_round": 3, "repeats": 3, "rounds": rounds, "ratio_median": 1.4,
              "ratio_min": 1.4, "ratio_max": 1.4, "torch": "2", "machine": "cpu", "cpu_count": 2,
              "load_average_1min": 1.0, "date_utc": "2026-01-01 00:00", "command": "contrasuite bench graph --against official"}
    path, page = tmp_path / "graph_official.json", tmp_path / "page.md"
    path.write_text(json.dumps(record))
    assert bench.main(["--report", "--output", str(path), "--page", str(page)]) == 0
    text = page.read_text()
    assert "<!-- section:graph -->" in text and "**1.40** median" in text
    assert "| 1 | 1.00 | 1.40 | 2.00 | 2.60 | 1.40 |" in text
