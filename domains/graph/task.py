"""``GraphTask``: MEOW / AdaMEOW-style heterogeneous graph contrastive learning, full batch.

One batch per epoch holds every target node. The loss is the config's objective terms between the
two views (anchor view ``objective.anchor``: ``coarse`` for MEOW, ``fine`` for AdaMEOW), with the
negative weights chosen by ``negatives.kind``:

* ``none``: the objective as configured (plain InfoNCE, DHEL, WEINCE, ...);
* ``cluster`` (MEOW): ``w_ij`` = number of the K k-means clusterings of the detached fine-view
  projections that separate i and j, re-clustered every step, plus ``proto_weight`` times ProtoNCE
  (PCL) over the same clusterings;
* ``learned`` (AdaMEOW): ``w_ij = sigmoid(MLP(z_i + z_j))`` learned end to end, the positive's own
  weight ``w_ii`` included in the denominator. With one ``infonce`` term and
  ``positive_in_denominator: false`` (AdaMEOW's loss) that is one ``N x N`` log-sum-exp
  (``learned_weight_infonce``); any other terms get ``w_ii`` as one extra weighted negative column.

Evaluation follows :mod:`contrasuite.domains.graph.evaluate`; ``evaluate("val")`` returns only
validation scores (``macro_f1`` first: the mean over the label ratios, what selects the checkpoint),
``evaluate("test")`` the validation-selected test scores and clustering NMI/ARI.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from contrasuite.core.negatives.cluster_weights import ClusterWeights
from contrasuite.core.negatives.learned_weights import LearnedNegativeWeights, learned_weight_infonce
from contrasuite.core.objectives import InfoNCE, ObjectiveSum
from contrasuite.core.similarity import get_similarity
from contrasuite.core.task.config_fields import bounded, one_of
from contrasuite.core.task.config_fields import ObjectiveConfig as BaseObjectiveConfig
from contrasuite.core.task.errors import ConfigValueError, OneProcessOnly
from contrasuite.core.task.optim import OptimConfig, build_optimization, optim_field
from contrasuite.core.task.protocol import SmokeSettings, StepContext, TaskContext
from contrasuite.domains.graph.data import DatasetSpec, load_hetero, metapath_counts
from contrasuite.domains.graph.evaluate import ProbeSettings, clustering_scores, heco_probe
from contrasuite.domains.graph.graphs import (
    CONTEXTS, GATHER, TIES, WEIGHTS, Propagator, context_chains, mean_adjacency, pathsim_topk,
)
from contrasuite.domains.graph.model import LAYER_NORMS, MEOWModel, mask_entries

NEGATIVE_KINDS = ("none", "cluster", "learned")
EVAL_VIEWS = ("all", "plain")


@dataclass
class ModelConfig:
    """Encoder settings; defaults follow MEOW's code (``code_meow/module``), the rest of MEOW's table
    (dropout, masks, PathSim top-k) comes from the run configs."""

    dim: int = bounded(64, gt=0)
    dropout: float = bounded(0.2, ge=0, lt=1)
    feat_mask: float = bounded(0.3, ge=0, lt=1)
    """Fraction of the target's non-zero input feature entries zeroed in the augmented copy."""
    adj_mask: list[float] = field(default_factory=list)
    """Edge-drop rate per meta-path of the augmented copy (empty: none)."""
    nei_max: list[int] = field(default_factory=list)
    """PathSim top-k per meta-path (empty: keep every neighbour)."""
    resample_masks: bool = False
    """Draw the feature and edge masks anew every epoch; MEOW draws them once before training."""
    edge_weights: str = one_of("counts", WEIGHTS)
    """Plain-view graph weights: ``counts`` (path counts, MEOW) or ``binary`` (graphs.py)."""
    pathsim_ties: str = one_of("torch", TIES)
    """Which of the nodes tied on PathSim the top-k keeps: ``torch`` (``torch.topk``), ``numpy`` (the
    official code's ``np.argsort``) or ``random`` (drawn from the run's seed, free of the node order); see
    ``graphs.pathsim_topk``."""
    gather: str = one_of("in", GATHER)
    """``in``: a node gathers from the nodes whose top-k kept it (MEOW's code); ``out``: from its own top-k."""
    context: str = one_of("reach", CONTEXTS)
    """How a meta-path context position averages its nodes' features (``graphs.context_chains``): ``reach``, over
    the set of nodes some path reaches (MEOW's ``nei_*`` files, its code), or ``walk``, hop by hop (each node
    weighted by the paths that reach it; cheaper). The same for one-hop contexts (ACM, IMDB); on DBLP ``reach``
    averages APCPA's and APTPA's second papers through 10.2M- and 13.4M-entry incidences, kept dense
    (``graphs.DENSE_FROM``): an epoch of about 2.3 s of CPU against 1.7 with ``walk`` (one thread)."""
    layer_norm: str = one_of("matrix", LAYER_NORMS)
    """Encoder LayerNorm over the whole output (``matrix``, MEOW's code) or per node (``node``)."""
    eval_views: str = one_of("all", EVAL_VIEWS)
    """Views fused for the evaluated embedding: ``all`` (plain and augmented, as MEOW's saved
    embedding, but without dropout) or ``plain``."""


