"""Two gloo processes under torchrun train like one process on the same global batch."""

import subprocess
import sys
import weakref

import pytest
import torch

from contrasuite.pipelines import distributed, trainer
from contrasuite.pipelines.bench.gpu import free_port
from contrasuite.pipelines.config import load_config

OVERRIDES = ["config.augment=0", "run.max_steps=4", "config.batch_size=16"]


@pytest.mark.slow
@pytest.mark.distributed
def test_two_process_gloo_matches_one_process(toy_yaml, cli_env, tmp_path):
    path = toy_yaml(run={"health_every_steps": 2})
    one = trainer.train(load_config(path, [*OVERRIDES, f"run.output_root={tmp_path / 'one'}"]))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "-m", "contrasuite.pipelines.cli", "train", str(path), *OVERRIDES, f"run.output_root={tmp_path / 'two'}"]
    out = subprocess.run(cmd, env=cli_env, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    (two,) = [p.parent for p in (tmp_path / "two").rglob("config.yaml")]
    a = torch.load(one / "checkpoints" / "last.pt", weights_only=True)
    b = torch.load(two / "checkpoints" / "last.pt", weights_only=True)
    assert a["position"] == b["position"] and a["position"]["global_step"] == 4
    for key, value in a["modules"]["model"].items():
        torch.testing.assert_close(b["modules"]["model"][key], value, rtol=1e-5, atol=1e-6)
    # the tolerance is tight enough to see a different global batch (8 instead of 16)
    small = trainer.train(load_config(path, [*OVERRIDES[:-1], "config.batch_size=8", f"run.output_root={tmp_path / 'b8'}"]))
    c = torch.load(small / "checkpoints" / "last.pt", weights_only=True)["modules"]["model"]
    assert any(not torch.allclose(c[k], v, rtol=1e-5, atol=1e-6) for k, v in a["modules"]["model"].items())
    assert '"world_size": 2' in (two / "environment.json").read_text()


@pytest.mark.slow
@pytest.mark.distributed
def test_rank_zero_evaluates_alone_and_sync_batchnorm_needs_cuda(toy_yaml, cli_env, tmp_path):
    """Validation, health and the test split run on rank 0 only, through a DDP wrapper with BatchNorm
    buffers (a forward that broadcast them would wait forever for the other rank)."""
    path = toy_yaml(run={"health_every_steps": 2, "eval_every_epochs": 1, "epochs": 2, "dist_timeout_minutes": 1},
                    config={"batchnorm": True, "record_evals": True})
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                "-m", "contrasuite.pipelines.cli"]
    out = subprocess.run([*torchrun, "train", str(path), f"run.output_root={tmp_path / 'two'}"], env=cli_env,
                         capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    (run,) = [p.parent for p in (tmp_path / "two").rglob("config.yaml")]
    out = subprocess.run([*torchrun, "eval", str(run)], env=cli_env, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    assert (run / "evals_rank0.txt").read_text().split() == ["val", "val", "test"]
    assert not (run / "evals_rank1.txt").exists()
    assert "health/" in (run / "metrics.csv").read_text()
    out = subprocess.run([*torchrun, "train", str(path), "run.sync_batchnorm=true", f"run.output_root={tmp_path / 'sbn'}"],
                         env=cli_env, capture_output=True, text=True, timeout=180)
    assert out.returncode != 0 and "run.sync_batchnorm=true needs CUDA devices" in out.stderr


@pytest.mark.slow
@pytest.mark.distributed
def test_ranks_that_diverge_fail_the_run(toy_yaml, cli_env, tmp_path):
    """A parameter trained on each rank's own loss (not wrapped, not averaged) fails at the first checkpoint."""
    path = toy_yaml(config={"unsynced": True})
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "-m", "contrasuite.pipelines.cli", "train", str(path), "run.max_steps=2", f"run.output_root={tmp_path}"]
    out = subprocess.run(cmd, env=cli_env, capture_output=True, text=True, timeout=180)
    assert out.returncode != 0 and "the ranks' parameters differ in ['scale']" in out.stderr, out.stderr[-2000:]


def test_shutdown_frees_a_ddp_module_held_in_a_reference_cycle_before_leaving_the_group():
    """A trainer outlives its command in reference cycles; its DDP wrappers hold the process group, which
    must not be left to interpreter shutdown (gloo aborted the process there now and then)."""
    torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    holder = {"module": torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 2))}
    holder["self"] = holder  # the cycle
    alive = weakref.ref(holder["module"])
    del holder
    assert alive() is not None
    distributed.shutdown()
    assert alive() is None and not torch.distributed.is_initialized()
