from pathlib import Path

import pytest

TINY = [  # a few engine steps of any translation config at tiny size
    "run.epochs=1", "run.progress=false", "run.log_every_steps=1", "run.health_every_steps=1",
    "config.data.steps_per_epoch=2", "config.batch_size=1", "config.data.crop_size=32", "config.data.max_side=96",
    "config.data.max_train_images=4", "config.data.test_images=8", "config.data.val_images=6", "config.data.eval_crops=2",
    "config.generator.ngf=4", "config.generator.n_blocks=2", "config.nce.layers=[0,4,8,12,13]", "config.nce.num_patches=16",
    "config.discriminator.ndf=4", "config.eval.max_images=4", "config.eval.feature_size=32", "config.eval.kid_subsets=2",
    "config.optim.schedule={start: {epochs: 1}, end: {epochs: 2}}",
]


@pytest.fixture(scope="session")
def tiny_overrides() -> list[str]:
    """Config overrides that make any translation config train a few steps at tiny size."""
    return list(TINY)


@pytest.fixture(scope="session")
def data_root(emoji_root) -> Path:
    """The data root holding ``emoji/`` and ``translation/`` (``emoji_root``: skips when the emoji data is absent)."""
    return emoji_root


@pytest.fixture(scope="session")
def emoji_cache(tmp_path_factory) -> Path:
    """One extraction of the emoji archives for the whole session (``config.data.cache_dir``)."""
    return tmp_path_factory.mktemp("emoji_cache")
