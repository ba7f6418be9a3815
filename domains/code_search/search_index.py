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
from typing import Callable

import torch

from contrasuite.domains.code_search.encoder import BiEncoder, EncoderConfig, console_progress
from contrasuite.domains.code_search.mine import Function, iter_functions, summary
from contrasuite.domains.code_search.priors import load_encoder_checkpoint

INDEX_FORMAT = 1


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
    """The encoder of ``cfg``, with a ``code_search`` run's weights when ``checkpoint`` is given."""
    return load_encoder_checkpoint(cfg, Path(checkpoint)) if checkpoint else BiEncoder(cfg).eval()


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


def search(index: Path, query: str, top_k: int = 10, device: str = "cpu") -> list[Hit]:
    """The ``top_k`` functions of ``index`` for ``query``, best first."""
    from safetensors.torch import load_file

    tensors_path, meta_path = index_paths(index)
    for p in (tensors_path, meta_path):
        if not p.is_file():
            raise FileNotFoundError(f"code-search query: index file {p} not found (build it with `contrasuite code-search index`)")
    meta = json.loads(meta_path.read_text())
    if meta.get("format") != INDEX_FORMAT:
        raise ValueError(f"{meta_path}: index format {meta.get('format')!r}, expected {INDEX_FORMAT}")
    emb = load_file(str(tensors_path))["embeddings"]
    if emb.shape[0] != len(meta["functions"]):
        raise ValueError(f"{tensors_path}: {emb.shape[0]} embeddings but {len(meta['functions'])} functions in {meta_path}")
    encoder = load_encoder(EncoderConfig(**meta["encoder"]), meta["checkpoint"]).to(device)
    with torch.no_grad():
        q = encoder.embed([query], "query", 1, device)[0]
    scores = emb.float() @ q
    best = scores.topk(min(top_k, scores.shape[0]))
    return [Hit(float(s), **meta["functions"][int(i)]) for s, i in zip(best.values, best.indices)]
