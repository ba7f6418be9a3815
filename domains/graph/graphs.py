"""Meta-path graphs for MEOW: PathSim pruning, MEOW's GCN normalisation, edge dropping, meta-path contexts.

PathSim (Sun et al., VLDB 2011) between target nodes i and j under a meta-path with counts ``A``::

    sim(i, j) = 2 A_ij / (A_ii + A_jj)

Each node keeps its ``nei_max`` most similar nodes (itself included unless ties push it out), with
their path counts: the pruned matrix ``A`` (row i: the nodes i kept). MEOW's code normalises it with
the GCN helper written for symmetric matrices, ``D^-1/2 A^T D^-1/2`` with ``D`` the row sums of
``A``, and propagates ``out = M x``. On the pruned, no longer symmetric ``A`` this means that node i
gathers from the nodes that kept i (``gather="in"``, the default); ``gather="out"`` gathers from
the nodes i kept (``D^-1/2 A D^-1/2``). The graph of the plain view keeps the path counts as
weights and adds no self-loops (``weights="counts"``); the augmented view's graph is binary, its
diagonal removed, a fraction of its edges dropped and the identity added (``code_meow/module/
preprocess.py``: ``pathsim``, ``normalize_adj``, ``mask_edges``).

The context of a target node under a meta-path ``t0 t1 ... tL`` is, at each intermediate position
``k``, the mean over the nodes of type ``tk`` reached along the path, taken hop by hop::

    C_k = R_{01} R_{12} ... R_{(k-1)k} H_k       (R: row-normalised incidence, H_k: projected features)

For PAP this is the mean of a paper's authors (MEOW's ``nei_a``). For longer paths (DBLP's APCPA:
papers, conferences, papers) MEOW's exact incidences are not published; the hop-by-hop mean is our
reading and is documented as such.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import torch
from torch import Tensor
from torch_geometric.data import HeteroData

from contrasuite.core.numerics import full_precision
from contrasuite.domains.graph.data import metapath_edge_types, reach_incidence, row_normalized_incidence

GATHER = ("in", "out")
CONTEXTS = ("walk", "reach")
TIES = ("torch", "numpy", "random")
WEIGHTS = ("counts", "binary")


@dataclass
class MetaPathGraph:
    """A PathSim-pruned meta-path graph over the target nodes: ``cols[e]`` is one of the kept
    neighbours of ``rows[e]``, ``counts[e]`` their path count (module docstring)."""

    rows: Tensor
    cols: Tensor
    counts: Tensor
    num_nodes: int

    def to(self, device: torch.device | str) -> MetaPathGraph:
        return MetaPathGraph(self.rows.to(device), self.cols.to(device), self.counts.to(device), self.num_nodes)

    def adjacency(self, weights: str = "counts", gather: str = "in") -> Tensor:
        """The plain view's normalised graph (sparse CSR ``adj_t [target, source]``)."""
        if weights not in WEIGHTS:
            raise ValueError(f"weights must be one of {WEIGHTS}, got {weights!r}")
        values = self.counts if weights == "counts" else torch.ones_like(self.counts)
        return propagation_matrix(self.rows, self.cols, values, self.num_nodes, gather)

    def dropped(self, rate: float, generator: torch.Generator, gather: str = "in") -> Tensor:
        """The augmented view's graph: binary, no diagonal, ``floor(rate * E)`` of its ``E`` edges
        dropped at random, the identity added, normalised as :meth:`adjacency`."""
        off = self.rows != self.cols
        rows, cols = self.rows[off], self.cols[off]
        order = torch.randperm(rows.shape[0], generator=generator).to(rows.device)
        keep = order[int(rate * rows.shape[0]) :]
        loops = torch.arange(self.num_nodes, device=rows.device)
        rows, cols = torch.cat([rows[keep], loops]), torch.cat([cols[keep], loops])
        return propagation_matrix(rows, cols, torch.ones(rows.shape[0], device=rows.device), self.num_nodes, gather)


