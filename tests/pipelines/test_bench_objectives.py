"""``contrasuite bench objectives`` on tiny N: one row per registered objective, ratios written out."""

import json
import sys

import pytest
import torch

from contrasuite.core.objectives import OBJECTIVES
from contrasuite.pipelines.bench import objectives as bench


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


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the resident-set peak reads /proc (Linux)")
def test_cpu_peak_memory_counts_what_is_live_at_once():
    """A step that holds 48 MiB at once peaks near 48 MiB; one that frees each 8 MiB buffer before the
    next peaks near 8 MiB (freed buffers leave the resident set); a failing step raises in the parent."""
    a, b = torch.zeros(4, 4, requires_grad=True), torch.zeros(4, 4, requires_grad=True)
    mib = 2**18  # float32 elements per MiB

    def held(x, y):
        bufs = [torch.ones(8 * mib) for _ in range(6)]
        return (x * y).sum() + sum(float(t[0]) for t in bufs)

    def freed(x, y):
        return (x * y).sum() + sum(float(torch.ones(8 * mib)[0]) for _ in range(6))

    assert 47 <= bench.peak_rss_mb(held, a, b) <= 52
    assert 7.5 <= bench.peak_rss_mb(freed, a, b) <= 12
    assert bench.peak_mb(held, a, b) == pytest.approx(bench.peak_rss_mb(held, a, b), abs=2)

    def broken(x, y):
        raise ValueError("shape [3] does not match")

    with pytest.raises(RuntimeError, match="ValueError: shape"):
        bench.peak_rss_mb(broken, a, b)
