"""Large translation folders are read from disk by DataLoader workers: same weights for 0 and 2 workers, exact resume."""

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from contrasuite.domains.translation.data import DISK_FOLDER
from contrasuite.pipelines import trainer
from contrasuite.pipelines.checkpoint import load
from contrasuite.pipelines.config import load_config
from tests.domains.translation.conftest import TINY

CONFIG = Path(__file__).resolve().parents[3] / "configs" / "translation" / "reduced_cut_emoji.yaml"


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("h2z")
    rng = np.random.default_rng(0)
    for name in ("trainA", "trainB"):
        (root / name).mkdir()
        for i in range(DISK_FOLDER + 6):
            Image.fromarray(rng.integers(0, 255, (40, 48, 3), dtype=np.uint8)).save(root / name / f"{i:03d}.png")
    return root


def _run(folders, tmp_path, workers, *extra):
    overrides = [*TINY, "run.deterministic=true", "run.epochs=2", f"run.output_root={tmp_path}", "config.data.kind=folders",
                 f"config.data.path={folders}", "config.data.max_train_images=null", "config.data.steps_per_epoch=3",
                 f"config.data.workers={workers}", *extra]
    return trainer.train(load_config(CONFIG, overrides))


def _generator(run_dir):
    return load(run_dir / "checkpoints" / "last.pt")["modules"]["generator"]


@pytest.mark.slow
def test_disk_folders_give_the_same_run_for_any_workers_and_on_resume(folders, tmp_path):
    serial, parallel = (_generator(_run(folders, tmp_path / f"w{w}", w)) for w in (0, 2))
    assert all(torch.equal(serial[k], parallel[k]) for k in serial)
    stopped = _run(folders, tmp_path / "stop", 2, "run.max_steps=4", "run.checkpoint_every_steps=1")
    trainer.resume(stopped, ["run.max_steps=null"])
    resumed = _generator(stopped)
    assert all(torch.equal(serial[k], resumed[k]) for k in serial)


def test_an_image_smaller_than_the_crop_is_refused_before_training(tmp_path, capsys):
    """One 20 x 48 image among 40 x 48 ones: one line at setup naming it (it used to fail mid-training)."""
    from contrasuite.pipelines.cli import main

    root = tmp_path / "pairs"
    for name in ("trainA", "trainB"):
        (root / name).mkdir(parents=True)
        for i in range(3):
            Image.new("RGB", (48, 40), (10 * i, 90, 200)).save(root / name / f"{i}.png")
    small = root / "trainB" / "small.png"
    Image.new("RGB", (48, 20), (0, 0, 0)).save(small)
    code = main(["train", str(CONFIG), *TINY, f"run.output_root={tmp_path / 'runs'}", "config.data.kind=folders",
                 f"config.data.path={root}", "config.data.max_train_images=null"])
    assert code == 2
    (line,) = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert f"config.data.crop_size=32 is larger than {small} (20x48 after" in line
    assert not list((tmp_path / "runs").rglob("*.pt"))
