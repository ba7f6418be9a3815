"""Config keys that moved, by task: a config (file or override) that still uses one is refused with one line
naming the key to use now, instead of OmegaConf's "key not in ..." that does not say where it went.

:data:`MOVED` maps a task's registry key to ``{old key below config: what to write now}``; an override that
sets a mapping is searched too (``config.data={batch_size: 4}`` uses ``config.data.batch_size``).
"""

from __future__ import annotations

from typing import Any, Iterator, Mapping

MOVED: dict[str, dict[str, str]] = {
    "code_search": {"optim.warmup_steps": "config.optim.warmup: {steps: N}"},
    "image_ssl": {"optim.warmup_epochs": "config.optim.warmup: {epochs: N}",
                  "optim.schedule_epochs": "config.optim.schedule: {name: cosine, end: {epochs: N}}"},
    "image_text": {"lr": "config.optim.lr", "weight_decay": "config.optim.weight_decay",
                   "trunk_lr_scale": "config.optim.groups: {trunk: {lr_scale: X}}"},
    "super_resolution": {"lr": "config.optim.lr", "betas": "config.optim.betas",
                         "milestones": "config.optim.schedule: {name: step, every: {steps: N}, gamma: 0.5}",
                         "cosine_steps": "config.optim.schedule: {name: cosine, end: {steps: N}}",
                         "min_lr": "config.optim.schedule.min_lr",
                         "discriminator.lr": "config.optim.groups: {discriminator: {lr: X}}",
                         "data.batch_size": "config.batch_size"},
    "translation": {"lr": "config.optim.lr", "betas": "config.optim.betas",
                    "n_epochs": "config.optim.schedule: {name: linear, start: {epochs: N}, end: {epochs: N + n_epochs_decay}}",
                    "n_epochs_decay": "config.optim.schedule: {name: linear, start: {epochs: n_epochs}, end: {epochs: n_epochs + N}}",
                    "data.batch_size": "config.batch_size"},
    "metric_learning": {"optim.head_lr": "config.optim.groups: {head: {lr: X}, objective: {lr: X}}",
                        "optim.schedule_epochs": "config.optim.schedule: {name: cosine, end: {epochs: N}}",
                        "sampler.batch_size": "config.batch_size"},
}
"""Issue 43 moved every domain's optimizer and schedule settings to ``config.optim`` (contrasuite.core.task.optim)
and every batch size to ``config.batch_size``."""


def key_paths(tree: Any, prefix: str) -> Iterator[str]:
    """``prefix`` and the dotted path of every mapping key below it (not into lists)."""
    yield prefix
    if isinstance(tree, Mapping):
        for key, value in tree.items():
            yield from key_paths(value, f"{prefix}.{key}")


def moved_key(task: str, section: str, values: Any) -> str | None:
    """``config.<old> moved: use <new>`` for the first moved key at or below ``section`` (``config``,
    ``config.optim``, an override's key) holding ``values``, None when none is."""
    table = MOVED.get(task, {})
    for path in key_paths(values, section):
        below = path.removeprefix("config.")
        if path.startswith("config.") and below in table:
            return f"{path} moved: use {table[below]}"
    return None