@dataclass
class NegativesConfig:
    """Where the negative weights come from: ``none``, ``cluster`` (MEOW) or ``learned`` (AdaMEOW)."""

    kind: str = one_of("none", NEGATIVE_KINDS)
    num_clusters: list[int] = field(default_factory=lambda: [100, 300])
    normalize: bool = False
    kmeans_iters: int = bounded(20, ge=1)
    kmeans_restarts: int = bounded(5, ge=1)
    proto_weight: float = 0.0
    """Weight of ProtoNCE over the clusterings (MEOW: 1; 0 turns it off)."""
    proto_temperature: float = 0.4
    """Mean of the rescaled PCL concentrations (MEOW: its tau)."""
    hidden: int = 16
    """Hidden width of the learned weight MLP."""
    chunk_size: int = bounded(0, ge=0)
    """Anchor rows per block of the learned weights (``core/negatives/learned_weights.py``); 0: a
    cache-sized block on the CPU, 256 MiB on a GPU."""
    detach_weight_inputs: bool = False
    """Feed the learned weight MLP detached embeddings: the weights still learn, but no gradient flows
    from them into the encoder (an ablation; AdaMEOW trains both through the weights)."""


@dataclass
class ObjectiveConfig(BaseObjectiveConfig):
    """Loss terms (``contrasuite.core`` objectives) between the views; ``anchor``: ``coarse`` or ``fine``."""

    terms: list[dict[str, Any]] = field(
        default_factory=lambda: [{"name": "infonce", "weight": 1.0, "temperature": 0.5}]
    )
    anchor: str = one_of("coarse", ("coarse", "fine"))


@dataclass
class GraphConfig:
    """The ``config:`` section of a graph run."""

    dataset: DatasetSpec = field(default_factory=DatasetSpec)
    model: ModelConfig = field(default_factory=ModelConfig)
    negatives: NegativesConfig = field(default_factory=NegativesConfig)
    objective: ObjectiveConfig = field(default_factory=ObjectiveConfig)
    optim: OptimConfig = optim_field(name="adam", lr=7e-4)
    """Adam over the parts ``model``, ``objective`` and ``weigher`` (learned negative weights); one step an epoch
    (:mod:`contrasuite.core.task.optim`)."""
    probe: ProbeSettings = field(default_factory=ProbeSettings)
    val_probe_runs: Optional[int] = None
    """Probe runs of ``evaluate("val")`` (None: ``probe.runs``); fewer makes frequent validation cheap."""
    eval_ratios: list[int] = field(default_factory=lambda: [20, 40, 60])


