"""A searchable index of every function under a source tree: safetensors embeddings + JSON metadata.

``INDEX.safetensors`` holds ``embeddings [F, D]`` (float32, as the encoder returns them);
``INDEX.json`` holds the format version, the encoder settings (and the run checkpoint, if any) needed
to embed a query the same way, and one entry per function: file, line, qualified name, first
docstring line. No pickle anywhere. Functions are embedded with their full source (docstring included).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from contrasuite.core.task.errors import DataError
from contrasuite.domains.checkpoint_fit import fitting, read_modules
from contrasuite.domains.code_search.encoder import BiEncoder, EncoderConfig, console_progress
from contrasuite.domains.code_search.mine import Function, iter_functions, summary
from contrasuite.domains.init_from import checkpoint_file

INDEX_FORMAT = 1
META_KEYS = ("encoder", "checkpoint", "functions")
REBUILD = "rebuild it with `contrasuite code-search index`"


@dataclass
class Hit:
    score: float
    file: str
    line: int
    name: str
    doc: str


def index_paths(index: Path) -> tuple[Path, Path]:
    """``(INDEX.safetensors, INDEX.json)`` for ``INDEX`` given with or without a suffix."""
    index = Path(index)
    stem = index.with_suffix("") if index.suffix in (".safetensors", ".json") else index
    return stem.with_name(stem.name + ".safetensors"), stem.with_name(stem.name + ".json")


def load_encoder(cfg: EncoderConfig, checkpoint: str | None) -> BiEncoder:
    """The encoder of ``cfg``, with a ``code_search`` run's weights when ``checkpoint`` (a run folder or
    checkpoint file) is given; a checkpoint that is unreadable or does not fit is one error naming it."""
    if not checkpoint:
        return BiEncoder(cfg).eval()
    file = checkpoint_file(Path(checkpoint))
    modules = read_modules(file)
    encoder = BiEncoder(cfg)
    with fitting(file, modules, "encoder"):
        encoder.load_state_dict(modules["encoder"])
    return encoder.eval()


def build_index(source: Path, out: Path, cfg: EncoderConfig, checkpoint: str | None = None, *,
                batch_size: int = 64, device: str = "cpu", log: Callable[[str], None] = print) -> int:
    """Embed every function under ``source`` into ``out`` (a progress bar on stderr); returns the number of functions."""
    from safetensors.torch import save_file

    source = Path(source).resolve()
    if not source.exists():
        raise FileNotFoundError(f"code-search index: source {source} does not exist")
    functions: list[Function] = []
    skipped = 0
    for item in iter_functions(source):
        if isinstance(item, tuple):
            skipped += 1
        else:
            functions.append(item)
    if not functions:
        raise ValueError(f"code-search index: no Python functions under {source}")
    encoder = load_encoder(cfg, checkpoint).to(device)
    emb = encoder.embed([f.source for f in functions], "code", batch_size, device, progress=console_progress,
                        desc=f"code-search index ({len(functions):,} functions, {cfg.max_code_length} tokens)")
    tensors_path, meta_path = index_paths(out)
    tensors_path.parent.mkdir(parents=True, exist_ok=True)
    save_file({"embeddings": emb.contiguous()}, str(tensors_path))
    root = source if source.is_dir() else source.parent
    meta = {
        "format": INDEX_FORMAT,
        "source": str(source),
        "encoder": dataclasses.asdict(cfg),
        "checkpoint": str(Path(checkpoint).resolve()) if checkpoint else None,
        "functions": [
            {"file": str(root / f.path) if source.is_dir() else str(source), "line": f.lineno, "name": f.name,
             "doc": summary(f.docstring)[:120] if f.docstring else ""}
            for f in functions
        ],
    }
    meta_path.write_text(json.dumps(meta, indent=1) + "\n")
    log(f"indexed {len(functions)} functions ({skipped} unreadable files skipped) -> {tensors_path}, {meta_path}")
    return len(functions)


def _read_meta(meta_path: Path) -> dict[str, Any]:
    try:
        meta = json.loads(meta_path.read_text())
    except ValueError as err:  # truncated or not JSON (UnicodeDecodeError is a ValueError too)
        raise DataError(f"{meta_path}: not a readable index ({err}); {REBUILD}") from None
    found = meta.get("format") if isinstance(meta, dict) else None
    if found != INDEX_FORMAT:
        raise DataError(f"{meta_path}: index format {found!r}, expected {INDEX_FORMAT}; {REBUILD}")
    absent = [key for key in META_KEYS if key not in meta]
    if absent:
        raise DataError(f"{meta_path}: no {absent[0]!r} entry; {REBUILD}")
    return meta


def _read_embeddings(tensors_path: Path) -> torch.Tensor:
    from safetensors.torch import load_file

    try:
        return load_file(str(tensors_path))["embeddings"]
    except Exception as err:  # noqa: BLE001 - truncated or not safetensors (SafetensorError), no embeddings (KeyError)
        reason = f"no {err} tensor" if isinstance(err, KeyError) else " ".join(str(err).split())[:200]
        raise DataError(f"{tensors_path}: not a readable index ({reason}); {REBUILD}") from None


def read_index(index: Path) -> tuple[dict[str, Any], torch.Tensor]:
    """An index's metadata and its ``[F, D]`` embeddings, checked against each other; errors name the file."""
    tensors_path, meta_path = index_paths(index)
    for p in (tensors_path, meta_path):
        if not p.is_file():
            raise FileNotFoundError(f"code-search query: index file {p} not found (build it with `contrasuite code-search index`)")
    meta, emb = _read_meta(meta_path), _read_embeddings(tensors_path)
    if emb.ndim != 2 or emb.shape[0] != len(meta["functions"]):
        raise DataError(f"{tensors_path}: embeddings of shape {list(emb.shape)} but {len(meta['functions'])} functions "
                        f"in {meta_path}; {REBUILD}")
    return meta, emb


def search(index: Path, query: str, top_k: int = 10, device: str = "cpu") -> list[Hit]:
    """The ``top_k`` functions of ``index`` for ``query`` (not blank), best first."""
    if not query.strip():
        raise ValueError("the query is empty; give words that describe the function you look for")
    meta, emb = read_index(index)
    encoder = load_encoder(EncoderConfig(**meta["encoder"]), meta["checkpoint"]).to(device)
    with torch.no_grad():
        q = encoder.embed([query], "query", 1, device)[0]
    scores = emb.float() @ q
    best = scores.topk(min(top_k, scores.shape[0]))
    return [Hit(float(s), **meta["functions"][int(i)]) for s, i in zip(best.values, best.indices)]
