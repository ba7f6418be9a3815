"""The check of a refused domain command: exit 2, one line on stderr that names the problem, nothing written."""

from __future__ import annotations

from pathlib import Path

from contrasuite.pipelines.cli import main


def assert_export_refused(capsys, run_dir: Path, fmt: str, out: Path, says: str) -> None:
    """``contrasuite export run_dir --format fmt --out out`` exits 2 with one line on stderr holding ``says``, and
    makes no ``out``."""
    assert main(["export", str(run_dir), "--format", fmt, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and says in err
    assert not out.exists()
