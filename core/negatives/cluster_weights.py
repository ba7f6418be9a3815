"""Negative weights from repeated k-means clusterings (MEOW, Yu & Li, SDM 2023).

K clusterings ``c_1..c_K`` of the (detached) embeddings give each pair a weight::

    w_ij = sum_{k=1..K} 1[c_k(i) != c_k(j)]        (w_ii = 0, w_ij in {0, ..., K})

A candidate that shares a cluster with the anchor in every clustering is not a negative (weight 0);
one that never does weighs K. ``normalize=True`` divides by K (weights in [0, 1]); MEOW's code does
not. Each clustering also yields L2-normalised centroids and PCL's per-cluster concentration
(Li et al., ICLR 2021) used by MEOW's ProtoNCE term::

    phi_r = mean_{i in r} ||z_i - mu_r|| / log(n_r + offset)

with singleton clusters set to the largest value, clipped to the 10th-90th percentile and rescaled
so that ``mean(phi) = temperature``. The offset is 5 in MEOW's code (PCL's own code uses 10).

k-means is plain torch: k-means++ seeding from a seeded ``torch.Generator``, Lloyd iterations, and
``n_init`` restarts run as one batched computation, the restart with the lowest inertia kept. The iterations
stop early once no restart's assignments change: from there each further iteration would recompute the same
centroids (empty clusters keep theirs), so the result is the one all ``n_iter`` iterations give, to the bit.
``spherical=True`` assigns by inner product with L2-normalised centroids (MEOW's faiss inner-product
index on normalised embeddings).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
from torch import Tensor


@dataclass(frozen=True)
class Clustering:
    """One k-means result."""

    assignments: Tensor
    """``[N]`` cluster index of each point."""
    centroids: Tensor
    """``[k, D]`` centroids (L2-normalised when spherical)."""
    inertia: float
    """Sum of squared distances of the points to their centroids."""


def _sq_dist(x: Tensor, c: Tensor) -> Tensor:
    """Squared Euclidean distances ``[R, N, k]`` between ``x [N, D]`` and batched centroids ``c [R, k, D]``."""
    return ((x * x).sum(-1)[None, :, None] - 2 * x @ c.transpose(1, 2) + (c * c).sum(-1)[:, None, :]).clamp_min(0)


def _kmeans_pp(x: Tensor, k: int, runs: int, generator: torch.Generator) -> Tensor:
    """k-means++ seeding for ``runs`` restarts at once: ``[runs, k, D]``.

    Each next centroid is drawn with probability proportional to the squared distance to the
    closest centroid so far, by inverse-CDF sampling (one uniform draw per restart).
    """
    n = x.shape[0]
    sq = (x * x).sum(1)
    picks = [torch.randint(n, (runs,), generator=generator, device=x.device)]
    closest = (sq[None, :] - 2 * x[picks[0]] @ x.T + sq[picks[0], None]).clamp_min(0)
    for _ in range(1, k):
        cdf = closest.cumsum(1)
        total = cdf[:, -1:]
        u = torch.rand(runs, 1, generator=generator, device=x.device) * total
        pick = torch.searchsorted(cdf, u).clamp_max(n - 1)[:, 0]
        # all points already coincide with centroids: draw uniformly instead
        uniform = torch.randint(n, (runs,), generator=generator, device=x.device)
        pick = torch.where(total[:, 0] > 0, pick, uniform)
        picks.append(pick)
        closest = torch.minimum(closest, (sq[None, :] - 2 * x[pick] @ x.T + sq[pick, None]).clamp_min(0))
    return x[torch.stack(picks, dim=1)]


def _block_rows(x: Tensor, columns: int) -> int:
    """Rows of ``x`` per block whose ``[rows, columns]`` scores take about 2 MB (they stay in the CPU's cache for
    the reduction that follows); all rows at once off the CPU."""
    return max(64, (1 << 19) // columns) if x.device.type == "cpu" else x.shape[0]


def _nearest(x: Tensor, centroids: Tensor) -> tuple[Tensor, Tensor]:
    """Squared distance to the nearest centroid and its index, ``[R, N]`` each: ``_sq_dist(x, centroids).min(-1)``
    to the bit, one block of rows at a time (about a third of the CPU time of the whole ``[R, N, k]`` at once)."""
    rows = _block_rows(x, centroids.shape[0] * centroids.shape[1])
    parts = [_sq_dist(x[start : start + rows], centroids).min(-1) for start in range(0, x.shape[0], rows)]
    return torch.cat([p.values for p in parts], 1), torch.cat([p.indices for p in parts], 1)


def _assign(x: Tensor, centroids: Tensor, spherical: bool) -> Tensor:
    """Nearest centroid ``[R, N]``: largest inner product for unit vectors, else smallest distance.

    The inner products of all restarts are one ``[rows, R * k]`` product per block of rows (:func:`_block_rows`),
    and the nearest centroid is ``max(...).indices`` (the first of tied maxima, as ``argmax``): the same values
    and indices as ``(x @ centroids.transpose(1, 2)).argmax(-1)`` in about a third of the CPU time (a batched
    product with a broadcast ``x``, and ``argmax`` over the last dimension, are slow kernels there).
    """
    if not spherical:
        return _nearest(x, centroids)[1]
    runs, k, dim = centroids.shape
    flat = centroids.reshape(runs * k, dim).T
    rows = _block_rows(x, runs * k)
    out = torch.empty(runs, x.shape[0], dtype=torch.long, device=x.device)
    for start in range(0, x.shape[0], rows):
        out[:, start : start + rows] = (x[start : start + rows] @ flat).view(-1, runs, k).max(-1).indices.T
    return out


def _update(x: Tensor, assign: Tensor, centroids: Tensor, spherical: bool) -> Tensor:
    """Lloyd's update of ``centroids [R, k, D]``: the mean of each cluster's points under ``assign [R, N]``
    (L2-normalised when spherical); an empty cluster keeps its centroid as it is."""
    n_init, num_clusters, dim = centroids.shape
    sums = torch.zeros(n_init, num_clusters, dim, device=x.device)
    for r in range(n_init):  # per restart: no R copies of x, the same sums in the same order
        sums[r].index_add_(0, assign[r], x)
    runs = torch.arange(n_init, device=x.device)[:, None]
    counts = torch.bincount((runs * num_clusters + assign).reshape(-1), minlength=n_init * num_clusters)
    counts = counts.to(x.dtype).view(n_init, num_clusters, 1)
    updated = sums / counts.clamp_min(1)
    if spherical:
        updated = torch.nn.functional.normalize(updated, dim=-1)
    return torch.where(counts == 0, centroids, updated)


def kmeans(
    x: Tensor,
    num_clusters: int,
    *,
    n_iter: int = 20,
    n_init: int = 5,
    spherical: bool = True,
    generator: torch.Generator | None = None,
) -> Clustering:
    """k-means on ``x [N, D]`` (module docstring); the best of ``n_init`` batched restarts by inertia."""
    if x.dim() != 2:
        raise ValueError(f"x must be [N, D], got shape {tuple(x.shape)}")
    n = x.shape[0]
    if not 1 <= num_clusters <= n:
        raise ValueError(f"num_clusters must be in [1, N={n}], got {num_clusters}")
    if n_iter < 1 or n_init < 1:
        raise ValueError(f"n_iter and n_init must be >= 1, got {n_iter} and {n_init}")
    generator = generator if generator is not None else torch.Generator(device=x.device).manual_seed(0)
    x = x.detach().float()
    if spherical:
        x = torch.nn.functional.normalize(x, dim=1)
    centroids = _kmeans_pp(x, num_clusters, n_init, generator)
    previous = None
    for _ in range(n_iter):
        assign = _assign(x, centroids, spherical)  # [R, N]
        if previous is not None and torch.equal(assign, previous):
            break  # every restart at Lloyd's fixed point: the same assignments give the same centroids again
        previous = assign
        centroids = _update(x, assign, centroids, spherical)
    best_dist, assign = _nearest(x, centroids)
    inertia = best_dist.sum(1)
    best = int(inertia.argmin())
    return Clustering(assign[best], centroids[best], float(inertia[best]))


def disagreement_weights(assignments: Tensor | Sequence[Tensor], *, normalize: bool = False) -> Tensor:
    """``w_ij = sum_k 1[c_k(i) != c_k(j)]`` from ``assignments [K, N]``; divided by K when ``normalize``."""
    a = torch.stack(list(assignments)) if not isinstance(assignments, Tensor) else assignments
    if a.dim() != 2:
        raise ValueError(f"assignments must be [K, N], got shape {tuple(a.shape)}")
    # counted in bytes (exact up to 255 clusterings; the first mask's bytes are its count), then one conversion:
    # the same values as summing float masks, in about half the passes over N x N memory
    first = a[0][:, None] != a[0][None, :]
    count = first.view(torch.uint8) if a.shape[0] < 256 else first.to(torch.int32)
    for c in a[1:]:
        count.add_((c[:, None] != c[None, :]).view(torch.uint8))  # as bytes: no converted copy of the mask
    w = count.to(torch.get_default_dtype())
    return w / a.shape[0] if normalize else w


def concentration(
    x: Tensor, clustering: Clustering, temperature: float, *, offset: float = 5.0, spherical: bool = True
) -> Tensor:
    """PCL's per-cluster concentration ``phi [k]`` (module docstring), rescaled to mean ``temperature``."""
    x = x.detach().float()
    if spherical:
        x = torch.nn.functional.normalize(x, dim=1)
    k = clustering.centroids.shape[0]
    dist = (x - clustering.centroids[clustering.assignments]).norm(dim=1)
    counts = torch.bincount(clustering.assignments, minlength=k).float()
    mean_dist = torch.zeros(k, device=x.device).index_add_(0, clustering.assignments, dist) / counts.clamp_min(1)
    phi = mean_dist / torch.log(counts + offset)
    several = counts > 1
    fill = phi[several].max() if several.any() else torch.tensor(1.0, device=x.device)
    phi = torch.where(several, phi, fill)
    lo, hi = torch.quantile(phi, torch.tensor([0.1, 0.9], device=x.device))
    phi = phi.clamp(lo, hi)
    return temperature * phi / phi.mean().clamp_min(torch.finfo(phi.dtype).tiny)


