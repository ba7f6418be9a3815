"""The three similarity priors of Soft-InfoNCE (Li et al., EMNLP 2023, arXiv:2310.08069, section 4).

Soft-InfoNCE weights the negative code ``c_j`` of query ``q_i`` by ``w_ij`` computed from a prior
``sim_ij`` (see :func:`contrasuite.core.objectives.soft_infonce_weights`). The paper estimates
``sim_ij`` three ways; each class here returns ``sim [n, m]`` for training-set row indices
(the anchors' queries) and column indices (the candidates' pairs):

* :class:`BM25Prior`: lexical BM25 between query ``i`` and query ``j`` (the query that belongs to
  code ``j``), with the other training queries as the document collection (``bm25s``, Lucene
  variant, k1 = 1.2, b = 0.75; the official code's Robertson form with a k2 = 100 query-term factor
  is not in bm25s).
* :class:`SimCSEPrior`: cosine between queries under an unsupervised SimCSE query encoder (Gao,
  Yao, Chen, EMNLP 2021: the same sentence twice through the encoder with dropout on, InfoNCE with
  in-batch negatives, ``t = 0.05``; the paper trains it on the training queries only).
* :class:`ModelPrior`: ``q_i . c_j`` under a frozen bi-encoder already trained with InfoNCE
  (a ``code_search`` run checkpoint).

All three precompute what they need over the training set once, so a step only indexes a matrix
or runs BM25 for the batch's queries. Embedding priors are cached as safetensors in ``cache_dir``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch
from torch import Tensor

from contrasuite.core.objectives import InfoNCE
from contrasuite.core.task.errors import ConfigValueError
from contrasuite.domains.code_search.encoder import BiEncoder, EncoderConfig
from contrasuite.domains.init_from import checkpoint_file

PRIORS = ("none", "bm25", "simcse", "model")


class BM25Prior:
    """BM25 score of query ``i`` against query ``j`` over the training queries."""

    def __init__(self, queries: Sequence[str], k1: float = 1.2, b: float = 0.75, stopwords: str = "en") -> None:
        import bm25s

        self.tokens = bm25s.tokenize(list(queries), stopwords=stopwords, return_ids=False, show_progress=False)
        self.index = bm25s.BM25(k1=k1, b=b)
        self.index.index(self.tokens, show_progress=False)
        self.n = len(queries)

    def __call__(self, rows: Tensor, cols: Tensor) -> Tensor:
        cols_np = cols.cpu().numpy()
        out = np.zeros((len(rows), len(cols_np)), dtype=np.float32)
        for r, i in enumerate(rows.tolist()):
            if self.tokens[i]:
                out[r] = self.index.get_scores(self.tokens[i])[cols_np]
        return torch.from_numpy(out)


class EmbeddingPrior:
    """``sim = left[rows] @ right[cols].T`` from precomputed embeddings (query-query or query-code)."""

    def __init__(self, left: Tensor, right: Tensor) -> None:
        self.left, self.right = left.float(), right.float()

    def __call__(self, rows: Tensor, cols: Tensor) -> Tensor:
        return self.left[rows.cpu()] @ self.right[cols.cpu()].T


def _cached(path: Path | None, compute: Callable[[], dict[str, Tensor]]) -> dict[str, Tensor]:
    from safetensors.torch import load_file, save_file

    if path is not None and path.is_file():
        return load_file(str(path))
    tensors = compute()
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(path))
    return tensors


def _fingerprint(*parts: Any) -> str:
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:12]


def train_simcse(
    encoder: BiEncoder,
    queries: Sequence[str],
    *,
    epochs: int = 1,
    max_steps: int = 0,
    batch_size: int = 64,
    lr: float = 3e-5,
    temperature: float = 0.05,
    seed: int = 0,
    device: torch.device | str = "cpu",
    log: Callable[[str], None] = print,
) -> BiEncoder:
    """Unsupervised SimCSE on ``queries`` (in place): two dropout views per query, InfoNCE over the batch."""
    objective = InfoNCE(temperature=temperature)
    opt = torch.optim.AdamW(encoder.parameters(), lr=lr)
    encoder.train()
    rng = random.Random(seed)
    step = 0
    for epoch in range(epochs):
        order = list(range(len(queries)))
        rng.shuffle(order)
        for start in range(0, len(order) - batch_size + 1, batch_size):
            texts = [queries[i] for i in order[start : start + batch_size]]
            batch = {k: v.to(device) for k, v in encoder.tokenize(texts, encoder.cfg.max_query_length).items()}
            z1, z2 = encoder(**batch), encoder(**batch)
            loss = objective(z1, z2)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            if step % 20 == 0 or step == 1:
                log(f"simcse prior: epoch {epoch} step {step} loss {float(loss.detach()):.4f}")
            if max_steps and step >= max_steps:
                return encoder
    return encoder


def build_prior(
    spec: Mapping[str, Any],
    queries: Sequence[str],
    code: Sequence[str],
    encoder_cfg: EncoderConfig,
    *,
    cache_dir: Path | None,
    device: torch.device | str = "cpu",
    seed: int = 0,
    log: Callable[[str], None] = print,
) -> Callable[[Tensor, Tensor], Tensor] | None:
    """The prior named by ``spec["name"]`` (``config.prior``) over the training pairs; None for ``none``."""
    spec = dict(spec)
    name = spec.pop("name", "none")
    if name not in PRIORS:
        raise ConfigValueError(f"config.prior.name must be one of {PRIORS}, got {name!r}")
    key = _fingerprint(name, sorted(spec.items()), encoder_cfg, len(queries), queries[:3], seed)
    cache = None if cache_dir is None else Path(cache_dir) / f"prior_{name}_{key}.safetensors"
    if name == "none":
        _no_extra_keys(name, spec, ())
        return None
    if name == "bm25":
        _no_extra_keys(name, spec, ("k1", "b", "stopwords"))
        return BM25Prior(queries, **spec)
    if name == "simcse":
        _no_extra_keys(name, spec, ("model", "epochs", "max_steps", "batch_size", "lr", "temperature"))
        model = spec.pop("model", None)
        cfg = dataclasses.replace(encoder_cfg, model=model) if model else encoder_cfg

        def compute() -> dict[str, Tensor]:
            enc = BiEncoder(cfg).to(device)
            train_simcse(enc, queries, seed=seed, device=device, log=log, **spec)
            emb = enc.embed(queries, "query", device=device)
            return {"queries": emb}

        emb = _cached(cache, compute)["queries"]
        return EmbeddingPrior(emb, emb)
    _no_extra_keys(name, spec, ("checkpoint",))
    if "checkpoint" not in spec:
        raise ConfigValueError("config.prior.checkpoint is required for prior 'model' (a code_search run's .pt or run folder)")

    def compute() -> dict[str, Tensor]:
        enc = load_encoder_checkpoint(encoder_cfg, Path(spec["checkpoint"])).to(device)
        return {"queries": enc.embed(queries, "query", device=device), "code": enc.embed(code, "code", device=device)}

    tensors = _cached(cache, compute)
    return EmbeddingPrior(tensors["queries"], tensors["code"])


def _no_extra_keys(name: str, spec: Mapping[str, Any], allowed: Sequence[str]) -> None:
    extra = sorted(set(spec) - set(allowed))
    if extra:
        raise ConfigValueError(f"config.prior: unknown key(s) {extra} for prior {name!r}; allowed: {sorted(allowed)}")


def load_encoder_checkpoint(cfg: EncoderConfig, path: Path) -> BiEncoder:
    """A :class:`BiEncoder` built from ``cfg`` with the ``encoder`` module of a ``code_search`` checkpoint."""
    file = checkpoint_file(Path(path))
    if not file.is_file():
        raise FileNotFoundError(f"checkpoint not found: {file}")
    state = torch.load(file, map_location="cpu", weights_only=True)
    try:
        weights = state["modules"]["encoder"]
    except (KeyError, TypeError):
        raise ValueError(f"{file} is not a code_search checkpoint (no modules.encoder)") from None
    enc = BiEncoder(cfg)
    enc.load_state_dict(weights)
    enc.eval()
    return enc
