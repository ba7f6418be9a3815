"""The compare page lists every stored ``contrasuite bench code_search`` result, failed modes included."""

import json

from contrasuite.domains.code_search.report import bench_section


def bench_file(path, rows):
    settings = {"device": "cpu", "threads": "1", "precision": "fp32", "max_code_length": "64", "max_query_length": "32"}
    path.write_text(json.dumps({"settings": settings, "rows": rows}))
    return path


def test_bench_section_lists_rows_and_failures(tmp_path):
    big = bench_file(tmp_path / "code_search_1024.json", [
        {"mode": "plain", "batch": 1024, "error": "exit code -9 (out of memory?)"},
        {"mode": "gradcache", "batch": 1024, "chunk": 32, "pairs_per_s": 6.38, "peak_mb": 1314.8}])
    small = bench_file(tmp_path / "code_search_32.json", [
        {"mode": "plain", "batch": 32, "chunk": 32, "pairs_per_s": 9.19, "peak_mb": 1254.9}])
    text = bench_section([big, small])
    assert "| plain | 1024 | - | did not run: exit code -9 (out of memory?) | - |" in text
    assert "| gradcache | 1024 | 32 | 6.4 | 1315 | cpu, 1 thread(s), fp32, code 64 / query 32 tokens |" in text
    assert "| plain | 32 | - | 9.2 | 1255 |" in text  # a plain step has no chunk
    assert bench_section([]) == ""


def test_train_run_logs_under_its_protocol_folder(tmp_path, monkeypatch):
    """A quick and a reduced run of the same method and seed write separate logs (the protocol's folder)."""
    import contrasuite.domains.code_search.report as code_search
    import contrasuite.pipelines.cli_runs as cli_runs
    from contrasuite.pipelines.cli_runs import Finished

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "eval_test.json").write_text(json.dumps({"metrics": {"mrr": 12.5}}))
    (run_dir / "eval_val.json").write_text(json.dumps({"mrr": 11.0}))
    logs = []
    monkeypatch.setattr(cli_runs, "run_cli", lambda argv, log, env: logs.append(log) or Finished("", 0.0))
    monkeypatch.setattr(cli_runs, "run_folder", lambda stdout: run_dir)
    (tmp_path / "mined").mkdir()
    (tmp_path / "mined" / "manifest.json").write_text(json.dumps({"dataset_version": "abc"}))
    args = code_search._parser().parse_args(["--cache", str(tmp_path / "cache"), "--mined", str(tmp_path / "mined")])
    result = code_search.train_run("infonce", 1, args, tmp_path / "cache" / "quick")
    assert logs == [tmp_path / "cache" / "quick" / "logs" / "infonce_seed1.log"] * 2  # train, then eval
    assert result["test"] == {"mrr": 12.5} and result["val"] == {"mrr": 11.0}
    assert "run.seed=1" in result["command"] and result["dataset_version"] == "abc"


def test_a_cached_run_of_another_mined_dataset_is_refused(tmp_path):
    """The mined set depends on the installed packages: a cache carried to another machine must match it."""
    import pytest

    import contrasuite.domains.code_search.report as code_search
    from contrasuite.domains.errors import DataError

    (tmp_path / "mined").mkdir()
    (tmp_path / "mined" / "manifest.json").write_text(json.dumps({"dataset_version": "new"}))
    args = code_search._parser().parse_args(["--mined", str(tmp_path / "mined")])
    cached = tmp_path / "infonce_seed0.json"
    cached.write_text(json.dumps({"test": {"mined_mrr": 70.0}, "dataset_version": "old"}))
    with pytest.raises(DataError, match="infonce_seed0.json was trained on mined dataset old, but .* is new"):
        code_search._cached(cached, lambda: {}, args)
    cached.write_text(json.dumps({"test": {"mined_mrr": 70.0}, "dataset_version": "new"}))
    assert code_search._cached(cached, lambda: {}, args)["test"] == {"mined_mrr": 70.0}
    fresh = tmp_path / "soft_bm25_seed0.json"
    assert code_search._cached(fresh, lambda: {"test": {}, "dataset_version": "new"}, args)["test"] == {}
    assert fresh.is_file()  # a computed run is cached


def test_the_scale_protocol_trains_the_whole_split_in_large_cached_batches(tmp_path, monkeypatch):
    """``--protocol scale``: every run gets the whole training split, batch 256, GradCache; its own cache and page."""
    import contrasuite.domains.code_search.report as code_search

    args = code_search._parser().parse_args(["--protocol", "scale", "--cache", str(tmp_path / "cache")])
    common = code_search._common(args)
    assert {"config.data.train_limit=0", "config.batch_size=256", "config.grad_cache_chunk=32", "run.precision=bf16"} <= set(common)
    assert not {"config.batch_size=256"} & set(code_search._common(code_search._parser().parse_args([])))
    seen = []
    monkeypatch.setattr(code_search, "ensure_mined", lambda args: None)
    monkeypatch.setattr(code_search, "_cached", lambda path, compute, args: seen.append(path) or {"test": {}})
    monkeypatch.setattr(code_search, "write_report", lambda results, args: "page")
    page = tmp_path / "page.md"
    argv = ["--protocol", "scale", "--methods", "infonce", "--seeds", "0", "--cache", str(tmp_path / "c"), "--out", str(page)]
    assert code_search.main(argv) == 0
    assert seen == [tmp_path / "c" / "scale" / "infonce_seed0.json"] and page.read_text() == "page"
    assert code_search.default_page("scale").name == "code_search_scale.md"
    assert code_search.default_page("reduced").name == "code_search.md"
