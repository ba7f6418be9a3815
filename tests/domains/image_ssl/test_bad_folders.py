"""image_ssl on a user's own image folder that it cannot train or evaluate on: one line naming the folder
or key, exit 2, and no run folder left claiming anything but failure."""

import json
from pathlib import Path

import pytest
from PIL import Image

from contrasuite.pipelines.cli import main

CONFIG = Path(__file__).resolve().parents[3] / "configs" / "image_ssl" / "reduced_infonce.yaml"


def _folder(root: Path, classes: tuple[str, ...], per_class: int) -> Path:
    for split in ("train", "test"):
        for c, cls in enumerate(classes):
            (root / split / cls).mkdir(parents=True)
            for k in range(per_class):
                Image.new("RGB", (30 + k, 30), (40 * c, 200, 90)).save(root / split / cls / f"{k}.png")
    return root


def _train(tmp_path: Path, folder: Path, *extra: str) -> int:
    return main(["train", str(CONFIG), "run.max_steps=2", "run.progress=false", f"run.output_root={tmp_path / 'runs'}",
                 "config.data.source=folder", f"config.data.folder={folder}", "config.data.image_size=24",
                 "config.data.test_subset=0", f"config.data.cache_dir={tmp_path / 'cache'}", "config.model.width=8",
                 "config.batch_size=8", *extra])


@pytest.mark.parametrize("case, extra, needle", [
    ("one class", ("config.data.train_subset=0",), "one class ('cat'); the kNN and linear evaluation need at least 2"),
    ("subset larger than the folder", ("config.data.train_subset=500",), "config.data.train_subset must be 0 or between 2 and 12, got 500"),
    ("batch larger than the data", ("config.data.train_subset=0", "config.batch_size=64"), "config.batch_size=64 exceeds the 12 training images"),
])
def test_a_folder_it_cannot_use_is_one_line(tmp_path, capsys, case, extra, needle):
    classes = ("cat",) if case == "one class" else ("cat", "dog")
    folder = _folder(tmp_path / "pets", classes, 6 if case != "one class" else 12)
    assert _train(tmp_path, folder, *extra) == 2
    (line,) = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert line.startswith("contrasuite train: ") and needle in line
    (status,) = (tmp_path / "runs").rglob("status.json")
    assert json.loads(status.read_text())["state"] == "failed"
