"""MEOW's two views of the target nodes (Yu & Li, SDM 2023; Yu et al., TKDE 2024).

* Type projection: a linear layer per node type with features (a learned embedding per node for
  types without), ELU, dropout.
* Coarse view: the targets' own projections through a shared two-layer GCN over the mean of the
  normalised meta-path graphs (which nodes some meta-path connects).
* Fine-grained view: for each meta-path m, the target projection plus a bias-free linear map of each
  meta-path context position, ELU, then the shared GCN on graph m; during training also an
  augmented copy with feature masking and edge dropping. All 2M (M at evaluation) L2-normalised
  embeddings are fused by semantic attention (Wang et al., HAN, WWW 2019).
* A shared projection head (linear, tanh, L2 normalisation) for the contrastive loss. Downstream
  tasks use the fused fine-grained embedding before projection.

The GCN layers are torch_geometric ``GCNConv`` multiplying precomputed normalised sparse CSR adjacencies.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import GCNConv

from contrasuite.domains.graph.graphs import MetaPathGraph, apply_chain


class TypeProjection(nn.Module):
    """Per node type: ``dropout(elu(Linear(x)))``, or a learned embedding when the type has no features."""

    def __init__(self, feature_dims: dict[str, int | None], counts: dict[str, int], dim: int, dropout: float) -> None:
        super().__init__()
        self.maps = nn.ModuleDict()
        for name, in_dim in feature_dims.items():
            self.maps[name] = nn.Linear(in_dim, dim) if in_dim else nn.Embedding(counts[name], dim)
        for m in self.maps.values():
            nn.init.xavier_normal_(m.weight, gain=1.414)
        self.dropout = nn.Dropout(dropout)

    def forward(self, features: dict[str, Tensor | None]) -> dict[str, Tensor]:
        out = {}
        for name, layer in self.maps.items():
            h = layer(features[name]) if isinstance(layer, nn.Linear) else layer.weight
            out[name] = self.dropout(F.elu(h))
        return out


class GCNEncoder(nn.Module):
    """Two ``GCNConv`` layers (PReLU after the first), then a non-affine LayerNorm."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.conv1 = GCNConv(dim, dim, normalize=False)
        self.conv2 = GCNConv(dim, dim, normalize=False)
        self.act = nn.PReLU()
        self.norm = nn.LayerNorm(dim, elementwise_affine=False)

    def forward(self, x: Tensor, adj_t: Tensor) -> Tensor:
        """``x [N, D]`` over the normalised sparse ``adj_t [target, source]``, in fp32 under any autocast
        (sparse CSR products have no bf16/fp16 kernels on every device)."""
        with torch.autocast(device_type=x.device.type, enabled=False):
            h = self.act(self.conv1(x.float(), adj_t))
            return self.norm(self.conv2(h, adj_t))


class SemanticAttention(nn.Module):
    """``beta = softmax_v( q . mean_i tanh(W z_i^v + b) )``, output ``sum_v beta_v z^v``."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.fc = nn.Linear(dim, dim)
        self.query = nn.Parameter(torch.empty(1, dim))
        nn.init.xavier_normal_(self.fc.weight, gain=1.414)
        nn.init.xavier_normal_(self.query, gain=1.414)

    def forward(self, views: list[Tensor]) -> Tensor:
        scores = torch.stack([(torch.tanh(self.fc(v)).mean(0) * self.query[0]).sum() for v in views])
        beta = torch.softmax(scores, dim=0)
        return sum(b * v for b, v in zip(beta, views))


class MEOWModel(nn.Module):
    """Both views and the projection head; see the module docstring.

    Args:
        feature_dims: input feature width per node type (None: learned embedding).
        counts: number of nodes per node type.
        target: the target node type.
        contexts: per meta-path, a list of (node type, row-normalised hop chain) per context position.
        dim: embedding width (MEOW: 64).
        dropout: dropout after the type projections.
    """

    def __init__(
        self,
        feature_dims: dict[str, int | None],
        counts: dict[str, int],
        target: str,
        contexts: list[list[tuple[str, list[Tensor]]]],
        dim: int = 64,
        dropout: float = 0.2,
    ) -> None:
        super().__init__()
        self.target = target
        self.contexts = contexts
        self.project = TypeProjection(feature_dims, counts, dim, dropout)
        self.context_maps = nn.ModuleList(
            nn.ModuleList(nn.Linear(dim, dim, bias=False) for _ in positions) for positions in contexts
        )
        for maps in self.context_maps:
            for m in maps:
                nn.init.xavier_normal_(m.weight, gain=1.414)
        self.encoder = GCNEncoder(dim)
        self.attention = SemanticAttention(dim)
        self.head = nn.Linear(dim, dim)

    def project_head(self, z: Tensor) -> Tensor:
        """``normalize(tanh(W z + b))``."""
        return F.normalize(torch.tanh(self.head(z)), dim=1)

    def enriched(self, h: dict[str, Tensor]) -> list[Tensor]:
        """Target features enriched with each meta-path's contexts: ``elu(h_t + sum_k W_mk C_mk)``."""
        out = []
        for positions, maps in zip(self.contexts, self.context_maps):
            total = h[self.target]
            for (node_type, chain), linear in zip(positions, maps):
                total = total + linear(apply_chain(chain, h[node_type].float()))
            out.append(F.elu(total))
        return out

    def fine(
        self,
        h: dict[str, Tensor],
        graphs: list[MetaPathGraph],
        feat_mask: float = 0.0,
        adj_mask: list[float] | None = None,
        generator: torch.Generator | None = None,
    ) -> Tensor:
        """The fused fine-grained embedding; with masking, each meta-path also gets an augmented copy."""
        views = []
        augment = self.training and (feat_mask > 0 or any(adj_mask or []))
        for m, (x, graph) in enumerate(zip(self.enriched(h), graphs)):
            views.append(F.normalize(self.encoder(x, graph.normalized()), dim=1))
            if augment:
                keep = (torch.rand(x.shape[1], generator=generator) >= feat_mask).to(x)
                drop = adj_mask[m] if adj_mask else 0.0
                views.append(F.normalize(self.encoder(x * keep, graph.normalized(drop, generator)), dim=1))
        return self.attention(views)

    def coarse(self, h: dict[str, Tensor], mean_graph: Tensor) -> Tensor:
        """The coarse-view embedding of the targets' own projections over the mean meta-path graph."""
        return self.encoder(h[self.target], mean_graph)