def _check(cfg: GraphConfig, num_metapaths: int) -> None:
    for key in ("adj_mask", "nei_max"):
        values = getattr(cfg.model, key)
        if values and len(values) != num_metapaths:
            raise ConfigValueError(
                f"config.model.{key}: {len(values)} values for {num_metapaths} meta-paths in config.dataset.metapaths"
            )
    target = next(t for t in cfg.dataset.node_types if t.name == cfg.dataset.target)
    if cfg.model.feat_mask > 0 and not target.features:
        raise ConfigValueError(f"config.model.feat_mask masks input features, but target {target.name!r} has no features file")
    missing = [r for r in cfg.eval_ratios if r not in cfg.dataset.splits]
    if missing:
        raise ConfigValueError(f"config.eval_ratios: {missing} not in config.dataset.splits {list(cfg.dataset.splits)}")


def adameow_term(objective: ObjectiveSum) -> tuple[float, InfoNCE] | None:
    """``(weight, term)`` when the objective is AdaMEOW's own: one dense ``infonce`` term with the positive
    out of the denominator (the learned ``w_ii`` puts it back); None otherwise."""
    if len(objective.terms) != 1:
        return None
    term = objective.terms[0]
    if type(term) is InfoNCE and not term.positive_in_denominator and term.tile_size is None:
        return objective.weights[0], term
    return None


