import os
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def data_root() -> Path:
    """The data root holding ``emoji/`` and ``translation/``; skips when the emoji archives are absent."""
    root = Path(os.environ["CONTRASUITE_DATA"])
    if not (root / "emoji" / "emoji-twitter-64.tar.gz").is_file():
        pytest.skip(f"emoji data not found under {root}/emoji (set CONTRASUITE_DATA)")
    return root


@pytest.fixture(scope="session")
def emoji_cache(tmp_path_factory) -> Path:
    """One extraction of the emoji archives for the whole session (``config.data.cache_dir``)."""
    return tmp_path_factory.mktemp("emoji_cache")
