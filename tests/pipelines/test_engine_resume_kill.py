"""A run killed with SIGKILL after a checkpoint and resumed ends equal to an uninterrupted run,
on one process and on two (gloo, every rank resumes its own RNG states)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

CLI = [sys.executable, "-m", "contrasuite.pipelines.cli"]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m",
            "contrasuite.pipelines.cli"]

RUN = {"epochs": 2, "checkpoint_every_steps": 1, "deterministic": True, "health_every_steps": 3}
CONFIG = {"dropout": 0.2, "sleep": 0.15}


def _kill_tree(pid: int) -> None:
    """SIGKILL ``pid`` and every descendant (torchrun's workers run in their own process groups)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    todo, tree = [pid], []
    while todo:
        tree.append(todo.pop())
        todo += children.get(tree[-1], [])
    for p in tree:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _run_dirs(root):
    return [p.parent for p in root.rglob("config.yaml")]


@pytest.mark.slow
@pytest.mark.parametrize("launcher", [CLI, pytest.param(TORCHRUN, marks=pytest.mark.distributed)], ids=["1proc", "2proc"])
def test_sigkill_then_resume_equals_uninterrupted(launcher, toy_yaml, cli_env, tmp_path):
    path = toy_yaml(run=RUN, config=CONFIG)
    subprocess.run([*launcher, "train", str(path), f"run.output_root={tmp_path / 'full'}", "config.sleep=0"],
                   env=cli_env, check=True, capture_output=True, timeout=180)
    (full,) = _run_dirs(tmp_path / "full")

    proc = subprocess.Popen([*launcher, "train", str(path), f"run.output_root={tmp_path / 'killed'}"], env=cli_env,
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
        _kill_tree(proc.pid)
    finally:
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    (killed,) = _run_dirs(tmp_path / "killed")
    assert json.loads((killed / "status.json").read_text())["state"] == "running"
    stopped_at = torch.load(killed / "checkpoints" / "last.pt", weights_only=True)["position"]["global_step"]
    assert 2 <= stopped_at < 8
    time.sleep(1.0)  # no worker of the killed run may still be training
    assert torch.load(killed / "checkpoints" / "last.pt", weights_only=True)["position"]["global_step"] == stopped_at

    out = subprocess.run([*launcher, "resume", str(killed)], env=cli_env, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    assert json.loads((killed / "status.json").read_text())["state"] == "finished"
    a = torch.load(full / "checkpoints" / "last.pt", weights_only=True)
    b = torch.load(killed / "checkpoints" / "last.pt", weights_only=True)
    assert a["position"] == b["position"] == {"epoch": 2, "step_in_epoch": 0, "global_step": 8}
    for key, value in a["modules"]["model"].items():
        assert torch.equal(b["modules"]["model"][key], value), key
    assert torch.equal(a["optimizers"]["model"]["state"][0]["momentum_buffer"], b["optimizers"]["model"]["state"][0]["momentum_buffer"])
