"""The compare page lists every stored ``contrasuite bench code_search`` result, failed modes included."""

import json

from contrasuite.pipelines.reports.code_search import bench_section


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
