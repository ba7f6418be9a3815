"""Fixtures of the domains' tests: the data root with the emoji data."""

import os
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def emoji_root() -> Path:
    """``$CONTRASUITE_DATA``, the data root holding ``emoji/``; skips the test when the emoji metadata or the Twitter
    archive is absent."""
    root = Path(os.environ["CONTRASUITE_DATA"])
    if not all((root / "emoji" / name).is_file() for name in ("emoji.json", "emoji-twitter-64.tar.gz")):
        pytest.skip(f"emoji data not found under {root}/emoji (set CONTRASUITE_DATA)")
    return root
