"""Scale-out as clusters run it (issue 36), on one machine over loopback.

* Elastic restarts: under ``torchrun --max-restarts 2`` a worker killed with SIGKILL mid-run makes
  torchrun restart the group; with ``run.resume=auto`` the restarted workers find the run folder again
  (the newest unfinished run of the same config under ``run.output_root``) and continue it from
  ``last.pt`` by themselves: one run folder, ``finished``, bit-equal to an uninterrupted run.
* Two nodes: the multi-node recipe of docs/engine.md (two torchrun agents, ``--nnodes 2 --node_rank
  0/1``, c10d rendezvous on 127.0.0.1) and the SLURM recipe (its command with SLURM's variables set as
  ``srun`` would, no ``--node_rank``: the rendezvous assigns it) end with the parameters of one process on
  the same global batch.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from contrasuite.pipelines import trainer
from contrasuite.pipelines.bench.gpu import free_port
from contrasuite.pipelines.config import load_config

TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]
TRAIN = ["-m", "contrasuite.pipelines.cli", "train"]


def _run_dirs(root: Path) -> list[Path]:
    return [p.parent for p in root.rglob("config.yaml")]


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid``."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(stat.parent.name))
        except (OSError, ValueError, IndexError):
            continue
    return found


def _weights(run_dir: Path) -> dict:
    return torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)


@pytest.mark.slow
@pytest.mark.distributed
def test_a_worker_killed_under_max_restarts_is_continued_by_the_restarted_group(toy_yaml, cli_env, tmp_path):
    path = toy_yaml(run={"epochs": 2, "checkpoint_every_steps": 1, "deterministic": True, "resume": "auto"},
                    config={"dropout": 0.2, "sleep": 0.2})
    launch = [*TORCHRUN, "--standalone", "--nproc_per_node", "2", "--max-restarts", "2", *TRAIN, str(path)]
    subprocess.run([*launch, f"run.output_root={tmp_path / 'full'}", "config.sleep=0"], env=cli_env, check=True,
                   capture_output=True, timeout=180)
    (full,) = _run_dirs(tmp_path / "full")

    proc = subprocess.Popen([*launch, f"run.output_root={tmp_path / 'elastic'}"], env=cli_env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline, killed_at = time.time() + 120, None
    while time.time() < deadline and killed_at is None:
        dirs = _run_dirs(tmp_path / "elastic")
        last = dirs[0] / "checkpoints" / "last.pt" if dirs else None
        if last is not None and last.is_file() and _weights(dirs[0])["position"]["global_step"] >= 2:
            workers = _children(proc.pid)
            assert len(workers) == 2, workers
            killed_at = _weights(dirs[0])["position"]["global_step"]
            os.kill(max(workers), signal.SIGKILL)  # one worker, as a lost GPU or an OOM kill would
        time.sleep(0.05)
    _, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err[-3000:]
    assert killed_at is not None and killed_at < 8  # it died mid-run
    assert "lost another process of the group" in err and "a bug in contrasuite" not in err
    (elastic,) = _run_dirs(tmp_path / "elastic")  # the restarted group made no second folder
    status = json.loads((elastic / "status.json").read_text())
    assert status["state"] == "finished" and status["resumed"] is True
    a, b = _weights(full), _weights(elastic)
    assert a["position"] == b["position"] == {"epoch": 2, "step_in_epoch": 0, "global_step": 8}
    for key, value in a["modules"]["model"].items():
        assert torch.equal(b["modules"]["model"][key], value), key


NODE_OVERRIDES = ["config.augment=0", "run.max_steps=4", "config.batch_size=16", "run.progress=false"]


def _two_agents(commands: list[list[str]], env: dict) -> None:
    procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for cmd in commands]
    errors = [p.communicate(timeout=240)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], "\n".join(e[-2000:] for e in errors)


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.parametrize("recipe", ["multi-node", "slurm"])
def test_two_nodes_on_one_machine_end_with_the_one_process_parameters(recipe, toy_yaml, cli_env, tmp_path):
    path = toy_yaml()
    one = trainer.train(load_config(path, [*NODE_OVERRIDES, f"run.output_root={tmp_path / 'one'}"]))
    port, job = free_port(), "4242"
    args = [*TRAIN, str(path), *NODE_OVERRIDES, f"run.output_root={tmp_path / 'nodes'}"]
    if recipe == "multi-node":  # docs/engine.md, "Several nodes": the same command on each node, its NODE_RANK
        commands = [[*TORCHRUN, "--nnodes", "2", "--node_rank", str(rank), "--nproc_per_node", "1", "--rdzv_backend",
                     "c10d", "--rdzv_endpoint", f"127.0.0.1:{port}", "--rdzv_id", job, *args] for rank in (0, 1)]
        env = cli_env
    else:  # the SLURM recipe's torchrun line, its variables as srun sets them on each node
        env = dict(cli_env, SLURM_NNODES="2", SLURM_JOB_ID=job, MASTER="127.0.0.1")
        line = ('torchrun --nnodes "$SLURM_NNODES" --nproc_per_node 1 --rdzv_backend c10d '
                f'--rdzv_endpoint "$MASTER:{port}" --rdzv_id "$SLURM_JOB_ID" ')
        shell = line.replace("torchrun", f"{sys.executable} -m torch.distributed.run") + " ".join(args)
        commands = [["bash", "-c", shell]] * 2
    _two_agents(commands, env)
    (nodes,) = _run_dirs(tmp_path / "nodes")
    assert '"world_size": 2' in (nodes / "environment.json").read_text()
    a, b = _weights(one), _weights(nodes)
    assert a["position"] == b["position"] and a["position"]["global_step"] == 4
    for key, value in a["modules"]["model"].items():
        torch.testing.assert_close(b["modules"]["model"][key], value, rtol=1e-5, atol=1e-6)