class ClusterWeights:
    """MEOW's K clusterings of one embedding matrix: weights, assignments, centroids, concentrations.

    Args:
        num_clusters: the number of clusters of each of the K clusterings (MEOW ACM: ``[100, 300]``).
        n_iter: Lloyd iterations (MEOW: 20).
        n_init: restarts, best by inertia (MEOW: 5).
        normalize: divide the weights by K.
        spherical: cluster L2-normalised points with normalised centroids.
        concentration_offset: ``offset`` in PCL's concentration.
    """

    def __init__(
        self,
        num_clusters: Sequence[int],
        *,
        n_iter: int = 20,
        n_init: int = 5,
        normalize: bool = False,
        spherical: bool = True,
        concentration_offset: float = 5.0,
    ) -> None:
        if not num_clusters or any(int(k) < 1 for k in num_clusters):
            raise ValueError(f"num_clusters must be a non-empty list of positive ints, got {list(num_clusters)}")
        self.num_clusters = [int(k) for k in num_clusters]
        self.n_iter = n_iter
        self.n_init = n_init
        self.normalize = normalize
        self.spherical = spherical
        self.concentration_offset = concentration_offset

    def cluster(self, x: Tensor, seed: int) -> list[Clustering]:
        """The K clusterings of ``x``, clustering ``k`` seeded with ``seed + k``."""
        out = []
        for i, k in enumerate(self.num_clusters):
            gen = torch.Generator(device=x.device).manual_seed(seed + i)
            out.append(
                kmeans(x, min(k, x.shape[0]), n_iter=self.n_iter, n_init=self.n_init, spherical=self.spherical, generator=gen)
            )
        return out

    def weights(self, clusterings: Sequence[Clustering]) -> Tensor:
        """``[N, N]`` disagreement weights of ``clusterings``."""
        return disagreement_weights([c.assignments for c in clusterings], normalize=self.normalize)

    def concentrations(self, x: Tensor, clusterings: Sequence[Clustering], temperature: float) -> list[Tensor]:
        """PCL concentrations of each clustering, each rescaled to mean ``temperature``."""
        return [
            concentration(x, c, temperature, offset=self.concentration_offset, spherical=self.spherical)
            for c in clusterings
        ]
