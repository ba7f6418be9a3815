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

# Under pytest-xdist (``-n logical``, the README's command) the cores are shared between the workers:
# each worker's torch, and every process a test starts, gets its share of threads.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _WORKERS > 1:
    import torch

    _THREADS = max(1, (os.cpu_count() or 1) // _WORKERS)
    os.environ.setdefault("OMP_NUM_THREADS", str(_THREADS))
    torch.set_num_threads(_THREADS)


def pytest_collection_modifyitems(config, items):
    """Slow tests first, so that the workers share them out instead of meeting one at the end."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
