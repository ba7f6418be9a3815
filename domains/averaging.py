"""Exponential moving average of a model's weights (Polyak averaging), for evaluation.

``theta_avg <- decay * theta_avg + (1 - decay) * theta`` after every optimizer step; a decay ``d``
averages over roughly the last ``1 / (1 - d)`` steps. Shared by the domains whose tasks offer it
(``config.ema``): the translation generator (as in Karras et al. 2018) and the image-text towers.
"""

from __future__ import annotations

import torch
from torch import nn

from contrasuite.core.task.errors import ConfigValueError


def check_decay(decay: float) -> None:
    if not 0.0 <= decay < 1.0:
        raise ConfigValueError(f"config.ema must be in [0, 1), got {decay}")


def start_average(average: nn.Module, model: nn.Module) -> nn.Module:
    """``average`` (a fresh module of ``model``'s architecture) set to ``model``'s weights and buffers
    (copied tensor by tensor, whatever either's ``state_dict`` leaves out), frozen."""
    with torch.no_grad():
        for mine, theirs in zip([*average.parameters(), *average.buffers()], [*model.parameters(), *model.buffers()]):
            mine.copy_(theirs)
    return average.requires_grad_(False)


@torch.no_grad()
def update_average(average: nn.Module, model: nn.Module, decay: float) -> None:
    """``average <- decay * average + (1 - decay) * model`` for the parameters that train (a frozen one
    keeps the value :func:`start_average` copied); buffers copied."""
    pairs = [(mine, theirs) for mine, theirs in zip(average.parameters(), model.parameters()) if theirs.requires_grad]
    if pairs:
        torch._foreach_lerp_([m for m, _ in pairs], [t for _, t in pairs], 1.0 - decay)
    for mine, theirs in zip(average.buffers(), model.buffers()):
        mine.copy_(theirs)
