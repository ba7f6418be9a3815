"""MoCo's key encoder and queue-only negatives, and Feature Transformation run the official way."""

import csv
from pathlib import Path

import pytest
import torch

from contrasuite.core.negatives.paired import paired_negatives
from contrasuite.domains.image_ssl.task import ModelConfig, ObjectiveConfig
from contrasuite.pipelines import trainer
from contrasuite.pipelines.config import load_config

from .test_configs_smoke import CONFIG_DIR, DATA, needs_data
from .test_task import Step, make_task

MOCO = dict(
    model=ModelConfig(encoder="small_conv", width=4, proj_hidden=16, proj_dim=8, key_momentum=0.9),
    objective=ObjectiveConfig(views="paired", terms=[{"name": "infonce", "temperature": 0.2, "similarity": "dot"}]),
)


def test_key_encoder_moves_by_ema_and_gets_no_gradient(tiny_cifar):
    task = make_task(tiny_cifar, negatives={"name": "queue", "size": 16, "in_batch": False}, **MOCO)
    before = [p.detach().clone() for p in task.key_model.parameters()]
    batch = next(iter(task.batches(0)))
    task.train_step(batch, Step(task))
    assert all(p.grad is None for p in task.key_model.parameters())
    for old, key, online in zip(before, task.key_model.parameters(), task.model.parameters()):
        torch.testing.assert_close(key, 0.9 * old + 0.1 * online.detach())
    assert "key_model" in task.modules()  # checkpointed, so resume is exact
    assert task.negatives.source.queue.negatives().shape[0] == 16  # both views' keys were enqueued


def test_the_cpu_default_lays_online_and_key_encoders_out_channels_last(tiny_cifar):
    """``run.memory_format: auto`` on the CPU (measured 1.20x faster against lightly's step, bench_pipelines.md):
    the online network and the key encoder copied from it are channels-last, and stay so through a step."""
    from contrasuite.domains.image_ssl.task import DataConfig, EvalConfig, ImageSSLConfig, ImageSSLTask
    from contrasuite.pipelines.standalone import setup_task

    cfg = ImageSSLConfig(batch_size=8, data=DataConfig(val_fraction=0.25), eval=EvalConfig(linear_epochs=2, knn_k=5),
                         negatives={"name": "queue", "size": 16, "in_batch": False}, **MOCO)
    for setting, layout in (("auto", torch.channels_last), ("contiguous", torch.contiguous_format)):
        task = setup_task(ImageSSLTask(), cfg, device=torch.device("cpu"), data_root=tiny_cifar, run_dir=tiny_cifar,
                          memory_format=setting)
        task.train_step(next(iter(task.batches(0))), Step(task))
        for model in (task.model, task.key_model):
            convs = [p for p in model.parameters() if p.dim() == 4]
            assert convs and all(p.is_contiguous(memory_format=layout) for p in convs), setting


def test_extrapolation_with_a_shared_encoder_is_refused(tiny_cifar):
    shared = dict(MOCO, model=ModelConfig(encoder="small_conv", width=4, proj_hidden=16, proj_dim=8))
    with pytest.raises(ValueError, match="config.model.key_momentum"):
        make_task(tiny_cifar, negatives={"name": "feature_transformation", "size": 16}, **shared)
    make_task(tiny_cifar, negatives={"name": "feature_transformation", "size": 16, "extrapolate": False}, **shared)
    with pytest.raises(ValueError, match="no negatives"):
        paired_negatives({"name": "feature_transformation", "size": 0, "in_batch": False}, dim=4)


def test_key_encoder_needs_the_paired_form(tiny_cifar):
    with pytest.raises(ValueError, match="views=paired"):
        make_task(tiny_cifar, model=MOCO["model"])


def _effective_ranks(run_dir: Path) -> list[float]:
    with (run_dir / "metrics.csv").open() as f:
        return [float(r["value"]) for r in csv.DictReader(f) if r["name"] == "health/effective_rank"]


@pytest.mark.slow
def test_feature_transformation_keeps_the_representation_spread(tmp_path):
    """The shipped FT config on CIFAR-10: after 40 steps the projections' effective rank stays above 6.

    The former form (shared encoder, in-batch negatives) fell to about 2.3 in this run and stayed there.
    """
    needs_data()
    torch.set_num_threads(1)
    overrides = [
        "run.max_steps=40", "run.health_every_steps=20", "run.log_every_steps=20", "run.progress=false",
        "config.batch_size=128", "config.data.train_subset=2000", "config.data.test_subset=100",
        "config.model.width=16", "config.eval.linear=false", f"run.output_root={tmp_path}",
    ]
    run_dir = trainer.train(load_config(CONFIG_DIR / "reduced_infonce_ft.yaml", overrides, data_root=str(DATA)))
    ranks = _effective_ranks(run_dir)
    assert len(ranks) == 2 and min(ranks) > 6.0, ranks
