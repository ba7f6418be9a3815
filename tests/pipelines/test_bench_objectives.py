"""``contrasuite bench objectives`` on tiny N: one row per registered objective, ratios written out."""

import json
import subprocess
import sys

import pytest
import torch

from contrasuite.core.objectives import OBJECTIVES
from contrasuite.pipelines import memory
from contrasuite.pipelines.bench import objectives as bench
from contrasuite.pipelines.bench.compiled_objectives import HOST_MEMORY
from contrasuite.pipelines.host_allocator import wants_retain


def test_bench_writes_a_row_per_objective(tmp_path):
    out = tmp_path / "bench.json"
    assert bench.main(["--n", "16", "--dim", "8", "--repeats", "1", "--threads", "1", "--output", str(out)]) == 0
    rows = json.loads(out.read_text())
    paired = {r["objective"] for r in rows if r["form"] == "paired"}
    assert paired == set(OBJECTIVES) | {"bare logsumexp"}
    assert {r["objective"] for r in rows if r["form"] == "two_view"} >= {"infonce", "circle", "bare logsumexp"}
    for r in rows:
        assert r["ms"] > 0 and r["peak_mb"] >= 0 and r["time_vs_bare"] > 0
    assert next(r for r in rows if r["objective"] == "clip")["public"] == "open_clip ClipLoss"


def test_bench_markdown_and_bad_names(tmp_path, capsys):
    out = tmp_path / "bench.md"
    assert bench.main(["--n", "8", "--dim", "4", "--repeats", "1", "--objectives", "infonce", "--output", str(out)]) == 0
    lines = out.read_text().splitlines()
    assert lines[0].startswith("| objective |") and any(line.startswith("| infonce | paired | 8 |") for line in lines)
    try:
        bench.main(["--objectives", "nope"])
    except SystemExit as err:
        assert err.code == 2
    assert "unknown ['nope']" in capsys.readouterr().err


def test_tiled_bench_rows_dense_beside_tiled(tmp_path):
    out = tmp_path / "tiled.json"
    argv = ["--tiled", "--n", "24,40", "--dim", "8", "--repeats", "1", "--tile-size", "16", "--threads", "1", "--output", str(out)]
    assert bench.main(argv + ["--dense-max-gib", str(bench.DENSE_BYTES_PER_PAIR * 30**2 / 2**30)]) == 0
    rows = json.loads(out.read_text())
    assert {r["objective"] for r in rows} == set(bench.tiled_names()) >= {"infonce", "clip", "siglip", "dcl"}
    for r in rows:
        assert r["ms"] > 0 and r["peak_mb"] >= 0 and r["tile_size"] == 16
        assert (r["dense_ms"] is None) == (r["n"] == 40)  # dense only where its estimated peak fits
    try:
        bench.main(["--tiled", "--objectives", "circle"])
    except SystemExit as err:
        assert err.code == 2


@pytest.mark.skipif(not memory.RESIDENT_PEAK_WORKS, reason="the resident-set peak reads /proc and forks (Linux)")
def test_cpu_peak_memory_counts_what_is_live_at_once():
    """A call that holds 48 MiB at once peaks near 48 MiB; one that frees each 8 MiB buffer before the
    next peaks far below it (freed buffers leave the resident set; 8.06 MiB on this 2-core VM, 16.1 once
    under a loaded CI run); the profiler's count is the 48 MiB; a failing call raises in the parent."""
    mib = 2**18  # float32 elements per MiB

    def held():
        bufs = [torch.ones(8 * mib) for _ in range(6)]
        return sum(float(t[0]) for t in bufs)

    def freed():
        return sum(float(torch.ones(8 * mib)[0]) for _ in range(6))

    held_mib = memory.peak_resident_bytes(held) / 2**20
    assert 47 <= held_mib <= 56  # the resident set reads a few MiB over under load (50.2 on a loaded CI run)
    assert 7.5 <= memory.peak_resident_bytes(freed) / 2**20 <= held_mib / 2
    assert memory.peak_bytes(held, torch.device("cpu"))[1] / 2**20 == pytest.approx(48, abs=0.5)  # the allocator's count

    def broken():
        raise ValueError("shape [3] does not match")

    with pytest.raises(RuntimeError, match="ValueError: shape"):
        memory.peak_resident_bytes(broken)


def test_bench_peak_of_a_dense_loss_is_its_matrices():
    """The bench's CPU peak of dense InfoNCE at N = 1024 is a few N x N fp32 buffers (4 MiB each), not
    the process's growth from earlier calls."""
    a, b = bench.features(1024, 16, torch.device("cpu"))
    dense = bench.OBJECTIVES["infonce"]()
    peak = bench.peak_mb(lambda x, y: dense(x, y), a, b)
    assert 8 <= peak <= 24


@pytest.mark.skipif(not memory.RESIDENT_PEAK_WORKS, reason="the resident-set peak reads /proc and forks (Linux)")
def test_resident_peak_after_the_parent_used_several_threads_returns():
    """The forked child runs on one thread: the parent's OpenMP pool, once used, hung a child that used it."""
    code = ("import torch; torch.set_num_threads(2); x = torch.randn(600, 600); (x @ x).sum(); "
            "from contrasuite.pipelines import memory; print(memory.peak_resident_bytes(lambda: (x @ x).sum()))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and int(out.stdout.split()[-1]) >= 0, out.stderr[-2000:]


@pytest.mark.slow
def test_compile_mode_checks_the_compiled_objective_against_eager_and_renders_its_section(tmp_path):
    """One real inductor compile per form: the record's rows hold the check and the ratio; --report renders them."""
    out, page = tmp_path / "compile.json", tmp_path / "page.md"
    args = ["--compile", "--n", "32", "--dim", "8", "--repeats", "2", "--objectives", "infonce", "--threads", "1",
            "--clock", "cpu", "--output", str(out)]
    assert bench.main(args) == 0
    record = json.loads(out.read_text())
    assert record["section"] == "objectives+compile" and record["command"].startswith("contrasuite bench objectives --compile")
    assert record["host_allocator"] == ("retain" if wants_retain("auto", torch.device("cpu")) else "system")
    assert [(r["objective"], r["form"], r["n"]) for r in record["rows"]] == [("infonce", "paired", 32), ("infonce", "two_view", 32)]
    for r in record["rows"]:
        assert r["loss_rel_diff"] <= 1e-4 and r["grad_rel_diff"] <= 1e-4
        assert r["eager_ms"] > 0 and r["compiled_ms"] > 0 and r["ratio_min"] <= r["ratio"] <= r["ratio_max"]
        assert r["compile_s"] > 0
    assert bench.main(["--compile", "--report", "--output", str(out), "--page", str(page)]) == 0
    text = page.read_text()
    assert "<!-- section:objectives+compile -->" in text and "| infonce | two_view | 32 |" in text
    assert "| yes |" in text and f"- host memory: {HOST_MEMORY[record['host_allocator']]}" in text


@pytest.mark.parametrize("args, words", [
    (["--report"], "--report renders a --compile record: add --compile"),
    (["--compile", "--tiled"], "--compile and --tiled: choose one"),
    (["--compile", "--report", "--output", "missing.json"], "--report: no record at missing.json"),
])
def test_compile_mode_flags_that_cannot_run_exit_2_naming_the_flag(args, words, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as err:
        bench.main(args)
    assert err.value.code == 2 and words in capsys.readouterr().err