def propagation_matrix(rows: Tensor, cols: Tensor, values: Tensor, num_nodes: int, gather: str = "in") -> Tensor:
    """``D^-1/2 A^T D^-1/2`` (``gather="in"``) or ``D^-1/2 A D^-1/2`` (``"out"``) as sparse CSR
    ``[target, source]``, where ``A[rows, cols] = values`` and ``D`` holds the row sums of ``A``."""
    if gather not in GATHER:
        raise ValueError(f"gather must be one of {GATHER}, got {gather!r}")
    values = values.to(torch.float32)
    degree = torch.zeros(num_nodes, device=values.device).index_add_(0, rows, values)
    scale = degree.clamp_min(torch.finfo(torch.float32).tiny).rsqrt()
    norm = values * scale[rows] * scale[cols]
    target, source = (cols, rows) if gather == "in" else (rows, cols)
    order = torch.argsort(target * num_nodes + source)
    return torch.sparse_coo_tensor(
        torch.stack([target[order], source[order]]), norm[order], (num_nodes, num_nodes)
    ).coalesce().to_sparse_csr()


def pathsim_topk(counts: Tensor, nei_max: int, ties: str = "torch", seed: int = 0) -> MetaPathGraph:
    """Keep each node's ``nei_max`` neighbours of highest PathSim with their counts (module docstring).

    ``ties`` picks among equal PathSim values when more than ``nei_max`` tie (ACM's PSP: every paper of
    a subject scores 1 against every other, and a subject of 1,841 papers keeps 690): ``torch`` takes
    ``torch.topk``'s choice, ``numpy`` the official code's, ``np.argsort(sim, axis=1)[:, ::-1][:, :k]``
    on the float64 PathSim matrix (numpy's default sort; which nodes it keeps follows numpy's sort
    implementation, so it matches the official code run with the same numpy on the same kind of CPU).
    Both choices follow the node numbering, which on ACM is ordered by class; ``random`` keeps tied
    nodes at random (``torch.topk`` on the columns shuffled by a permutation drawn from ``seed``), a
    graph that no file order can make more label-homogeneous.
    """
    if nei_max < 1:
        raise ValueError(f"nei_max must be >= 1, got {nei_max}")
    if ties not in TIES:
        raise ValueError(f"ties must be one of {TIES}, got {ties!r}")
    dense = counts.to_dense() if counts.is_sparse else counts
    n = dense.shape[0]
    k = min(nei_max, n)
    if ties == "numpy":
        a = dense.double().cpu().numpy()
        d = a.diagonal()
        with np.errstate(divide="ignore", invalid="ignore"):
            sim64 = np.where(a != 0, 2 * a / (d[:, None] + d[None, :]), 0.0)
        cols = torch.from_numpy(np.ascontiguousarray(np.argsort(sim64, axis=1)[:, ::-1][:, :k]))
        values = torch.from_numpy(np.take_along_axis(sim64, cols.numpy(), axis=1))
    else:
        diag = dense.diagonal()
        sim = 2 * dense / (diag[:, None] + diag[None, :]).clamp_min(torch.finfo(dense.dtype).tiny)
        if ties == "random":
            shuffle = torch.randperm(n, generator=torch.Generator().manual_seed(seed)).to(sim.device)
            values, at = sim[:, shuffle].topk(k, dim=1)
            cols = shuffle[at]
        else:
            values, cols = sim.topk(k, dim=1)
    rows = torch.arange(n)[:, None].expand(n, k)
    keep = values > 0
    rows, cols = rows[keep], cols[keep]
    return MetaPathGraph(rows, cols, dense[rows, cols].float(), n)


class _Propagate(torch.autograd.Function):
    """``adj_t @ x`` whose backward uses a given transpose instead of building ``adj_t^T`` anew."""

    @staticmethod
    def forward(ctx, x: Tensor, adj_t: Tensor, transposed: Tensor) -> Tensor:  # type: ignore[override]
        ctx.transposed = transposed
        return torch.sparse.mm(adj_t, x)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None, None]:  # type: ignore[override]
        return torch.sparse.mm(ctx.transposed, grad), None, None


