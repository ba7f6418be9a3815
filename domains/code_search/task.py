"""Code search: a bi-encoder trained on mined (docstring, code) pairs with any core objective.

A step takes ``batch_size`` training pairs, embeds queries and code with one shared encoder, and
applies the configured terms with query ``i`` as anchor, all codes of the (global) batch as
candidates and code ``i`` as the positive (in-batch negatives). A term that accepts ``prior``
(Soft-InfoNCE) receives ``sim [n, B]`` from ``config.prior`` (BM25 between queries, a SimCSE query
encoder, or a frozen InfoNCE-trained model; :mod:`contrasuite.domains.code_search.priors`).

``config.negatives`` adds negatives from a source registered in :mod:`contrasuite.core.negatives.sources`
(:mod:`contrasuite.core.negatives.paired`): ``queue`` keeps the code embeddings of past steps as extra
candidates of every query (a cross-batch memory; ``in_batch: false`` leaves them the only negatives),
``mochi`` mixes each query's hardest queued codes, ``topk`` keeps each query's ``k`` hardest in-batch codes.

``grad_cache_chunk > 0`` runs the step with GradCache (the full-batch gradient, the activation memory
of one chunk of pairs). ``evaluate("val")`` ranks the mined validation queries against all validation
code (``mrr`` selects ``best.pt``); ``evaluate("test")`` does the same on the mined test split and, if
``eval.cosqa``, on CoSQA (``eval.cosqa_*`` name its files). CoSQA is never used for selection.
Each embedding stage is a progress bar (``ctx.progress``: ``run.progress``) and is cached on disk (``eval.cache``).
The data is ``config.data.folder``, else the named set ``config.data.mined``, mined at setup on first use
(:mod:`contrasuite.domains.code_search.mined_sets`; a bar of files through ``ctx.progress``).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import torch
from torch import Tensor

from contrasuite.core.distributed import distributed_objective
from contrasuite.core.negatives.paired import PairedNegatives, paired_negatives
from contrasuite.core.objectives import ObjectiveSum
from contrasuite.core.objectives.base import ContrastiveObjective
from contrasuite.core.task.config_fields import ObjectiveConfig, bounded, objective_field, one_of
from contrasuite.core.task.errors import ConfigValueError
from contrasuite.core.task.optim import OptimConfig, build_optimization, optim_field
from contrasuite.core.task.protocol import SmokeSettings, StepContext, TaskContext
from contrasuite.core.task.seeding import derived_seed
from contrasuite.domains.archives import cache_root
from contrasuite.domains.code_search.data import (
    COSQA_CORPUS, COSQA_FOLDER, COSQA_QUERIES, PairSet, load_cosqa, load_split,
)
from contrasuite.domains.code_search.embedding_cache import EmbeddingCache
from contrasuite.domains.code_search.encoder import BiEncoder, EncoderConfig
from contrasuite.domains.code_search.evaluate import Embedder, evaluate_pairs
from contrasuite.domains.code_search.mined_sets import MINED_SETS, ensure_mined
from contrasuite.domains.code_search.priors import build_prior


@dataclass
class DataConfig:
    """``config.data``: the mined dataset (a named set or a folder) and optional seeded subsets (reduced protocols)."""

    mined: str = one_of("full", MINED_SETS)
    """A named set (``contrasuite code-search mine --name NAME``), read from ``<cache root>/code_search/mined/NAME``
    and mined there on first use when absent (``mined_sets``); unused when ``folder`` is set."""
    folder: str = ""
    """A mined dataset folder (``contrasuite code-search mine --out DIR``) instead of the named set, never mined
    automatically; a relative path not found as given is looked up under the data root."""
    train_limit: int = bounded(0, ge=0)
    val_limit: int = bounded(0, ge=0)
    test_limit: int = bounded(0, ge=0)
    subset_seed: int = 0
    """Seed of the subsets (fixed across training seeds)."""


@dataclass
class EvalConfig:
    """``config.eval``: batch and code length at evaluation, CoSQA's files, progress and the embedding cache."""

    batch_size: int = bounded(64, gt=0)
    max_code_length: int = bounded(0, ge=0)
    """Token limit of code at evaluation (0: ``encoder.max_code_length``)."""
    cosqa: bool = True
    """Also report CoSQA in ``evaluate("test")`` (false skips it; the default files are skipped with a message when absent)."""
    cosqa_folder: str = COSQA_FOLDER
    """CoSQA's folder; a relative path not found as given is looked up under the data root."""
    cosqa_queries: str = COSQA_QUERIES
    """The query file in ``cosqa_folder`` (``cosqa-retrieval-test-500.json`` for CoCLR's test split)."""
    cosqa_corpus: str = COSQA_CORPUS
    """The corpus file in ``cosqa_folder`` (a JSON object code -> index)."""
    cache: bool = True
    """Cache query and corpus embeddings on disk (``embedding_cache``), keyed by model, weights, lengths and texts."""
    cache_dir: str = ""
    """Cache root (empty: ``$CONTRASUITE_CACHE``, else ``~/.cache/contrasuite``); files go to ``<root>/code_search/embeddings``."""
    cache_max_mb: int = bounded(1024, ge=0)
    """Size cap of the embedding cache folder; the least recently used files go first (0: no cap)."""


