"""A command that fails leaves a run folder as it found it: ``eval`` never writes ``status.json``,
``config.yaml`` or ``metrics.csv``; a ``resume`` whose overrides or checkpoint do not fit writes nothing and a
finished run stays finished (so a plain resume still says so)."""

import json
from pathlib import Path

from contrasuite.pipelines import trainer
from contrasuite.pipelines.cli import main
from contrasuite.pipelines.config import load_config


def _files(run_dir: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run_dir)): p.read_bytes() for p in sorted(run_dir.rglob("*")) if p.is_file()}


def _finished_run(toy_yaml, run: dict | None = None, config: dict | None = None) -> Path:
    run_dir = trainer.train(load_config(toy_yaml(run={"epochs": 1, "max_steps": 2, **(run or {})}, config=config)))
    assert json.loads((run_dir / "status.json").read_text())["state"] == "finished"
    return run_dir


def test_resume_with_an_override_the_weights_cannot_take_writes_nothing(toy_yaml, capsys):
    run_dir = _finished_run(toy_yaml)
    before = _files(run_dir)
    assert main(["resume", str(run_dir), "config.hidden=64"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "last.pt" in err
    assert _files(run_dir) == before  # config.yaml not rewritten, status still finished, no lock left
    assert main(["resume", str(run_dir)]) == 0
    assert "already finished" in capsys.readouterr().err


def test_eval_whose_data_moved_fails_and_writes_nothing(toy_yaml, tmp_path, capsys):
    data = tmp_path / "data"
    data.mkdir()
    (data / "toy.bin").write_bytes(b"x")
    run_dir = _finished_run(toy_yaml, run={"data_root": str(data)}, config={"data_file": "toy.bin"})
    (data / "toy.bin").rename(tmp_path / "moved.bin")
    before = _files(run_dir)
    assert main(["eval", str(run_dir)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "toy data file not found" in err[-1]
    assert _files(run_dir) == before


def test_eval_writes_only_its_result(toy_yaml):
    run_dir = _finished_run(toy_yaml)
    before = _files(run_dir)
    assert main(["eval", str(run_dir)]) == 0
    after = _files(run_dir)
    assert set(after) - set(before) == {"eval_test.json"}
    assert {k: v for k, v in after.items() if k != "eval_test.json"} == before