@dataclass(frozen=True)
class Propagator:
    """A normalised sparse CSR ``adj_t [target, source]`` with its transpose, built once.

    ``torch.sparse.mm(adj_t, x)`` backpropagates to ``x`` as ``adj_t^T @ grad``, and autograd builds that
    CSR transpose (a sort of every edge) at each backward: on ACM's PSP graph (2.1M edges) about 0.6 s,
    twice per GCN call (one per layer). For the graphs fixed during training the transpose is built
    here once; the product and the gradient are the same bits as autograd's (same CSR, same kernel;
    ``tests/domains/graph/test_graph_model.py``).
    """

    matrix: Tensor
    transposed: Tensor

    @classmethod
    def of(cls, adj_t: Tensor) -> Propagator:
        return cls(adj_t, adj_t.t().to_sparse_csr())

    @property
    def shape(self) -> torch.Size:
        return self.matrix.shape

    def __call__(self, x: Tensor) -> Tensor:
        if torch.is_grad_enabled() and x.requires_grad:
            return _Propagate.apply(x, self.matrix, self.transposed)
        return torch.sparse.mm(self.matrix, x)


def propagate(adj_t: Tensor | Propagator, x: Tensor) -> Tensor:
    """``adj_t @ x`` for a sparse CSR matrix or a :class:`Propagator`."""
    return adj_t(x) if isinstance(adj_t, Propagator) else torch.sparse.mm(adj_t, x)


def mean_adjacency(adjacencies: list[Tensor]) -> Tensor:
    """MEOW's coarse view graph: the mean of the normalised meta-path graphs (sparse CSR ``adj_t``)."""
    parts = [a.to_sparse_coo() for a in adjacencies]
    total = torch.sparse_coo_tensor(
        torch.cat([p.indices() for p in parts], dim=1), torch.cat([p.values() for p in parts]) / len(parts), parts[0].shape
    )
    return total.coalesce().to_sparse_csr()


def context_chains(data: HeteroData, path: list[str], context: str = "reach") -> list[tuple[str, list[Tensor]]]:
    """For each intermediate position ``k`` of ``path``: its node type and the hops that average features into it.

    ``reach``: one hop, the mean over the nodes that some path reaches (``data.reach_incidence``; MEOW's
    ``nei_*`` files); ``walk``: the ``k`` row-normalised hops, applied in turn (a mean over the paths to position
    k, each node weighted by how many reach it). The two agree for one hop (every context of ACM and IMDB);
    DBLP's APCPA and APTPA differ at their conference/term and second paper positions."""
    edge_types = metapath_edge_types(data, path)
    if context == "reach":
        return [(path[k], [dense_if_full(reach_incidence(data, edge_types[:k]))]) for k in range(1, len(path) - 1)]
    hops = [row_normalized_incidence(data, et) for et in edge_types]
    return [(path[k], hops[:k]) for k in range(1, len(path) - 1)]


DENSE_FROM = 0.05
"""Share of non-zero entries from which a context incidence is kept dense: a dense product is then the faster
one (DBLP's reach incidences, 17 and 23 % full: ours' epoch 3.75-3.83 s of CPU as sparse products, 2.26-2.30 s
dense, one thread; ``contrasuite bench graph --against official --dataset dblp``, docs/domains/graph.md)."""


def dense_if_full(incidence: Tensor) -> Tensor:
    """``incidence`` (sparse COO) as a dense tensor when at least :data:`DENSE_FROM` of it is non-zero."""
    rows, cols = incidence.shape
    return incidence.to_dense() if incidence._nnz() >= DENSE_FROM * rows * cols else incidence


def apply_chain(chain: list[Tensor], features: Tensor) -> Tensor:
    """``R_01 R_12 ... R_(k-1)k features``, multiplied right to left so only ``[N_*, D]`` tensors appear; in
    fp32 under any autocast (autocast would cast the sparse product to bf16, which has no sparse kernel:
    found on an H200, ``addmm_sparse_cuda`` not implemented for BFloat16, and the same on the CPU's CSR)."""
    out = features.float()
    with full_precision(out):
        for hop in reversed(chain):
            out = hop @ out if hop.layout == torch.strided else torch.sparse.mm(hop, out)
    return out