@dataclass
class CodeSearchConfig:
    """The ``config:`` section of a ``code_search`` run."""

    batch_size: int = bounded(32, gt=0)
    """Global batch of pairs (split evenly over ranks)."""
    grad_cache_chunk: int = bounded(0, ge=0)
    """Pairs per GradCache chunk on each rank (0: plain step)."""
    data: DataConfig = field(default_factory=DataConfig)
    encoder: EncoderConfig = field(default_factory=EncoderConfig)
    objective: ObjectiveConfig = objective_field({"name": "infonce", "weight": 1.0, "temperature": 0.05})
    prior: dict[str, Any] = field(default_factory=lambda: {"name": "none"})
    """``{name: none|bm25|simcse|model, ...}``; see ``priors.build_prior``."""
    negatives: dict[str, Any] = field(default_factory=dict)
    """Extra negatives of each query ``{name: queue|mochi|topk|<registered>, in_batch: ..., ...}``
    (:mod:`contrasuite.core.negatives.paired`; the queue holds past steps' code embeddings); empty: in-batch only."""
    optim: OptimConfig = optim_field(name="adamw", lr=2e-5, weight_decay=0.01)
    """AdamW over the one part ``encoder`` (:mod:`contrasuite.core.task.optim`)."""
    eval: EvalConfig = field(default_factory=EvalConfig)


def _resolve_folder(folder: str, data_root: Path) -> Path:
    path = Path(folder).expanduser()
    if path.is_absolute() or path.exists():
        return path
    return data_root / path


