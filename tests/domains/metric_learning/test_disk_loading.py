"""On-disk training images through DataLoader workers: the same batches for any worker count, exact resume."""

from pathlib import Path

import numpy as np
import pytest
import torch

from contrasuite.domains.image_loading import (EpochBatches, OnDiskImages, albumentations_transform, epoch_batches,
                                               image_loader, sample_seed)
from contrasuite.pipelines import trainer
from contrasuite.pipelines.checkpoint import load
from contrasuite.pipelines.config import load_config

from tests.domains.metric_learning.conftest import write_image

CONFIG = Path(__file__).resolve().parents[3] / "configs" / "metric_learning" / "cub200_multi_similarity.yaml"


def _dataset(tmp_path, n=10):
    import albumentations as A

    paths = [tmp_path / f"img_{i}.png" for i in range(n)]
    for i, p in enumerate(paths):
        write_image(p, i, size=20)
    transform = albumentations_transform(A.RandomResizedCrop(size=(12, 12), scale=(0.5, 1.0)), A.HorizontalFlip())
    return OnDiskImages(paths, list(range(n)), transform, seed=3)


def _all(loader, epoch):
    return [(x.clone(), y.clone()) for x, y in epoch_batches(loader, epoch)]


def test_batches_do_not_depend_on_the_number_of_workers(tmp_path):
    dataset = _dataset(tmp_path)
    order = lambda epoch: [list(np.random.default_rng(epoch).permutation(10)[k:k + 3]) for k in (0, 3, 6)]  # noqa: E731
    serial = image_loader(dataset, EpochBatches(order), 0, torch.device("cpu"))
    parallel = image_loader(dataset, EpochBatches(order), 2, torch.device("cpu"))
    for epoch in (0, 1):  # the persistent workers see the second epoch's batches too
        a, b = _all(serial, epoch), _all(parallel, epoch)
        assert len(a) == len(b) == 3
        assert all(torch.equal(x1, x2) and torch.equal(y1, y2) for (x1, y1), (x2, y2) in zip(a, b))
        assert a[0][0].shape == (3, 3, 12, 12) and a[0][0].dtype == torch.uint8
    assert not torch.equal(_all(serial, 0)[0][0], _all(serial, 1)[0][0]) or order(0) != order(1)


def test_a_sample_is_the_same_wherever_the_epoch_resumes(tmp_path):
    dataset = _dataset(tmp_path)
    full = [dataset[(2, position, index)][0] for position, index in enumerate([4, 1, 7])]
    assert torch.equal(dataset[(2, 2, 7)][0], full[2])  # asked alone, as after a resume
    assert not torch.equal(dataset[(3, 2, 7)][0], full[2])  # another epoch draws another crop
    assert sample_seed(0, 1, 2) != sample_seed(0, 2, 1)


def _run(tiny_cub, tmp_path, workers, *extra):
    overrides = ["run.epochs=3", "run.progress=false", "run.deterministic=true", f"run.output_root={tmp_path}",
                 "config.data.preload=false", "config.data.augment=true", f"config.data.workers={workers}",
                 "config.data.image_size=32", "config.sampler.m_per_class=2", "config.batch_size=4",
                 "config.eval.batch_size=16", "config.model.pretrained=false", *extra]
    return trainer.train(load_config(CONFIG, overrides, data_root=str(tiny_cub)))


def _weights(run_dir):
    return load(run_dir / "checkpoints" / "last.pt")["modules"]["model"]


@pytest.mark.slow
def test_training_from_disk_is_exact_with_workers_and_on_resume(tiny_cub, tmp_path):
    serial = _weights(_run(tiny_cub, tmp_path / "w0", 0))
    parallel = _weights(_run(tiny_cub, tmp_path / "w2", 2))
    assert all(torch.equal(serial[k], parallel[k]) for k in serial)
    stopped = _run(tiny_cub, tmp_path / "stop", 2, "run.max_steps=3", "run.checkpoint_every_steps=1")
    trainer.resume(stopped, ["run.max_steps=null"])
    resumed = _weights(stopped)
    assert all(torch.equal(serial[k], resumed[k]) for k in serial)
