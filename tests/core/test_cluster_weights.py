"""k-means in torch and MEOW's cluster-disagreement weights."""

import pytest
import torch
import torch.nn.functional as F

from contrasuite.core.negatives.cluster_weights import (
    ClusterWeights,
    concentration,
    disagreement_weights,
    kmeans,
)
from contrasuite.core.objectives import InfoNCE


def blobs(n_per=20, k=4, d=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    centres = F.normalize(torch.randn(k, d, generator=g), dim=1) * 5
    x = torch.cat([centres[i] + 0.1 * torch.randn(n_per, d, generator=g) for i in range(k)])
    return x, torch.arange(k).repeat_interleave(n_per)


@pytest.mark.parametrize("spherical", [True, False])
def test_kmeans_recovers_separated_blobs(spherical):
    x, truth = blobs()
    res = kmeans(x, 4, spherical=spherical, generator=torch.Generator().manual_seed(1))
    # the partition equals the truth up to relabelling
    same_pred = res.assignments[:, None] == res.assignments[None, :]
    same_true = truth[:, None] == truth[None, :]
    assert torch.equal(same_pred, same_true)
    assert res.centroids.shape == (4, 8)
    if spherical:
        assert torch.allclose(res.centroids.norm(dim=1), torch.ones(4), atol=1e-5)


def test_kmeans_is_seeded_and_restarts_do_not_hurt():
    x = torch.randn(200, 5, generator=torch.Generator().manual_seed(3))
    a = kmeans(x, 7, generator=torch.Generator().manual_seed(5), spherical=False)
    b = kmeans(x, 7, generator=torch.Generator().manual_seed(5), spherical=False)
    assert torch.equal(a.assignments, b.assignments)
    one = kmeans(x, 7, n_init=1, generator=torch.Generator().manual_seed(5), spherical=False)
    many = kmeans(x, 7, n_init=8, generator=torch.Generator().manual_seed(5), spherical=False)
    assert many.inertia <= one.inertia + 1e-4


def test_kmeans_rejects_bad_k():
    with pytest.raises(ValueError, match="num_clusters"):
        kmeans(torch.randn(5, 2), 6)


def test_disagreement_weights_count_separating_clusterings():
    a = torch.tensor([[0, 0, 1, 1], [0, 1, 1, 1]])
    w = disagreement_weights(a)
    expected = torch.tensor(
        [[0, 1, 2, 2], [1, 0, 1, 1], [2, 1, 0, 0], [2, 1, 0, 0]], dtype=torch.float32
    )
    assert torch.equal(w, expected)
    assert torch.equal(disagreement_weights(a, normalize=True), expected / 2)
    assert torch.equal(disagreement_weights(a[:1]), (a[0][:, None] != a[0][None, :]).float())  # one clustering
    many = a.repeat(150, 1)  # 300 clusterings: counted past a byte's 255
    assert torch.equal(disagreement_weights(many), expected * 150)


def test_concentration_mean_is_temperature_and_clipped():
    x, _ = blobs(n_per=15, k=5)
    res = kmeans(x, 5, generator=torch.Generator().manual_seed(0))
    phi = concentration(x, res, 0.4)
    assert phi.shape == (5,)
    assert phi.mean().item() == pytest.approx(0.4, rel=1e-5)
    assert (phi > 0).all()


def test_cluster_weights_drive_meow_infonce():
    """Same-cluster candidates in every clustering drop out of the denominator."""
    x, _ = blobs(n_per=10, k=3)
    cw = ClusterWeights([3, 3])
    clus = cw.cluster(x, seed=0)
    w = cw.weights(clus)
    assert w.shape == (30, 30) and torch.all(w.diagonal() == 0) and w.max() == 2
    view = x + 0.01 * torch.randn_like(x)
    loss = InfoNCE(0.5, positive_in_denominator=False)(x, view, neg_weight=w)
    # hand formula: -log(e_ii / sum_j w_ij e_ij)
    s = F.normalize(x, dim=1) @ F.normalize(view, dim=1).T / 0.5
    ref = (-s.diagonal() + torch.log((w * s.exp()).sum(1))).mean()
    assert loss.item() == pytest.approx(ref.item(), rel=1e-5)
    assert len(cw.concentrations(x, clus, 0.5)) == 2
