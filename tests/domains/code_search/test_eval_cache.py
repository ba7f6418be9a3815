"""Evaluation: CoSQA files chosen by config, a progress bar per embedding stage, the on-disk embedding cache."""

import json

import pytest
import torch

from contrasuite.domains.code_search.embedding_cache import EmbeddingCache, weights_digest
from contrasuite.domains.code_search.encoder import BiEncoder
from contrasuite.pipelines.cli import main as cli_main

CORPUS = ["def read_rows(path):\n    return open(path).read().split()", "def save_json(obj, path):\n    json.dump(obj, open(path, 'w'))",
          "def count_items(items):\n    return len(items)", "def sort_values(values):\n    return sorted(values)",
          "def join_lines(lines):\n    return '\\n'.join(lines)"]


@pytest.fixture()
def cosqa(tmp_path):
    """A CoSQA-format folder with a dev and a test query file over a five-function corpus."""
    folder = tmp_path / "my_cosqa"
    folder.mkdir()
    (folder / "code_idx_map.txt").write_text(json.dumps({code: i for i, code in enumerate(CORPUS)}))
    dev = [{"doc": "read rows from a file", "retrieval_idx": 0}, {"doc": "count the items", "retrieval_idx": 2}]
    test = [{"doc": "save json to a file", "retrieval_idx": 1}, {"doc": "sort values", "retrieval_idx": 3},
            {"doc": "join lines into text", "retrieval_idx": 4}]
    (folder / "cosqa-retrieval-dev-500.json").write_text(json.dumps(dev))
    (folder / "cosqa-retrieval-test-500.json").write_text(json.dumps(test))
    return folder


@pytest.fixture()
def embed_calls(monkeypatch):
    """The ``(kind, number of texts)`` of every ``BiEncoder.embed`` call."""
    calls = []
    original = BiEncoder.embed

    def counting(self, texts, kind, *args, **kwargs):
        calls.append((kind, len(texts)))
        return original(self, texts, kind, *args, **kwargs)

    monkeypatch.setattr(BiEncoder, "embed", counting)
    return calls


def cosqa_overrides(folder, *extra):
    return ["config.eval.cosqa=true", f"config.eval.cosqa_folder={folder}", *extra]


def test_the_query_file_is_a_config_key(make_task, cosqa):
    task = make_task(extra=cosqa_overrides(cosqa, "config.eval.cosqa_queries=cosqa-retrieval-test-500.json",
                                           "config.eval.cache=false"))
    assert task.splits["cosqa"].queries == ["save json to a file", "sort values", "join lines into text"]
    assert task.splits["cosqa"].targets == [1, 3, 4] and len(task.splits["cosqa"].code) == 5
    metrics = task.evaluate("test")
    assert 0 < metrics["cosqa_mrr"] <= 100 and "cosqa_r@5" in metrics and "cosqa_r@10" not in metrics  # 5 functions
    default = make_task(extra=cosqa_overrides(cosqa, "config.eval.cache=false"))
    assert default.splits["cosqa"].queries == ["read rows from a file", "count the items"]


@pytest.mark.parametrize("key", ["cosqa_queries", "cosqa_corpus"])
def test_a_named_missing_file_fails_at_setup_naming_key_and_path(make_task, cosqa, key):
    with pytest.raises(FileNotFoundError, match=rf"config\.eval\.{key}: CoSQA file {cosqa}/missing\.json not found"):
        make_task(extra=cosqa_overrides(cosqa, f"config.eval.{key}=missing.json"))
    make_task(extra=cosqa_overrides(cosqa, f"config.eval.{key}=missing.json", "config.eval.cosqa=false"))  # switched off


