"""The global batch rule: ``batch_size`` is the global batch in every domain, each rank trains on its
contiguous shard, every rank gets as many batches (none waits alone), the ranks' shards are the
one-process batch, and domains that cannot run on several processes refuse in one line."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from contrasuite.core.distributed import batch_shard, rank_part
from contrasuite.core.task.protocol import TaskContext
from contrasuite.pipelines.config import load_config

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("n, world", [(8, 2), (7, 2), (12, 4), (1, 2), (5, 1)])
def test_batch_shard_is_equal_contiguous_and_in_rank_order(n, world):
    shards = [list(range(n))[batch_shard(n, rank, world)] for rank in range(world)]
    assert len({len(s) for s in shards}) == 1  # the same size on every rank
    assert sum(shards, []) == list(range(n - n % world))  # rank order gives the one-process batch


@pytest.mark.parametrize("n, world", [(8, 2), (7, 2), (13, 4), (1, 2), (0, 3), (5, 1)])
def test_rank_part_covers_every_item_in_rank_order(n, world):
    parts = [list(range(n))[rank_part(n, rank, world)] for rank in range(world)]
    assert sum(parts, []) == list(range(n)) and max(map(len, parts)) - min(map(len, parts)) <= 1


def _tasks(loaded, data: Path, run_dir: Path, world: int) -> list:
    tasks = []
    for rank in range(world):
        torch.manual_seed(0)
        task = loaded.task_class()
        task.setup(TaskContext(config=loaded.config, device=torch.device("cpu"), precision="fp32", run_dir=run_dir,
                               data_root=data, seed=0, rank=rank, world_size=world))
        tasks.append(task)
    return tasks


def _torchrun(args, env, cwd, timeout=240):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "-m", "contrasuite.pipelines.cli", *map(str, args)]
    return subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)


CUB = ["config.model.pretrained=false", "config.data.image_size=32", "config.data.val_fraction=0.25",
       "config.sampler.m_per_class=3", "config.batch_size=6"]


@pytest.mark.parametrize("preload", ["true", "false"])  # images in memory, or read by the DataLoader
def test_metric_learning_shards_are_the_one_process_batch(tmp_path, preload):
    """Two ranks' shards (augmented, labels) concatenate to the one-process batch, step by step."""
    from tests.domains.metric_learning.conftest import make_tiny_cub

    data = make_tiny_cub(tmp_path / "data")
    loaded = load_config(ROOT / "configs" / "metric_learning" / "cub200_multi_similarity.yaml",
                         [*CUB, f"config.data.preload={preload}"], data_root=str(data))
    (one,), two = _tasks(loaded, data, tmp_path, 1), _tasks(loaded, data, tmp_path, 2)
    for epoch in range(2):
        steps = [list(task.batches(epoch)) for task in (one, *two)]
        assert len({len(s) for s in steps}) == 1 and steps[0]  # as many steps on every rank
        for (x, y), (x0, y0), (x1, y1) in zip(*steps):
            assert len(y0) == len(y1) == len(y) // 2 and len(set(y0.tolist()) & set(y1.tolist())) == 0
            torch.testing.assert_close(torch.cat([x0, x1]), x)
            assert torch.equal(torch.cat([y0, y1]), y)


def test_metric_learning_shards_must_hold_whole_classes(tmp_path):
    from contrasuite.core.task.errors import SetupError
    from tests.domains.metric_learning.conftest import make_tiny_cub

    data = make_tiny_cub(tmp_path / "data")
    loaded = load_config(ROOT / "configs" / "metric_learning" / "cub200_multi_similarity.yaml",
                         [*CUB[:-1], "config.batch_size=3"], data_root=str(data))
    with pytest.raises(SetupError, match=r"config.batch_size=3 must be a multiple of 6"):
        _tasks(loaded, data, tmp_path, 2)


def test_super_resolution_shards_are_the_one_process_batch(tmp_path):
    data = Path(os.environ["CONTRASUITE_DATA"])
    if not (data / "sr").exists():
        pytest.skip(f"SR data not found under {data}/sr")
    loaded = load_config(ROOT / "configs" / "super_resolution" / "reduced_x2_l1.yaml",
                         ["config.batch_size=4", "config.data.steps_per_epoch=2", "config.data.max_train_images=20",
                          "config.model.n_resblocks=1", "config.model.n_feats=8", "config.test_sets=[Set5]"],
                         data_root=str(data))
    (one,), two = _tasks(loaded, data, tmp_path, 1), _tasks(loaded, data, tmp_path, 2)
    for (lr, hr), (lr0, hr0), (lr1, hr1) in zip(one.batches(0), two[0].batches(0), two[1].batches(0)):
        assert torch.equal(torch.cat([lr0, lr1]), lr) and torch.equal(torch.cat([hr0, hr1]), hr)


@pytest.mark.slow
@pytest.mark.distributed
def test_metric_learning_trains_on_two_processes(cli_env, tmp_path):
    """A global batch of 6 (two classes of 3) on 2 ranks: one class per rank, one step per epoch on each."""
    from tests.domains.metric_learning.conftest import make_tiny_cub

    data = make_tiny_cub(tmp_path / "data")
    config = ROOT / "configs" / "metric_learning" / "cub200_multi_similarity.yaml"
    out = _torchrun(["train", config, f"--data-root={data}", f"run.output_root={tmp_path / 'runs'}", "run.epochs=2",
                     "run.progress=false", *CUB, "config.eval.batch_size=16"], cli_env, tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    (status,) = (tmp_path / "runs").rglob("status.json")
    saved = json.loads(status.read_text())
    assert saved["state"] == "finished" and saved["global_step"] == 2  # 2 epochs x 1 step on every rank


@pytest.mark.slow
@pytest.mark.distributed
def test_graph_refuses_several_processes(cli_env, tmp_path):
    out = _torchrun(["train", "graph/reduced/meow_acm", f"run.output_root={tmp_path}"], cli_env, tmp_path, timeout=180)
    lines = [line for line in out.stderr.splitlines() if line.startswith("contrasuite train:")]
    assert out.returncode != 0 and lines and "graph trains full-batch in one process, not 2" in lines[0], out.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.distributed
def test_translation_trains_data_parallel_on_two_processes(cli_env, tmp_path):
    """CUT on 2 gloo ranks: a global batch of 2, one image per rank; the engine's check that the ranks'
    G, D and head weights stay equal passes at every checkpoint, and the run finishes."""
    out = _torchrun(["train", "translation/reduced_cut_emoji", f"run.output_root={tmp_path}", "run.max_steps=3",
                     "run.checkpoint_every_steps=1", "run.progress=false", "config.batch_size=2",
                     "config.data.max_train_images=8", "config.data.val_images=4", "config.eval.max_images=4",
                     "config.eval.kid_subsets=2"], cli_env, tmp_path, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    (status,) = tmp_path.rglob("status.json")
    assert json.loads(status.read_text())["state"] == "finished"
