"""``contrasuite bench code_search``: the side-by-side embedding rows against plain sentence-transformers."""

import json

import numpy as np
import pytest

import contrasuite.domains.code_search.bench as bench
from contrasuite.domains.code_search.report import bench_section


class ListQueue(list):
    put = list.append


def bench_args(tiny_model, tmp_path, *extra):
    parsed = bench._parser().parse_args([f"--model={tiny_model}", "--texts=24", "--embed-batch=8", "--steps=1", "--warmup=0",
                                      "--precision=fp32", "--device=cpu", "--threads=1", "--max-code-length=48",
                                      f"--out={tmp_path / 'bench.json'}", *extra])
    return vars(parsed)


def test_our_embedding_equals_sentence_transformers_on_the_same_texts(tiny_model, tmp_path):
    pytest.importorskip("sentence_transformers")
    args = bench_args(tiny_model, tmp_path)
    queue = ListQueue()
    for mode in bench.EMBED_MODES:
        bench._run(mode, args, queue)
    (ours, ours_emb), (st, st_emb) = queue
    assert ours["mode"] == "embed" and st["mode"] == "sentence-transformers"
    assert ours["texts"] == st["texts"] == 24 and ours["batch"] == st["batch"] == 8
    assert ours["texts_per_s"] > 0 and st["texts_per_s"] > 0
    assert ours_emb.shape == st_emb.shape == (24, 32)
    assert np.abs(ours_emb - st_emb).max() < 1e-5  # same model, pooling, normalisation and truncation
    short = ListQueue()
    bench._run("embed", bench_args(tiny_model, tmp_path, "--max-code-length=8"), short)
    assert np.abs(short[0][1] - ours_emb).max() > 1e-3  # the length is honoured: the comparison can fail


def test_embedding_rows_in_the_tables(tmp_path):
    rows = [{"mode": "embed", "texts": 6267, "batch": 64, "seconds": 173.0, "texts_per_s": 36.2},
            {"mode": "sentence-transformers", "texts": 6267, "batch": 64, "seconds": 172.0, "texts_per_s": 36.4,
             "max_abs_diff": 2.4e-7},
            {"mode": "sentence-transformers", "batch": 1024, "error": "exit code 1 (out of memory?)"}]
    lines = [bench.table_line(r) for r in rows]
    assert lines[0] == "| embed | 6,267 | 64 | 36.2 | 173.0 | - |"
    assert lines[1] == "| sentence-transformers | 6,267 | 64 | 36.4 | 172.0 | 2.4e-07 |"
    assert lines[2].startswith("| sentence-transformers | - | - | did not run: exit code 1")
    settings = {"device": "cpu", "threads": "1", "precision": "fp32", "max_code_length": "128", "max_query_length": "32"}
    (tmp_path / "code_search_embed.json").write_text(json.dumps({"settings": settings, "rows": rows[:2]}))
    text = bench_section([tmp_path / "code_search_embed.json"])
    assert "| sentence-transformers | 6,267 | 64 | 36.4 | 172.0 | 2.4e-07 | cpu, 1 thread(s), fp32, code 128 tokens |" in text
    assert "| mode | batch | chunk |" not in text  # no training-step rows in this file


@pytest.mark.slow
def test_bench_main_runs_both_embeddings_in_fresh_processes(tiny_model, tmp_path, capsys):
    pytest.importorskip("sentence_transformers")
    argv = [f"--model={tiny_model}", "--modes", "embed", "sentence-transformers", "--texts=16", "--embed-batch=8",
            "--steps=1", "--precision=fp32", "--device=cpu", "--threads=1", f"--out={tmp_path / 'b.json'}"]
    assert bench.main(argv) == 0
    rows = json.loads((tmp_path / "b.json").read_text())["rows"]
    assert [r["mode"] for r in rows] == ["embed", "sentence-transformers"] and rows[1]["max_abs_diff"] < 1e-5
    assert "| embedding | texts | batch | texts/s | seconds | max abs diff |" in capsys.readouterr().out
