"""Checkpoint helpers: RNG round trip through weights_only loading, atomic writes, clear mismatches."""

import random

import numpy as np
import pytest
import torch
from torch import nn

from contrasuite.pipelines import checkpoint


def _state(**extra):
    """The smallest dict that passes for an engine checkpoint, plus ``extra``."""
    return {key: {} for key in checkpoint.REQUIRED_KEYS} | extra


def test_rng_states_round_trip_through_weights_only(tmp_path):
    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    np.random.randn()  # leaves a cached gaussian in numpy's state
    checkpoint.atomic_save(_state(rng=checkpoint.rng_state()), tmp_path / "c.pt")
    expected = (random.random(), np.random.randn(3).tolist(), torch.rand(3))
    checkpoint.set_rng_state(checkpoint.load(tmp_path / "c.pt")["rng"])  # load() uses weights_only=True
    got = (random.random(), np.random.randn(3).tolist(), torch.rand(3))
    assert got[0] == expected[0] and got[1] == expected[1] and torch.equal(got[2], expected[2])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.pt", "c.pt.json"]  # no temporary file left


def test_records_are_written_without_crc32_and_the_global_option_is_left_alone(tmp_path):
    import zipfile

    checkpoint.atomic_save(_state(v=torch.arange(1000.0)), tmp_path / "c.pt")
    assert torch.serialization.get_crc32_options()  # patched for the save only
    stored = [info.CRC for info in zipfile.ZipFile(tmp_path / "c.pt").infolist() if info.filename.endswith("/0")]
    assert stored == [0]  # the tensor's record: no CRC-32 (the manifest's SHA-256 covers the file)
    assert torch.equal(checkpoint.load(tmp_path / "c.pt")["v"], torch.arange(1000.0))


def test_atomic_save_keeps_the_old_file_when_writing_fails(tmp_path):
    path = tmp_path / "last.pt"
    checkpoint.atomic_save(_state(v=torch.ones(2)), path)
    with pytest.raises(Exception):
        checkpoint.atomic_save(_state(bad=lambda: 0), path)  # not picklable
    assert torch.equal(checkpoint.load(path)["v"], torch.ones(2))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.pt", "last.pt.json"]


def test_mismatched_checkpoint_names_the_part(tmp_path):
    model = nn.Linear(2, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    state = {"modules": {"model": model.state_dict()}, "optimizers": {"model": opt.state_dict()}, "schedulers": {}}
    with pytest.raises(checkpoint.CheckpointError, match=r"modules \['model'\] in the checkpoint, the task has \['encoder'\]"):
        checkpoint.restore(state, tmp_path / "x.pt", modules={"encoder": model}, optimizers={"model": opt},
                           schedulers={}, scaler=None, task=None)
    with pytest.raises(checkpoint.CheckpointError, match=r"modules .model. does not fit: 1 key of another shape"):
        checkpoint.restore(state, tmp_path / "x.pt", modules={"model": nn.Linear(3, 2)}, optimizers={"model": opt},
                           schedulers={}, scaler=None, task=None)


def test_missing_checkpoint_is_named(tmp_path):
    with pytest.raises(checkpoint.CheckpointError, match="checkpoint not found: .*none.pt"):
        checkpoint.load(tmp_path / "none.pt")


def test_truncated_or_altered_checkpoint_is_refused_by_its_manifest(tmp_path):
    path = tmp_path / "last.pt"
    checkpoint.atomic_save(_state(v=torch.randn(1000)), path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(checkpoint.CheckpointError, match=r"last.pt is incomplete or altered: \d+ bytes.*records \d+ bytes"):
        checkpoint.load(path)
    path.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))  # same size, one bit flipped
    with pytest.raises(checkpoint.CheckpointError, match="incomplete or altered"):
        checkpoint.load(path)


def test_a_kill_between_rename_and_manifest_leaves_a_loadable_pair(tmp_path):
    path = tmp_path / "last.pt"
    checkpoint.atomic_save(_state(v=torch.zeros(3)), path)
    old = checkpoint.file_digest(path)
    checkpoint.atomic_save(_state(v=torch.ones(3)), path)
    new = checkpoint.file_digest(path)
    # the manifest as it stands between the two writes of atomic_save: both files accepted
    checkpoint._write_manifest(path, [new, old])
    assert torch.equal(checkpoint.load(path)["v"], torch.ones(3))


def test_a_torch_file_that_is_not_an_engine_checkpoint_is_named(tmp_path):
    torch.save({"weights": torch.ones(2)}, tmp_path / "other.pt")
    with pytest.raises(checkpoint.CheckpointError, match=r"other.pt is a torch file but not a contrasuite checkpoint \(no 'modules'"):
        checkpoint.load(tmp_path / "other.pt")
