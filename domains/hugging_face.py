"""Hugging Face models as this project loads them: from local folders, running their own PyTorch code.

transformers >= 5 kernelizes a model placed on CUDA whenever the ``kernels`` package is installed (it is a
dependency of transformers): ``from_pretrained`` defaults to ``use_kernels=True``, and every ``train()`` /
``eval()`` switch then resolves compiled kernels on the Hugging Face hub (``kernels-community/activation``
for BERT's GELU). Offline, as on most cluster nodes, that raises ``ValueError`` at the first validation;
online, it runs downloaded binaries that change the numerics between CPU and GPU runs. Both are off here
unless the user asks for them (``USE_HUB_KERNELS=YES``, ``HF_HUB_OFFLINE=0``).
"""

from __future__ import annotations

import os


def local_models_only() -> None:
    """Before a transformers model is built: no hub look-ups, no hub kernels (user settings win)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("USE_HUB_KERNELS", "NO")
