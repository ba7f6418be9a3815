"""A third emoji style works by config in every domain that reads emoji (no renaming of files).

The test packs a copy of the Twemoji archive as ``emoji-openmoji-64.tar.gz`` in a fresh data root and
names it in each domain's style key; a style whose archive is absent fails naming the file.
"""

import os
import shutil
from pathlib import Path

import pytest

DATA = Path(os.environ["CONTRASUITE_DATA"])
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    if not (DATA / "emoji" / "emoji-twitter-64.tar.gz").is_file():
        pytest.skip("needs the emoji archives under $CONTRASUITE_DATA/emoji")
    out = tmp_path_factory.mktemp("data")
    shutil.copytree(DATA / "emoji", out / "emoji")
    shutil.copy(DATA / "emoji" / "emoji-twitter-64.tar.gz", out / "emoji" / "emoji-openmoji-64.tar.gz")
    return out


def test_metric_learning_styles(root, tmp_path):
    from contrasuite.domains.metric_learning.data import load_splits

    splits = load_splits("emoji", root, cache=tmp_path, val_fraction=0.2, split_seed=0, styles=["openmoji", "google"])
    folders = {p.parent.name.rsplit("-", 1)[0] for p in splits.train.paths}
    assert folders == {"openmoji-64", "google-64"}
    with pytest.raises(FileNotFoundError, match="emoji-fluent-64.tar.gz"):
        load_splits("emoji", root, cache=tmp_path, val_fraction=0.2, split_seed=0, styles=["fluent", "google"])


def test_image_text_style(root):
    from contrasuite.domains.image_text.data import load_emoji, read_style

    assert len(read_style(root, "openmoji")) == len(read_style(root, "twitter")) > 1000
    assert len(load_emoji(root, "openmoji", limit=5).captions) > 0
    with pytest.raises(FileNotFoundError, match=r"style 'fluent' not found: .*emoji-fluent-64.tar.gz \(config.data.style"):
        read_style(root, "fluent")


def test_translation_styles(root, tmp_path):
    from contrasuite.pipelines import trainer
    from contrasuite.pipelines.config import load_config
    from tests.domains.translation.conftest import TINY

    overrides = [*TINY, "run.max_steps=1", f"run.output_root={tmp_path}", f"config.data.cache_dir={tmp_path / 'cache'}",
                 "config.data.target_style=openmoji"]
    run_dir = trainer.train(load_config(ROOT / "configs" / "translation" / "reduced_cut_emoji.yaml", overrides,
                                        data_root=str(root)))
    assert (run_dir / "checkpoints" / "last.pt").is_file()
    assert sorted(p.name.rsplit("-", 1)[0] for p in (tmp_path / "cache" / "emoji").iterdir()) == ["openmoji-64", "twitter-64"]