class GraphTask:
    """Full-batch heterogeneous graph contrastive learning (module docstring)."""

    config_class = GraphConfig
    smoke = SmokeSettings(full_batch=True, overrides=("config.probe.runs=1", "config.probe.cluster_runs=1",
                                                      "config.val_probe_runs=1", "config.probe.iterations=10"))

    def setup(self, ctx: TaskContext) -> None:
        cfg: GraphConfig = ctx.config
        if ctx.world_size > 1:
            raise OneProcessOnly(f"graph trains full-batch in one process, not {ctx.world_size}: its ranks would train "
                             "unsynchronised copies (run it without torchrun)")
        spec = cfg.dataset
        self.cfg, self.seed, self.device, self.ctx = cfg, ctx.seed, ctx.device, ctx
        _check(cfg, len(spec.metapaths))
        data = load_hetero(spec, ctx.data_root)
        counts = metapath_counts(data, list(spec.metapaths))
        model_cfg = cfg.model
        self.graphs = []
        for i, m in enumerate(spec.metapaths):
            nei_max = model_cfg.nei_max[i] if model_cfg.nei_max else data[spec.target].num_nodes
            graph = pathsim_topk(counts[m.name], nei_max, model_cfg.pathsim_ties, seed=ctx.seed * 1_000_003 + i)
            self.graphs.append(graph.to(self.device))
        self.adjacencies = [g.adjacency(model_cfg.edge_weights, model_cfg.gather) for g in self.graphs]
        self.mean_graph = mean_adjacency(self.adjacencies)
        contexts = [
            [(t, [hop.to(self.device) for hop in chain]) for t, chain in context_chains(data, list(m.path), model_cfg.context)]
            for m in spec.metapaths
        ]
        self.features = {t: data[t].get("x") for t in data.node_types}
        self.features = {t: None if x is None else x.to(self.device) for t, x in self.features.items()}
        self.data = data
        self.augment = model_cfg.feat_mask > 0 or any(model_cfg.adj_mask)
        self.fixed_masks = self.masks(torch.Generator().manual_seed(ctx.seed)) if self.augment else None
        # the graphs fixed for the whole training, with the transposes their backward needs built once
        # (graphs.Propagator: autograd would rebuild each one twice per step)
        self.plain_graphs = [Propagator.of(a) for a in self.adjacencies]
        self.coarse_graph = Propagator.of(self.mean_graph)
        if self.fixed_masks is not None:
            self.fixed_masks = (self.fixed_masks[0], [Propagator.of(a) for a in self.fixed_masks[1]])
        torch.manual_seed(ctx.seed)
        self.model = MEOWModel(
            {t: None if x is None else x.shape[1] for t, x in self.features.items()},
            {t: data[t].num_nodes for t in data.node_types},
            spec.target,
            contexts,
            model_cfg.dim,
            model_cfg.dropout,
            model_cfg.layer_norm,
        ).to(self.device)
        self.objective = ObjectiveSum(list(cfg.objective.terms))
        self.weigher: LearnedNegativeWeights | None = None
        self.clusterer: ClusterWeights | None = None
        neg = cfg.negatives
        if neg.kind == "learned":
            self.weigher = LearnedNegativeWeights(cfg.model.dim, neg.hidden, neg.chunk_size).to(self.device)
        elif neg.kind == "cluster":
            self.clusterer = ClusterWeights(
                neg.num_clusters, n_iter=neg.kmeans_iters, n_init=neg.kmeans_restarts, normalize=neg.normalize
            )
            self.proto = InfoNCE(temperature=1.0, similarity="dot")
        parts = [(name, module.parameters()) for name, module in self.modules().items()]
        self.optimization = build_optimization(cfg.optim, {"model": parts}, steps_per_epoch=1)

    def modules(self) -> Mapping[str, nn.Module]:
        out: dict[str, nn.Module] = {"model": self.model, "objective": self.objective}
        if self.weigher is not None:
            out["weigher"] = self.weigher
        return out

    def optimizers(self) -> Mapping[str, torch.optim.Optimizer]:
        return self.optimization.optimizers

    def schedulers(self) -> Mapping[str, Any]:
        return self.optimization.schedulers

    def batches(self, epoch: int) -> Iterable[int]:
        return [epoch]

    def masks(self, generator: torch.Generator) -> tuple[Tensor | None, list[Tensor]]:
        """The augmented copy's inputs: masked target features (None without feature masking) and the
        edge-dropped graph of each meta-path."""
        model_cfg = self.cfg.model
        x = self.features[self.cfg.dataset.target]
        masked = mask_entries(x, model_cfg.feat_mask, generator) if model_cfg.feat_mask > 0 else None
        rates = list(model_cfg.adj_mask) or [0.0] * len(self.graphs)
        return masked, [g.dropped(rate, generator, model_cfg.gather) for g, rate in zip(self.graphs, rates)]

    def fine(self, h: dict[str, Tensor], masks: tuple[Tensor | None, list[Tensor | Propagator]] | None) -> Tensor:
        """The fused fine-grained embedding, with the augmented copy when ``masks`` are given."""
        augmented = None
        if masks is not None:
            masked_x, masked_adjacencies = masks
            target = self.cfg.dataset.target
            x = self.features[target] if masked_x is None else masked_x
            augmented = (self.model.project.one(target, x), masked_adjacencies)
        return self.model.fine(h, self.plain_graphs, augmented)

    def views(self, epoch: int) -> tuple[Tensor, Tensor]:
        """Projected ``(coarse, fine)`` embeddings of every target node; with ``resample_masks`` the
        augmentation is drawn from a generator seeded by the epoch, else the masks drawn at setup."""
        masks = self.fixed_masks
        if self.augment and self.cfg.model.resample_masks:
            masks = self.masks(torch.Generator().manual_seed(self.seed * 1_000_003 + epoch))
        h = self.model.project(self.features)
        z_c = self.model.coarse(h, self.coarse_graph)
        z_f = self.fine(h, masks)
        return self.model.project_head(z_c), self.model.project_head(z_f)

    def loss_terms(self, coarse: Tensor, fine: Tensor, epoch: int) -> tuple[dict[str, Tensor], dict[str, float]]:
        """The contrastive loss (and ProtoNCE under ``cluster``) for one step, and what to log besides:
        under ``learned`` negatives the mean pair weight (shrinking every weight lowers the loss)."""
        anchors, candidates = (coarse, fine) if self.cfg.objective.anchor == "coarse" else (fine, coarse)
        if self.clusterer is not None:
            neg = self.cfg.negatives
            clusterings = self.clusterer.cluster(fine.detach(), seed=self.seed * 1_000_003 + epoch)
            terms = {"contrastive": self.objective(anchors, candidates, neg_weight=self.clusterer.weights(clusterings))}
            if neg.proto_weight > 0:
                phis = self.clusterer.concentrations(fine.detach(), clusterings, neg.proto_temperature)
                proto = [
                    self.proto(coarse, c.centroids / phi[:, None], pos_mask=F.one_hot(c.assignments, len(phi)).bool())
                    for c, phi in zip(clusterings, phis)
                ]
                terms["proto"] = neg.proto_weight * torch.stack(proto).mean()
            return terms, {}
        if self.weigher is not None:
            if self.cfg.negatives.detach_weight_inputs:
                weight = self.weigher(anchors.detach(), candidates.detach())
            else:
                weight = self.weigher(anchors, candidates)
            single = adameow_term(self.objective)
            if single is not None:
                scale, term = single
                logits = get_similarity(term.similarity)(anchors, candidates, scale=1.0 / term.temperature)
                loss = scale * learned_weight_infonce(logits, weight).mean()
                return {"contrastive": loss}, {"neg_weight_mean": float(weight.detach().mean())}
            eye = torch.eye(weight.shape[0], device=weight.device, dtype=torch.bool)
            zero = torch.zeros_like(weight)
            extended = torch.cat([candidates, candidates])
            pos_mask = torch.cat([eye, torch.zeros_like(eye)], dim=1)
            neg_weight = torch.cat([torch.where(eye, zero, weight), torch.where(eye, weight, zero)], dim=1)
            loss = self.objective(anchors, extended, pos_mask=pos_mask, neg_weight=neg_weight)
            return {"contrastive": loss}, {"neg_weight_mean": float(weight.detach().mean())}
        return {"contrastive": self.objective(anchors, candidates)}, {}

    def train_step(self, batch: int, step: StepContext) -> Mapping[str, float]:
        self.model.train()
        # fp32 whatever run.precision says: the sparse CSR products have no bf16 CPU kernels, and the
        # model is small (the papers train in fp32 too).
        coarse, fine = self.views(batch)
        terms, logs = self.loss_terms(coarse, fine, batch)
        loss = sum(terms.values())
        step.optimize("model", loss, terms=terms)
        return {"loss": float(loss.detach()), **{k: float(v.detach()) for k, v in terms.items()}, **logs}

    def embed_for_health(self, batch: int) -> tuple[Tensor, Tensor]:
        with torch.no_grad():
            coarse, fine = self.views(batch)
        return coarse, fine

    @torch.no_grad()
    def embeddings(self) -> Tensor:
        """The fused fine-grained embedding before projection, dropout off; the augmented views (masks
        drawn at setup) fused in as well under ``eval_views: all``."""
        self.model.eval()
        h = self.model.project(self.features)
        masks = self.fixed_masks if self.cfg.model.eval_views == "all" else None
        return self.fine(h, masks).float().cpu()

    def evaluate(self, split: str = "val") -> Mapping[str, float]:
        if split not in ("val", "test"):
            raise ValueError(f"split must be 'val' or 'test', got {split!r}")
        emb = self.embeddings()
        target = self.data[self.cfg.dataset.target]
        probe = self.cfg.probe
        if split == "val" and self.cfg.val_probe_runs is not None:
            probe = ProbeSettings(probe.lr, probe.weight_decay, probe.iterations, self.cfg.val_probe_runs, probe.cluster_runs)
        out: dict[str, float] = {}
        per_ratio = {}
        for r in self.ctx.progress(self.cfg.eval_ratios, f"{split} probes ({probe.runs} runs per label ratio)",
                                   total=len(self.cfg.eval_ratios)):
            per_ratio[r] = heco_probe(
                emb, target.y, target[f"train_{r}"], target[f"val_{r}"], target[f"test_{r}"], probe, seed=self.seed
            )
        if split == "val":
            out["macro_f1"] = sum(m["val_macro_f1"] for m in per_ratio.values()) / len(per_ratio)
            for r, m in per_ratio.items():
                out[f"macro_f1_{r}"] = m["val_macro_f1"]
                out[f"micro_f1_{r}"] = m["val_micro_f1"]
            return out
        out["macro_f1"] = sum(m["macro_f1"] for m in per_ratio.values()) / len(per_ratio)
        for r, m in per_ratio.items():
            for key in ("macro_f1", "macro_f1_std", "micro_f1", "micro_f1_std", "auc", "auc_std"):
                out[f"{key}_{r}"] = m[key]
        out.update(clustering_scores(emb, target.y, probe.cluster_runs))
        return out
