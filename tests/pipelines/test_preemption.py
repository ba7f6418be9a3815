"""Preemption: SIGTERM (SLURM, Kubernetes, torchrun passing it on), SIGUSR1 (``sbatch --signal``) or Ctrl-C
mid-run finishes the step in progress, writes ``last.pt``, sets ``status.json`` to ``preempted``, prints one
line with the resume command and exits ``128 + signal``; ``contrasuite resume`` then ends bit-equal to an
uninterrupted run, on one process and on two. No periodic checkpoint is configured, so the checkpoint the
resume starts from can only have been written on the signal, at the step it arrived."""

import csv
import json
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
RUN = {"epochs": 2, "checkpoint_every_steps": 0, "deterministic": True, "health_every_steps": 3}
CONFIG = {"dropout": 0.2, "sleep": 0.2}
STEPS = 8  # 2 epochs of 64 samples in batches of 16


def _run_dir(root: Path) -> Path | None:
    found = [p.parent for p in root.rglob("config.yaml")]
    return found[0] if found else None


def _logged_step(run_dir: Path) -> int:
    """The last training step in ``metrics.csv`` (0 before the first)."""
    path = run_dir / "metrics.csv"
    if not path.is_file():
        return 0
    with open(path) as handle:
        return max((int(row["step"]) for row in csv.DictReader(handle) if row["name"] == "train/loss"), default=0)


def _final(run_dir: Path) -> dict:
    return torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)


@pytest.mark.slow
@pytest.mark.parametrize("launcher, signum", [
    (CLI, signal.SIGTERM),
    (CLI, signal.SIGUSR1),
    pytest.param(TORCHRUN, signal.SIGTERM, marks=pytest.mark.distributed),
], ids=["1proc-SIGTERM", "1proc-SIGUSR1", "2proc-SIGTERM"])
def test_a_signal_mid_run_saves_and_the_resume_equals_the_uninterrupted_run(launcher, signum, toy_yaml, cli_env, tmp_path):
    path = toy_yaml(run=RUN, config=CONFIG)
    subprocess.run([*launcher, "train", str(path), f"run.output_root={tmp_path / 'full'}", "config.sleep=0"],
                   env=cli_env, check=True, capture_output=True, timeout=180)
    full = _run_dir(tmp_path / "full")

    proc = subprocess.Popen([*launcher, "train", str(path), f"run.output_root={tmp_path / 'stopped'}"], env=cli_env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        run_dir = _run_dir(tmp_path / "stopped")
        if run_dir is not None and _logged_step(run_dir) >= 2:
            break
        time.sleep(0.02)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=60)
    stopped = _run_dir(tmp_path / "stopped")
    status = json.loads((stopped / "status.json").read_text())
    assert status["state"] == "preempted" and status["signal"] == signum.name, err
    assert 2 <= status["global_step"] < STEPS  # the signal arrived mid-run
    assert _final(stopped)["position"]["global_step"] == status["global_step"]  # saved on the signal
    if launcher is CLI:
        assert proc.returncode == 128 + signum
        (line,) = [x for x in err.splitlines() if x.strip()]
        assert line == (f"contrasuite train: {signum.name} at step {status['global_step']}: saved "
                        f"{stopped / 'checkpoints' / 'last.pt'}; continue with: contrasuite resume {stopped}")

    out = subprocess.run([*launcher, "resume", str(stopped)], env=cli_env, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    assert json.loads((stopped / "status.json").read_text())["state"] == "finished"
    a, b = _final(full), _final(stopped)
    assert a["position"] == b["position"] == {"epoch": 2, "step_in_epoch": 0, "global_step": STEPS}
    for key, value in a["modules"]["model"].items():
        assert torch.equal(b["modules"]["model"][key], value), key
    assert torch.equal(a["optimizers"]["model"]["state"][0]["momentum_buffer"],
                       b["optimizers"]["model"]["state"][0]["momentum_buffer"])
