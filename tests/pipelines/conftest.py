"""Shared helpers for the engine tests: toy run configs and a subprocess environment."""

import json
import os
import sys
from pathlib import Path

import pytest
import yaml

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # the toy task is imported by name ("toy_task:ToyTask") in every import mode
    sys.path.insert(0, str(HERE))


@pytest.fixture
def toy_yaml(tmp_path):
    """``toy_yaml(name="toy", run={...}, config={...})`` -> path of a toy-task run config in tmp_path."""

    def write(name: str = "toy", run: dict | None = None, config: dict | None = None) -> Path:
        run_section = {"output_root": str(tmp_path / "runs"), "progress": False, "precision": "fp32", "device": "cpu",
                       "log_every_steps": 1, "health_every_steps": 2, **(run or {})}
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump({"task": "toy_task:ToyTask", "run": run_section, "config": config or {}}))
        return path

    return write


@pytest.fixture
def cli_env():
    """Environment for ``python -m contrasuite.pipelines.cli`` subprocesses that import the toy task."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["OMP_NUM_THREADS"] = "1"
    return env



@pytest.fixture
def pretend_killed():
    """``pretend_killed(run_dir)``: a finished run's status set back to running, as if killed after its last.pt."""

    def mark(run_dir: Path) -> None:
        status = json.loads((run_dir / "status.json").read_text())
        (run_dir / "status.json").write_text(json.dumps({**status, "state": "running"}))

    return mark
