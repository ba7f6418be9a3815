import os
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def sr_data_root() -> Path:
    """The data root holding ``sr/*.tar.gz``; skips when the SR sets are absent."""
    root = Path(os.environ["CONTRASUITE_DATA"])
    if not (root / "sr" / "Set5.tar.gz").is_file() and not (root / "sr" / "Set5").is_dir():
        pytest.skip(f"SR data not found under {root}/sr (set CONTRASUITE_DATA)")
    return root