def test_a_missing_query_file_exits_2_with_one_line(run_overrides, cosqa, tmp_path, capsys):
    config = "configs/code_search/reduced_infonce.yaml"
    code = cli_main(["train", config, *run_overrides(tmp_path / "runs"),
                     *cosqa_overrides(cosqa, "config.eval.cosqa_queries=cosqa-retrieval-test-1000.json")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err[-1].startswith("contrasuite train: config.eval.cosqa_queries: CoSQA file ")
    assert str(cosqa / "cosqa-retrieval-test-1000.json") in err[-1]


def test_a_corrupt_query_file_is_a_data_error(make_task, cosqa):
    from contrasuite.core.task.errors import DataError

    (cosqa / "broken.json").write_text('[{"doc": "a query"}]')
    with pytest.raises(DataError, match="broken.json: not a CoSQA retrieval file"):
        make_task(extra=cosqa_overrides(cosqa, "config.eval.cosqa_queries=broken.json"))


def test_a_second_evaluation_embeds_nothing(make_task, cosqa, embed_calls, embedding_cache_root):
    task = make_task(extra=cosqa_overrides(cosqa, f"config.eval.cache_dir={embedding_cache_root / 'second'}"))
    first = task.evaluate("test")
    n_test = len(task.splits["test"].queries)
    assert embed_calls == [("query", n_test), ("code", n_test), ("query", 2), ("code", 5)]
    files = sorted((embedding_cache_root / "second" / "code_search" / "embeddings").glob("*.safetensors"))
    assert len(files) == 4
    embed_calls.clear()
    again = make_task(extra=cosqa_overrides(cosqa, f"config.eval.cache_dir={embedding_cache_root / 'second'}"))
    second = again.evaluate("test")
    assert embed_calls == []
    assert {k: v for k, v in second.items() if not k.endswith("seconds")} == \
        {k: v for k, v in first.items() if not k.endswith("seconds")}


def test_other_weights_or_max_length_miss_the_cache(make_task, cosqa, embed_calls):
    task = make_task(extra=cosqa_overrides(cosqa))
    task.evaluate("val")
    n_val = len(task.splits["val"].queries)
    assert embed_calls == [("query", n_val), ("code", n_val)]
    embed_calls.clear()
    task.evaluate("val")
    assert embed_calls == []
    task.cfg.eval.max_code_length = 32  # the queries still hit
    task.evaluate("val")
    assert embed_calls == [("code", n_val)]
    embed_calls.clear()
    with torch.no_grad():
        next(task.encoder.parameters()).add_(1e-3)  # as one training step would
    task.evaluate("val")
    assert embed_calls == [("query", n_val), ("code", n_val)]


def test_cache_off_writes_nothing(make_task, cosqa, embed_calls, tmp_path):
    task = make_task(extra=cosqa_overrides(cosqa, "config.eval.cache=false", f"config.eval.cache_dir={tmp_path / 'off'}"))
    task.evaluate("val")
    task.evaluate("val")
    assert len(embed_calls) == 4 and not (tmp_path / "off").exists()


def test_each_embedding_stage_is_a_progress_loop_named_with_its_size(make_task, cosqa, capsys, tmp_path):
    stages = []

    def progress(iterable, desc="", total=None):
        stages.append((desc, total))
        return iterable

    task = make_task(extra=cosqa_overrides(cosqa, f"config.eval.cache_dir={tmp_path / 'fresh'}", "config.eval.batch_size=4"),
                     progress=progress)
    task.evaluate("test")
    n = len(task.splits["test"].queries)
    assert stages == [(f"mined test queries ({n:,} texts, 32 tokens)", -(-n // 4)),
                      (f"mined test corpus ({n:,} texts, 64 tokens)", -(-n // 4)),
                      ("cosqa queries (2 texts, 32 tokens)", 1), ("cosqa corpus (5 texts, 64 tokens)", 2)]
    capsys.readouterr()
    task.evaluate("test")
    assert len(stages) == 4  # all four from the cache, each said in one line
    assert "cosqa corpus: 5 embeddings from the cache (" in capsys.readouterr().err


def test_run_progress_shows_the_stages_on_stderr(run_overrides, cosqa, tmp_path, capsys):
    from contrasuite.pipelines import trainer
    from contrasuite.pipelines.config import load_config

    config = "configs/code_search/reduced_infonce.yaml"
    shown = [*run_overrides(tmp_path / "runs"), *cosqa_overrides(cosqa, f"config.eval.cache_dir={tmp_path / 'c'}")]
    trainer.evaluate(trainer.train(load_config(config, shown + ["run.progress=true"])))
    err = capsys.readouterr().err
    assert "val corpus (" in err and "cosqa corpus (5 texts, 64 tokens)" in err
    trainer.evaluate(trainer.train(load_config(config, shown + [f"config.eval.cache_dir={tmp_path / 'd'}"])))
    assert "corpus (" not in capsys.readouterr().err  # run.progress=false


def test_weights_digest_follows_every_tensor(tiny_model):
    from contrasuite.domains.code_search.encoder import EncoderConfig

    a, b = BiEncoder(EncoderConfig(model=str(tiny_model))), BiEncoder(EncoderConfig(model=str(tiny_model)))
    assert weights_digest(a) == weights_digest(b)
    with torch.no_grad():
        b.transformer.encoder.layer[-1].output.LayerNorm.bias[0] += 1e-6
    assert weights_digest(a) != weights_digest(b)


def test_cache_file_checks_eviction_and_read_only(tmp_path):
    cache = EmbeddingCache(tmp_path / "c", max_mb=1)
    big = torch.zeros(640, 256)  # 640 KiB: two do not fit under 1 MiB
    cache.store("first", big)
    assert torch.equal(cache.load("first", 640), big)
    assert cache.load("first", 641) is None  # another corpus size never reads it
    cache.store("second", big + 1)
    assert not cache.path("first").exists() and cache.path("second").exists()  # least recently used went
    cache.path("second").write_bytes(b"not safetensors")
    assert cache.load("second", 640) is None
    EmbeddingCache(tmp_path / "ro", writable=False).store("x", big)
    assert not (tmp_path / "ro").exists()
    assert not list((tmp_path / "c").glob("*.tmp"))
