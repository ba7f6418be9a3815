"""``contrasuite bench data_loading`` runs through and reports one row per worker count."""

import json
import os
from pathlib import Path

import pytest

from contrasuite.pipelines.bench.data_loading import main


def test_bench_data_loading_rows(tmp_path, monkeypatch, capsys):
    if not (Path(os.environ["CONTRASUITE_DATA"]) / "sr" / "B100.tar.gz").is_file():
        pytest.skip("needs B100 under $CONTRASUITE_DATA/sr")
    monkeypatch.setenv("CONTRASUITE_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "rows.json"
    assert main(["--workers", "0,2", "--images", "24", "--batch", "8", "--size", "64", "--output", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [r["workers"] for r in rows] == [0, 2] and rows[0]["vs_0_workers"] == 1.0
    assert all(r["images_per_second"] > 0 for r in rows)
    assert "| workers | images/s | vs 0 workers |" in capsys.readouterr().out
