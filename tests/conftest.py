"""Suite-wide setup: where the offline datasets are.

Tests read datasets from ``$CONTRASUITE_DATA``; when it is unset, the ``shared/data`` folder beside
the repository (the layout CI and the developers' machines use). Tests that need a dataset skip
with a message when it is absent.
"""

import os
from pathlib import Path

# Module level, not a hook: the domain conftests below read the variable when they are imported.
os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")
os.environ.setdefault("CONTRASUITE_DATA", str(Path(__file__).resolve().parents[2] / "shared" / "data"))
