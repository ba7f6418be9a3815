"""Embeddings of evaluation texts cached on disk, keyed by everything that determines them.

``<folder>/<key>.safetensors`` holds ``embeddings [N, D]`` (float32) of ``N`` texts. The key is the
SHA-256 of: the cache format, the model identity (``config.encoder.model`` and the transformer's
config), a SHA-256 over every weight tensor (name, dtype, shape, bytes), pooling and normalisation,
the tokenizer (class, size), the device type and autocast dtype, the kind (query or code), the
token limit and the texts themselves in order. So another checkpoint, model, max length or corpus
never reads an old file; the embedding batch size is not in the key (it changes padding only).

Files are written to a temporary name and renamed (a kill never leaves half a file), read with
safetensors (no pickle), and a file that does not load or has the wrong row count is recomputed.
A hit refreshes the file's modification time; after a write the least recently used files are
deleted until the folder holds at most ``max_mb`` (0: no limit).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path
from typing import Callable, Sequence

import torch
from torch import Tensor

from contrasuite.domains.code_search.encoder import BiEncoder

CACHE_FORMAT = 1
SUFFIX = ".safetensors"


def weights_digest(module: torch.nn.Module) -> str:
    """SHA-256 over the names, dtypes, shapes and bytes of every tensor of ``module.state_dict()``."""
    digest = hashlib.sha256()
    for name, tensor in module.state_dict().items():
        t = tensor.detach().cpu().contiguous()
        digest.update(f"{name}:{t.dtype}:{tuple(t.shape)}\n".encode())
        digest.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def encoder_identity(encoder: BiEncoder, device: torch.device | str) -> str:
    """The part of the key shared by every text set this encoder embeds (weights hashed once)."""
    device_type = torch.device(device).type
    autocast = torch.get_autocast_dtype(device_type) if torch.is_autocast_enabled(device_type) else None
    config = {k: v for k, v in encoder.transformer.config.to_dict().items() if k not in ("_name_or_path", "transformers_version")}
    parts = (CACHE_FORMAT, encoder.cfg.model, sorted(config.items()), weights_digest(encoder), encoder.cfg.pooling,
             encoder.cfg.normalize, type(encoder.tokenizer).__name__, len(encoder.tokenizer), device_type, str(autocast))
    return hashlib.sha256(repr(parts).encode()).hexdigest()


def texts_key(identity: str, kind: str, max_length: int, texts: Sequence[str]) -> str:
    """The cache key of ``texts`` embedded as ``kind`` at ``max_length`` tokens by the encoder ``identity``."""
    digest = hashlib.sha256(f"{identity}:{kind}:{max_length}:{len(texts)}\n".encode())
    for text in texts:
        data = text.encode("utf-8", "surrogatepass")
        digest.update(len(data).to_bytes(8, "little") + data)
    return digest.hexdigest()[:32]


class EmbeddingCache:
    """A folder of ``<key>.safetensors`` embedding files with a size cap (least recently used go first)."""

    def __init__(self, folder: Path, max_mb: int = 1024, writable: bool = True,
                 log: Callable[[str], None] = lambda message: None) -> None:
        self.folder, self.max_bytes, self.writable, self.log = Path(folder), max_mb * 2**20, writable, log

    def path(self, key: str) -> Path:
        return self.folder / f"{key}{SUFFIX}"

    def load(self, key: str, rows: int) -> Tensor | None:
        """The cached ``[rows, D]`` embeddings of ``key``, or None (absent, unreadable or the wrong size)."""
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        path = self.path(key)
        if not path.is_file():
            return None
        try:
            emb = load_file(str(path))["embeddings"]
        except (SafetensorError, OSError, KeyError, ValueError):
            emb = None
        if emb is None or emb.ndim != 2 or emb.shape[0] != rows:
            self.log(f"code_search: ignoring the unreadable cache file {path}")
            return None
        path.touch()
        return emb

    def store(self, key: str, emb: Tensor) -> None:
        """Write ``emb`` under ``key`` atomically, then evict down to the size cap (no-op when not writable)."""
        from safetensors.torch import save_file

        if not self.writable:
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=f".{key}.", suffix=".tmp")
        os.close(fd)
        try:
            save_file({"embeddings": emb.float().contiguous()}, tmp)
            os.replace(tmp, self.path(key))
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        self._evict(keep=self.path(key))

    def _evict(self, keep: Path) -> None:
        if not self.max_bytes:
            return
        files = []
        for path in self.folder.glob(f"*{SUFFIX}"):
            try:
                stat = path.stat()
            except FileNotFoundError:  # removed by another process meanwhile
                continue
            files.append((stat.st_mtime, stat.st_size, path))
        total = sum(size for _, size, _ in files)
        for _, size, path in sorted(files):
            if total <= self.max_bytes:
                break
            if path != keep:
                path.unlink(missing_ok=True)
                total -= size
