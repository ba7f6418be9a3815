"""Checkpoint helpers: RNG round trip through weights_only loading, atomic writes, clear mismatches."""

import random

import numpy as np
import pytest
import torch
from torch import nn

from contrasuite.pipelines import checkpoint


def test_rng_states_round_trip_through_weights_only(tmp_path):
    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    np.random.randn()  # leaves a cached gaussian in numpy's state
    checkpoint.atomic_save({"rng": checkpoint.rng_state()}, tmp_path / "c.pt")
    expected = (random.random(), np.random.randn(3).tolist(), torch.rand(3))
    checkpoint.set_rng_state(checkpoint.load(tmp_path / "c.pt")["rng"])  # load() uses weights_only=True
    got = (random.random(), np.random.randn(3).tolist(), torch.rand(3))
    assert got[0] == expected[0] and got[1] == expected[1] and torch.equal(got[2], expected[2])
    assert [p.name for p in tmp_path.iterdir()] == ["c.pt"]  # no temporary file left


def test_atomic_save_keeps_the_old_file_when_writing_fails(tmp_path):
    path = tmp_path / "last.pt"
    checkpoint.atomic_save({"v": torch.ones(2)}, path)
    with pytest.raises(Exception):
        checkpoint.atomic_save({"bad": lambda: 0}, path)  # not picklable
    assert torch.equal(checkpoint.load(path)["v"], torch.ones(2))
    assert [p.name for p in tmp_path.iterdir()] == ["last.pt"]


def test_mismatched_checkpoint_names_the_part(tmp_path):
    model = nn.Linear(2, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    state = {"modules": {"model": model.state_dict()}, "optimizers": {"model": opt.state_dict()}, "schedulers": {}}
    with pytest.raises(checkpoint.CheckpointError, match=r"modules \['model'\] in the checkpoint, the task has \['encoder'\]"):
        checkpoint.restore(state, tmp_path / "x.pt", modules={"encoder": model}, optimizers={"model": opt},
                           schedulers={}, scaler=None, task=None)
    with pytest.raises(checkpoint.CheckpointError, match=r"(?s)modules 'model'.*size mismatch"):
        checkpoint.restore(state, tmp_path / "x.pt", modules={"model": nn.Linear(3, 2)}, optimizers={"model": opt},
                           schedulers={}, scaler=None, task=None)


def test_missing_checkpoint_is_named(tmp_path):
    with pytest.raises(checkpoint.CheckpointError, match="checkpoint not found: .*none.pt"):
        checkpoint.load(tmp_path / "none.pt")
