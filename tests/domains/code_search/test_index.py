"""``contrasuite code-search index`` / ``query`` round trip on a tiny tree with a tiny random BERT."""

import json

import pytest
import torch

from contrasuite.domains.code_search.encoder import BiEncoder, EncoderConfig
from contrasuite.domains.code_search.search_index import build_index, index_paths, search
from contrasuite.domains.code_search.commands import main as cli


def test_index_query_round_trip(source_tree, tiny_model, tmp_path, capsys):
    out = tmp_path / "idx" / "tree"
    assert cli(["index", str(source_tree), "--out", str(out), "--model", str(tiny_model), "--max-code-length", "128"]) == 0
    printed = capsys.readouterr()
    assert "indexed 41 functions" in printed.out
    assert "code-search index (41 functions, 128 tokens): 100%" in printed.err
    tensors, meta_path = index_paths(out)
    meta = json.loads(meta_path.read_text())
    assert tensors.is_file() and meta["format"] == 1 and meta["checkpoint"] is None
    assert len(meta["functions"]) == 41  # every def, docstring or not; the broken file is skipped
    hits = search(out, "read a csv file into rows", top_k=5)
    assert len(hits) == 5 and [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    enc = BiEncoder(EncoderConfig(model=str(tiny_model), max_code_length=128))
    q = enc.embed(["read a csv file into rows"], "query")[0]
    for hit in hits:
        line = open(hit.file).read().splitlines()[hit.line - 1].strip()
        assert line.startswith("def ") and hit.name.rsplit(".", 1)[-1] in line
    # The reported score is the cosine between the query and that function's source.
    from contrasuite.domains.code_search.mine import iter_functions

    sources = {(str(source_tree / f.path), f.lineno): f.source for f in iter_functions(source_tree) if not isinstance(f, tuple)}
    top = hits[0]
    c = enc.embed([sources[(top.file, top.line)]], "code")[0]
    assert top.score == pytest.approx(float(q @ c), abs=1e-4)
    assert cli(["query", str(out), "read a csv file into rows", "--top-k", "2"]) == 0
    printed = capsys.readouterr().out.strip().splitlines()
    assert len(printed) == 2 and f"{top.file}:{top.line}" in printed[0]


def test_query_missing_index_is_a_clear_error(tmp_path, capsys):
    assert cli(["query", str(tmp_path / "none"), "x"]) == 2
    assert "none.safetensors" in capsys.readouterr().err


def test_index_rejects_an_empty_tree(tmp_path, tiny_model):
    (tmp_path / "src").mkdir()
    with pytest.raises(ValueError, match="no Python functions"):
        build_index(tmp_path / "src", tmp_path / "idx", EncoderConfig(model=str(tiny_model)))


def test_unknown_model_names_the_config_key(tmp_path):
    with pytest.raises(FileNotFoundError, match="config.encoder.model"):
        BiEncoder(EncoderConfig(model=str(tmp_path / "missing")))


def test_mean_pooling_ignores_padding(tiny_model):
    enc = BiEncoder(EncoderConfig(model=str(tiny_model))).eval()
    alone = enc.embed(["read rows"], "query")
    padded = enc.embed(["read rows", "a much longer query that forces padding of the first one"], "query", batch_size=2)
    assert torch.allclose(alone[0], padded[0], atol=1e-5)
    assert torch.allclose(padded.norm(dim=1), torch.ones(2), atol=1e-5)