class CodeSearchTask:
    """The ``code_search`` task (module docstring)."""

    config_class = CodeSearchConfig
    smoke = SmokeSettings(
        8,
        ("config.data.folder=", "config.data.mined=smoke", "config.data.train_limit=64", "config.data.val_limit=32",
         "config.data.test_limit=32", "config.grad_cache_chunk=0", "config.eval.cosqa=false", "config.eval.batch_size=32"),
        live_batch=lambda cfg: cfg.grad_cache_chunk or cfg.batch_size,
    )

    def setup(self, ctx: TaskContext) -> None:
        cfg: CodeSearchConfig = ctx.config
        if cfg.batch_size % ctx.world_size:
            raise ConfigValueError(f"config.batch_size={cfg.batch_size} must be divisible by the world size {ctx.world_size}")
        self.ctx, self.cfg = ctx, cfg
        self.local_batch = cfg.batch_size // ctx.world_size
        folder = self._data_folder()
        d = cfg.data
        self.train = load_split(folder, "train", d.train_limit, d.subset_seed)
        self.splits: dict[str, PairSet] = {"val": load_split(folder, "val", d.val_limit, d.subset_seed)}
        self._folder = folder
        self._cosqa = _resolve_folder(cfg.eval.cosqa_folder, ctx.data_root)
        named = (cfg.eval.cosqa_folder, cfg.eval.cosqa_queries, cfg.eval.cosqa_corpus) != (COSQA_FOLDER, COSQA_QUERIES, COSQA_CORPUS)
        if cfg.eval.cosqa and named:
            self.splits["cosqa"] = load_cosqa(self._cosqa, cfg.eval.cosqa_queries, cfg.eval.cosqa_corpus)
        if len(self.train.queries) < cfg.batch_size:
            raise ConfigValueError(f"config.batch_size={cfg.batch_size} exceeds the {len(self.train.queries)} training pairs")
        self.encoder = BiEncoder(cfg.encoder).to(ctx.device)
        self.net = ctx.wrap(self.encoder)
        self.objective = ObjectiveSum(cfg.objective.terms).to(ctx.device)
        self.prior = build_prior(cfg.prior, self.train.queries, self.train.code, cfg.encoder,
                                 cache_dir=ctx.run_dir / "prior_cache", device=ctx.device, seed=ctx.seed,
                                 log=lambda m: print(m) if ctx.rank == 0 else None)
        if self.prior is not None and not self.objective.takes_prior:
            raise ConfigValueError(f"config.prior.name={cfg.prior.get('name')!r} but no objective term takes a prior "
                             f"(terms: {[t.get('name') for t in cfg.objective.terms]}); use soft_infonce")
        self.negatives = self._negatives()
        self.optimization = build_optimization(cfg.optim, {"encoder": [("encoder", self.encoder.parameters())]},
                                               self.steps_per_epoch)

    def _negatives(self) -> PairedNegatives | None:
        """``config.negatives`` as a source over the code embeddings, checked against the prior and the encoder."""
        negatives = paired_negatives(self.cfg.negatives, self.encoder.dim)
        if negatives is None:
            return None
        if self.prior is not None:
            raise ConfigValueError(f"config.negatives ({self.cfg.negatives.get('name')}) with config.prior "
                                   f"({self.cfg.prior.get('name')}): the prior scores the batch's code only; use one of them")
        if negatives.extrapolates:
            raise ConfigValueError("config.negatives: Feature Transformation's positive extrapolation needs detached keys "
                                   "(a momentum encoder), which code_search has not: set config.negatives.extrapolate=false")
        return negatives.to(self.ctx.device)

    def _data_folder(self) -> Path:
        """``config.data.folder`` when set, else the named set ``config.data.mined`` (mined now if missing, with progress)."""
        d, ctx = self.cfg.data, self.ctx
        if d.folder:
            return _resolve_folder(d.folder, ctx.data_root)
        return ensure_mined(d.mined, log=lambda m: print(m) if ctx.rank == 0 else None, progress=ctx.progress,
                            rank=ctx.rank)

    def modules(self) -> Mapping[str, torch.nn.Module]:
        if self.negatives is None:
            return {"encoder": self.encoder}
        return {"encoder": self.encoder, "negatives": self.negatives.module}

    def optimizers(self) -> Mapping[str, torch.optim.Optimizer]:
        return self.optimization.optimizers

    def schedulers(self) -> Mapping[str, Any]:
        return self.optimization.schedulers

    @property
    def steps_per_epoch(self) -> int:
        """Full global batches in the training pairs (the last partial one is dropped)."""
        return len(self.train.queries) // self.cfg.batch_size

    def batches(self, epoch: int) -> Iterator[Tensor]:
        """Global index batches of a seeded permutation (drop last); each rank slices its own part."""
        gen = torch.Generator().manual_seed(self.ctx.seed * 1_000_003 + epoch)
        order = torch.randperm(len(self.train.queries), generator=gen)
        b = self.cfg.batch_size
        for start in range(0, len(order) - b + 1, b):
            yield order[start : start + b]

    def _local(self, batch: Tensor) -> Tensor:
        r, n = self.ctx.rank, self.local_batch
        return batch[r * n : (r + 1) * n]

    def pair_texts(self, local: Tensor, kind: str) -> list[str]:
        """The ``kind`` (``"query"`` or ``"code"``) texts of the training pairs ``local``, in their order."""
        texts = self.train.queries if kind == "query" else self.train.code
        return [texts[i] for i in local.tolist()]

    def _on_device(self, tokens: dict[str, Tensor]) -> dict[str, Tensor]:
        return {k: v.to(self.ctx.device) for k, v in tokens.items()}

    def _tokens(self, idx: Tensor) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
        """The queries and code of training pairs ``idx``, each padded to its longest."""
        enc = self.encoder
        return tuple(self._on_device(enc.tokenize(self.pair_texts(idx, kind), enc.max_length(kind)))
                     for kind in ("query", "code"))

    def _grouped(self, texts: list[str], kind: str) -> list[tuple[Tensor, dict[str, Tensor]]]:
        """``texts`` tokenised in length groups (``config.encoder.group_cost_tokens``), on the run's device."""
        groups = self.encoder.tokenize_groups(texts, self.encoder.max_length(kind))
        return [(index, self._on_device(tokens)) for index, tokens in groups]

    def embed_pairs(self, local: Tensor) -> tuple[Tensor, Tensor]:
        """The queries and code of the local training pairs ``local``, embedded by the (wrapped) encoder in
        length groups; rows in the order of ``local``."""
        return tuple(self.net(groups=self._grouped(self.pair_texts(local, kind), kind)) for kind in ("query", "code"))

    def cached_pieces(self, local: Tensor, chunk: int) -> tuple[list[tuple[dict[str, Tensor], dict[str, Tensor]]],
                                                             Callable[[Tensor, Tensor], tuple[Tensor, Tensor]]]:
        """GradCache's chunks of the local pairs ``local``: ``(query tokens, code tokens)`` of ``chunk`` texts each,
        and ``restore(q, c)``, which puts the concatenated embeddings back in the order of ``local``. With
        ``config.encoder.group_cost_tokens`` set, queries and code are each sorted by length before chunking, so a
        chunk pads little (the loss sees the same batch: ``restore`` undoes the sort)."""
        enc = self.encoder
        sides = []
        for kind in ("query", "code"):
            chosen, length = self.pair_texts(local, kind), enc.max_length(kind)
            # the order indexes Python lists of texts: a host tensor; its inverse goes to the run's device
            order = (torch.arange(len(chosen), device="cpu") if enc.cfg.group_cost_tokens is None
                     else torch.argsort(torch.tensor(enc.token_lengths(chosen, length), device="cpu"), stable=True))
            tokens = [self._on_device(enc.tokenize([chosen[i] for i in order[s : s + chunk]], length))
                      for s in range(0, len(chosen), chunk)]
            sides.append((tokens, torch.argsort(order).to(self.ctx.device)))
        (q_tokens, q_back), (c_tokens, c_back) = sides
        return list(zip(q_tokens, c_tokens)), lambda q, c: (q[q_back], c[c_back])

    def loss(self, queries: Tensor, codes: Tensor, batch: Tensor, step: StepContext | None = None) -> Tensor:
        """The configured terms for local ``queries [n, D]`` against every rank's ``codes`` of the global
        ``batch`` (query ``i`` pairs with code ``i``) and ``config.negatives``, each term by its declared
        distributed behaviour; ``step`` seeds the negatives' draws (``None``: step 0)."""
        kwargs: dict[str, Tensor] = {}
        if self.negatives is not None:
            epoch, index = (step.epoch, step.step) if step is not None else (0, 0)
            self.last_codes = codes.detach()
            ext = self.negatives(queries, codes, epoch=epoch, seed=derived_seed(self.ctx.seed, "negatives", index),
                                 rank=self.ctx.rank, world=self.ctx.world_size)
            queries, codes, kwargs = ext.anchors, ext.candidates, ext.objective_kwargs()
        elif self.prior is not None:
            kwargs = {"prior": self.prior(self._local(batch), batch).to(queries.device)}
        self.last_terms: dict[str, Tensor] = self.objective.parts(queries, codes, via=distributed_objective, **kwargs)
        """This step's weighted objective terms, so a non-finite loss names its term."""
        return sum(self.last_terms.values())

    def train_step(self, batch: Tensor, step: StepContext) -> Mapping[str, float]:
        local = self._local(batch)
        chunk = self.cfg.grad_cache_chunk
        if chunk:
            pieces, restore = self.cached_pieces(local, chunk)
            loss = step.optimize_cached("encoder", lambda p: (self.net(**p[0]), self.net(**p[1])), pieces,
                                        lambda q, c: self.loss(*restore(q, c), batch, step))
        else:
            with step.autocast():
                q, c = self.embed_pairs(local)
            loss = self.loss(q, c, batch, step)
            step.optimize("encoder", loss, terms=self.last_terms)
        if self.negatives is not None:
            self.negatives.update(self.last_codes)  # after the loss: this step's code embeddings join the queue
        # What each term reports of its last call, e.g. Soft-InfoNCE's share of negatives its prior flags
        # as likely false ones (``prior/0:soft_infonce.flagged_share``).
        states = {f"prior/{name}.{k}": v for name, term in zip(self.objective.names, self.objective.terms)
                  if isinstance(term, ContrastiveObjective) for k, v in term.log_values().items()}
        return {"loss": float(loss.detach()), **states}

    @torch.no_grad()
    def embed_for_health(self, batch: Tensor) -> tuple[Tensor, Tensor]:
        q_tok, c_tok = self._tokens(self._local(batch)[:64])
        return self.encoder(**q_tok), self.encoder(**c_tok)

    def _embedder(self) -> Embedder:
        """This evaluation's embedder: the engine's progress bars, the cache (written by rank 0) unless disabled."""
        e, main = self.cfg.eval, self.ctx.rank == 0
        log = (lambda m: print(m, file=sys.stderr)) if main else (lambda m: None)
        cache = None
        if e.cache:
            cache = EmbeddingCache(cache_root(e.cache_dir) / "code_search" / "embeddings", e.cache_max_mb, writable=main, log=log)
        return Embedder(self.encoder, batch_size=e.batch_size, device=self.ctx.device, progress=self.ctx.progress,
                        cache=cache, log=log)

    def evaluate(self, split: str = "val") -> Mapping[str, float]:
        """``val``: mined validation split; ``test``: mined test split (``mined_*``) and CoSQA (``cosqa_*``)."""
        if split not in ("val", "test"):
            raise ValueError(f"unknown split {split!r}; use 'val' or 'test'")
        e = self.cfg.eval
        length = e.max_code_length or None
        with torch.no_grad():
            embed = self._embedder()
            if split == "val":
                return evaluate_pairs(embed, self.splits["val"], "val", max_code_length=length)
            if "test" not in self.splits:
                d = self.cfg.data
                self.splits["test"] = load_split(self._folder, "test", d.test_limit, d.subset_seed)
            metrics = evaluate_pairs(embed, self.splits["test"], "mined test", prefix="mined_", max_code_length=length)
            if e.cosqa and "cosqa" not in self.splits:
                try:
                    self.splits["cosqa"] = load_cosqa(self._cosqa, e.cosqa_queries, e.cosqa_corpus)
                except FileNotFoundError as err:
                    print(f"code_search: skipping CoSQA (config.eval.cosqa=false silences this): {err}")
            if e.cosqa and "cosqa" in self.splits:
                metrics.update(evaluate_pairs(embed, self.splits["cosqa"], "cosqa", prefix="cosqa_", max_code_length=length))
            return metrics
