"""Fixtures of the domains' tests: the data root with the emoji data."""

import os
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def emoji_root() -> Path:
    """``$CONTRASUITE_DATA``, the data root holding ``emoji/``; skips the test when the emoji data is absent."""
    root = Path(os.environ["CONTRASUITE_DATA"])
    if not (root / "emoji" / "emoji.json").is_file():
        pytest.skip(f"emoji data not found under {root}/emoji (set CONTRASUITE_DATA)")
    return root
