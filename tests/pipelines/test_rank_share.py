"""No rank waits alone: every rank gets the same number of batches, and domains that cannot run on
several processes refuse in one line."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from contrasuite.domains.task import rank_share

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("n, world", [(3, 2), (7, 4), (4, 2), (1, 2), (5, 1)])
def test_rank_share_is_equal_and_disjoint(n, world):
    shares = [rank_share(list(range(n)), rank, world) for rank in range(world)]
    assert len({len(s) for s in shares}) == 1  # the same count on every rank
    flat = sorted(x for s in shares for x in s)
    assert flat == list(range(n - n % world)) and len(flat) == len(set(flat))


def _torchrun(args, env, cwd, timeout=240):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "-m", "contrasuite.pipelines.cli", *map(str, args)]
    return subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
@pytest.mark.distributed
def test_metric_learning_with_an_odd_number_of_batches_does_not_hang(cli_env, tmp_path):
    """3 batches on 2 ranks: rank 0 took two steps per epoch and rank 1 one, so their all-gathers paired
    batches of different steps (or, as reported, hung). Now each takes one: 2 usable batches, 1 per rank."""
    from tests.domains.metric_learning.conftest import make_tiny_cub

    data = make_tiny_cub(tmp_path / "data")
    config = ROOT / "configs" / "metric_learning" / "cub200_multi_similarity.yaml"
    out = _torchrun(["train", config, f"--data-root={data}", f"run.output_root={tmp_path / 'runs'}", "run.epochs=2",
                     "run.progress=false", "config.model.pretrained=false", "config.data.image_size=32",
                     "config.data.val_fraction=0.25", "config.sampler.m_per_class=3", "config.sampler.batch_size=3",
                     "config.eval.batch_size=16"], cli_env, tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    (status,) = (tmp_path / "runs").rglob("status.json")
    saved = json.loads(status.read_text())
    assert saved["state"] == "finished" and saved["global_step"] == 2  # 2 epochs x 1 step on every rank


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.parametrize("config, what", [("graph/reduced/meow_acm", "graph trains full-batch in one process, not 2"),
                                          ("translation/reduced_cut_emoji", "translation runs in one process, not 2")])
def test_single_process_domains_refuse_several(cli_env, tmp_path, config, what):
    out = _torchrun(["train", config, f"run.output_root={tmp_path}"], cli_env, tmp_path, timeout=180)
    lines = [line for line in out.stderr.splitlines() if line.startswith("contrasuite train:")]
    assert out.returncode != 0 and lines and what in lines[0], out.stderr[-2000:]


@pytest.mark.parametrize("preload", ["true", "false"])  # images in memory, or read by the DataLoader
def test_metric_learning_gives_every_rank_as_many_batches(tmp_path, preload):
    """Each rank's task, built as rank r of 2, yields the same number of batches (3 batches in one process)."""
    import torch

    from contrasuite.domains.task import TaskContext
    from contrasuite.pipelines.config import load_config
    from tests.domains.metric_learning.conftest import make_tiny_cub

    data = make_tiny_cub(tmp_path / "data")
    loaded = load_config(ROOT / "configs" / "metric_learning" / "cub200_multi_similarity.yaml",
                         ["config.model.pretrained=false", "config.data.image_size=32", "config.data.val_fraction=0.25",
                          "config.sampler.m_per_class=3", "config.sampler.batch_size=3", f"config.data.preload={preload}"],
                         data_root=str(data))

    def count(rank: int, world: int) -> int:
        task = loaded.task_class()
        task.setup(TaskContext(config=loaded.config, device=torch.device("cpu"), precision="fp32",
                               run_dir=tmp_path, data_root=data, seed=0, rank=rank, world_size=world))
        return sum(1 for _ in task.batches(0))

    assert count(0, 1) == 3
    assert count(0, 2) == count(1, 2) == 1
