"""MEOW's two views of the target nodes (Yu & Li, SDM 2023; Yu et al., TKDE 2024), as in
``code_meow/module/meow.py`` and ``encoder.py``.

* Type projection: a linear layer per node type, dropout, ELU. Types without features get one-hot
  inputs: a learned row per node plus a bias, initialised as ``nn.Linear(count, dim)``.
* Coarse view: the targets' own projections through a shared two-layer GCN over the mean of the
  normalised meta-path graphs (which nodes some meta-path connects).
* Fine-grained view: for each meta-path m, ``elu(h_target + sum_k dropout(W_mk C_mk))`` with ``C_mk``
  the meta-path contexts, then the shared GCN on graph m; an augmented copy uses the projection of
  the masked target features and the edge-dropped graph. The 2M (or M, without augmentation)
  L2-normalised embeddings are fused by semantic attention (Wang et al., HAN, WWW 2019) whose query
  vector gets dropout in training.
* A shared projection head (linear, tanh, L2 normalisation) for the contrastive loss. Downstream
  tasks use the fused fine-grained embedding before projection.

The GCN layers are bias-free torch_geometric ``GCNConv`` layers over precomputed normalised sparse
CSR adjacencies, with dropout between the linear map and the propagation as in MEOW's ``GraphConv``.
Linear layers keep PyTorch's default initialisation, as MEOW's code does (only the attention is
Xavier-initialised there).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import GCNConv

from contrasuite.core.numerics import full_precision
from contrasuite.domains.graph.graphs import Propagator, apply_chain, propagate

LAYER_NORMS = ("matrix", "node")


def mask_entries(x: Tensor, rate: float, generator: torch.Generator) -> Tensor:
    """``x`` with ``floor(rate * nnz)`` of its non-zero entries, drawn at random, set to 0 (MEOW's ``mask_feature``)."""
    rows, cols = x.nonzero(as_tuple=True)
    order = torch.randperm(rows.shape[0], generator=generator).to(x.device)[: int(rate * rows.shape[0])]
    out = x.clone()
    out[rows[order], cols[order]] = 0
    return out


class OneHotLinear(nn.Module):
    """``nn.Linear(count, dim)`` applied to the ``count x count`` identity, without building it."""

    def __init__(self, count: int, dim: int) -> None:
        super().__init__()
        linear = nn.Linear(count, dim)
        self.weight = nn.Parameter(linear.weight.detach().T.contiguous())
        self.bias = nn.Parameter(linear.bias.detach().clone())

    def forward(self, x: None = None) -> Tensor:
        return self.weight + self.bias


class TypeProjection(nn.Module):
    """Per node type: ``elu(dropout(Linear(x)))`` (one-hot inputs for a type without features)."""

    def __init__(self, feature_dims: dict[str, int | None], counts: dict[str, int], dim: int, dropout: float) -> None:
        super().__init__()
        self.maps = nn.ModuleDict()
        for name, in_dim in feature_dims.items():
            self.maps[name] = nn.Linear(in_dim, dim) if in_dim else OneHotLinear(counts[name], dim)
        self.dropout = nn.Dropout(dropout)

    def one(self, name: str, x: Tensor | None) -> Tensor:
        """The projection of node type ``name`` (each call draws its own dropout)."""
        return F.elu(self.dropout(self.maps[name](x)))

    def forward(self, features: dict[str, Tensor | None]) -> dict[str, Tensor]:
        return {name: self.one(name, features[name]) for name in self.maps}


class GCNEncoder(nn.Module):
    """Two bias-free ``GCNConv`` layers, each ``propagate(dropout(x W))``, PReLU after the first, then
    a non-affine LayerNorm over the whole ``[N, D]`` output (``"matrix"``, MEOW's ``nn.LayerNorm(Z.size())``)
    or over each node's ``D`` values (``"node"``)."""

    def __init__(self, dim: int, dropout: float = 0.2, layer_norm: str = "matrix") -> None:
        super().__init__()
        if layer_norm not in LAYER_NORMS:
            raise ValueError(f"layer_norm must be one of {LAYER_NORMS}, got {layer_norm!r}")
        self.convs = nn.ModuleList(GCNConv(dim, dim, normalize=False, bias=False) for _ in range(2))
        for conv in self.convs:  # MEOW's GraphConv: uniform(-1/sqrt(out), 1/sqrt(out))
            nn.init.uniform_(conv.lin.weight, -(dim**-0.5), dim**-0.5)
        self.act = nn.PReLU()
        self.dropout = nn.Dropout(dropout)
        self.layer_norm = layer_norm

    def forward(self, x: Tensor, adj_t: Tensor | Propagator) -> Tensor:
        """``x [N, D]`` over the normalised sparse ``adj_t [target, source]`` (or its :class:`Propagator`), in
        fp32 under any autocast (sparse CSR products have no bf16/fp16 kernels on every device)."""
        if not isinstance(adj_t, Propagator) and torch.is_grad_enabled():
            adj_t = Propagator.of(adj_t)  # one transpose for both layers' backward (graphs.Propagator)
        with full_precision(x):
            first, second = self.convs
            # GCNConv.propagate over a sparse CSR adj_t is torch.sparse.mm(adj_t, x); graphs.propagate is the
            # same product with the transpose of a fixed graph built once for the backward
            h = self.act(propagate(adj_t, self.dropout(first.lin(x.float()))))
            z = propagate(adj_t, self.dropout(second.lin(h)))
            return F.layer_norm(z, tuple(z.shape) if self.layer_norm == "matrix" else z.shape[-1:])


class SemanticAttention(nn.Module):
    """``beta = softmax_v( dropout(q) . mean_i tanh(W z_i^v + b) )``, output ``sum_v beta_v z^v``."""

    def __init__(self, dim: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.fc = nn.Linear(dim, dim)
        self.query = nn.Parameter(torch.empty(1, dim))
        nn.init.xavier_normal_(self.fc.weight, gain=1.414)
        nn.init.xavier_normal_(self.query, gain=1.414)
        self.dropout = nn.Dropout(dropout)

    def forward(self, views: list[Tensor]) -> Tensor:
        query = self.dropout(self.query)[0]
        scores = torch.stack([(torch.tanh(self.fc(v)).mean(0) * query).sum() for v in views])
        beta = torch.softmax(scores, dim=0)
        return sum(b * v for b, v in zip(beta, views))


class MEOWModel(nn.Module):
    """Both views and the projection head; see the module docstring.

    Args:
        feature_dims: input feature width per node type (None: one-hot inputs).
        counts: number of nodes per node type.
        target: the target node type.
        contexts: per meta-path, a list of (node type, row-normalised hop chain) per context position.
        dim: embedding width (MEOW: 64).
        dropout: dropout of the type projections, context terms, GCN layers and attention query.
        layer_norm: ``"matrix"`` or ``"node"`` (:class:`GCNEncoder`).
    """

    def __init__(
        self,
        feature_dims: dict[str, int | None],
        counts: dict[str, int],
        target: str,
        contexts: list[list[tuple[str, list[Tensor]]]],
        dim: int = 64,
        dropout: float = 0.2,
        layer_norm: str = "matrix",
    ) -> None:
        super().__init__()
        self.target = target
        self.contexts = contexts
        self.project = TypeProjection(feature_dims, counts, dim, dropout)
        self.context_maps = nn.ModuleList(
            nn.ModuleList(nn.Linear(dim, dim, bias=False) for _ in positions) for positions in contexts
        )
        self.dropout = nn.Dropout(dropout)
        self.encoder = GCNEncoder(dim, dropout, layer_norm)
        self.attention = SemanticAttention(dim, dropout)
        self.head = nn.Linear(dim, dim)

    def project_head(self, z: Tensor) -> Tensor:
        """``normalize(tanh(W z + b))``."""
        return F.normalize(torch.tanh(self.head(z)), dim=1)

    def context_terms(self, h: dict[str, Tensor]) -> list[list[Tensor]]:
        """``W_mk C_mk`` for each meta-path m and context position k."""
        return [
            [linear(apply_chain(chain, h[node_type])) for (node_type, chain), linear in zip(positions, maps)]
            for positions, maps in zip(self.contexts, self.context_maps)
        ]

    def enriched(self, h_target: Tensor, terms: list[list[Tensor]]) -> list[Tensor]:
        """``elu(h_target + sum_k dropout(W_mk C_mk))`` per meta-path (fresh dropout on each call)."""
        out = []
        for per_path in terms:
            total = h_target
            for term in per_path:
                total = total + self.dropout(term)
            out.append(F.elu(total))
        return out

    def fine(
        self,
        h: dict[str, Tensor],
        adjacencies: list[Tensor | Propagator],
        augmented: tuple[Tensor, list[Tensor | Propagator]] | None = None,
    ) -> Tensor:
        """The fused fine-grained embedding over the plain graphs, and with ``augmented = (projection of the
        masked target features, augmented graphs)`` also over the augmented copy of each meta-path."""
        terms = self.context_terms(h)
        views = [F.normalize(self.encoder(x, a), dim=1) for x, a in zip(self.enriched(h[self.target], terms), adjacencies)]
        if augmented is not None:
            h_masked, masked_adjacencies = augmented
            copies = self.enriched(h_masked, terms)
            views = [
                v
                for plain, x, a in zip(views, copies, masked_adjacencies)
                for v in (plain, F.normalize(self.encoder(x, a), dim=1))
            ]
        return self.attention(views)

    def coarse(self, h: dict[str, Tensor], mean_graph: Tensor | Propagator) -> Tensor:
        """The coarse-view embedding of the targets' own projections over the mean meta-path graph."""
        return self.encoder(h[self.target], mean_graph)
