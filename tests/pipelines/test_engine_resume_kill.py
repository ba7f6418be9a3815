"""A run killed with SIGKILL after a checkpoint and resumed ends equal to an uninterrupted run."""

import json
import signal
import subprocess
import sys
import time

import pytest
import torch

CLI = [sys.executable, "-m", "contrasuite.pipelines.cli"]

RUN = {"epochs": 2, "checkpoint_every_steps": 1, "deterministic": True, "health_every_steps": 3}
CONFIG = {"dropout": 0.2, "sleep": 0.15}


def _run_dirs(root):
    return [p.parent for p in root.rglob("config.yaml")]


@pytest.mark.slow
def test_sigkill_then_resume_equals_uninterrupted(toy_yaml, cli_env, tmp_path):
    path = toy_yaml(run=RUN, config=CONFIG)
    subprocess.run([*CLI, "train", str(path), f"run.output_root={tmp_path / 'full'}", "config.sleep=0"], env=cli_env,
                   check=True, capture_output=True, timeout=120)
    (full,) = _run_dirs(tmp_path / "full")

    proc = subprocess.Popen([*CLI, "train", str(path), f"run.output_root={tmp_path / 'killed'}"], env=cli_env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 90
    try:
        while time.time() < deadline:
            dirs = _run_dirs(tmp_path / "killed")
            last = dirs[0] / "checkpoints" / "last.pt" if dirs else None
            if last is not None and last.is_file():
                if torch.load(last, weights_only=True)["position"]["global_step"] >= 2:
                    break
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    (killed,) = _run_dirs(tmp_path / "killed")
    assert json.loads((killed / "status.json").read_text())["state"] == "running"
    stopped_at = torch.load(killed / "checkpoints" / "last.pt", weights_only=True)["position"]["global_step"]
    assert 2 <= stopped_at < 8

    out = subprocess.run([*CLI, "resume", str(killed)], env=cli_env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads((killed / "status.json").read_text())["state"] == "finished"
    a = torch.load(full / "checkpoints" / "last.pt", weights_only=True)
    b = torch.load(killed / "checkpoints" / "last.pt", weights_only=True)
    assert a["position"] == b["position"] == {"epoch": 2, "step_in_epoch": 0, "global_step": 8}
    for key, value in a["modules"]["model"].items():
        assert torch.equal(b["modules"]["model"][key], value), key
    assert torch.equal(a["optimizers"]["model"]["state"][0]["momentum_buffer"], b["optimizers"]["model"]["state"][0]["momentum_buffer"])
