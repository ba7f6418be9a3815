"""The HeCo/MEOW probe protocol on toy embeddings."""

import numpy as np
import pytest
import torch
from sklearn.metrics import f1_score

from contrasuite.domains.graph.evaluate import ProbeSettings, clustering_scores, f1_scores, heco_probe


def toy(separable: bool, n_per: int = 100, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(3).repeat_interleave(n_per)
    x = torch.randn(3 * n_per, 16, generator=g)
    if separable:
        x[:, :3] += 6 * torch.nn.functional.one_hot(y, 3)
    order = torch.randperm(3 * n_per, generator=g)
    train = torch.cat([order[y[order] == c][:10] for c in range(3)])
    rest = order[~torch.isin(order, train)]
    return x, y, train, rest[:100], rest[100:200]


def test_f1_matches_sklearn():
    g = torch.Generator().manual_seed(1)
    truth = torch.randint(0, 4, (50,), generator=g)
    pred = torch.randint(0, 4, (3, 50), generator=g)
    macro, micro = f1_scores(pred, truth, 4)
    for r in range(3):
        assert macro[r].item() == pytest.approx(f1_score(truth, pred[r], average="macro"), abs=1e-6)
        assert micro[r].item() == pytest.approx(f1_score(truth, pred[r], average="micro"), abs=1e-6)


def test_probe_separable_vs_random():
    settings = ProbeSettings(lr=0.05, iterations=100, runs=4)
    good = heco_probe(*toy(True), settings)
    bad = heco_probe(*toy(False), settings)
    assert good["macro_f1"] > 90 and good["auc"] > 98
    assert bad["macro_f1"] < 60
    assert set(good) >= {"macro_f1_std", "micro_f1", "micro_f1_std", "auc_std", "val_macro_f1", "val_micro_f1"}


def test_probe_runs_are_independent_and_seeded():
    x, y, train, val, test = toy(True)
    a = heco_probe(x, y, train, val, test, ProbeSettings(iterations=20, runs=3), seed=7)
    b = heco_probe(x, y, train, val, test, ProbeSettings(iterations=20, runs=3), seed=7)
    assert a == b


def test_selection_uses_validation_not_test():
    """Swapping the test labels must not change which iteration is picked (val-only selection)."""
    x, y, train, val, test = toy(True)
    settings = ProbeSettings(lr=0.05, iterations=60, runs=2)
    base = heco_probe(x, y, train, val, test, settings)
    y2 = y.clone()
    y2[test] = (y[test] + 1) % 3  # test labels scrambled
    scrambled = heco_probe(x, y2, train, val, test, settings)
    assert scrambled["val_macro_f1"] == base["val_macro_f1"]
    assert scrambled["macro_f1"] < 20 < 80 < base["macro_f1"]  # picked by val: the wrong test labels cost


def test_clustering_scores():
    x, y, *_ = toy(True)
    good = clustering_scores(x, y, runs=3)
    bad = clustering_scores(torch.randn(300, 16), y, runs=3)
    assert good["nmi"] > 90 and good["ari"] > 90
    assert bad["nmi"] < 10 and np.isfinite(bad["ari"])
