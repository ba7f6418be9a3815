"""Train and load runs from Python: what ``contrasuite train`` does, and a trained run's model back.

    from contrasuite.pipelines.python_api import train, load_run

    run_dir = train("super_resolution/reduced_x2_l1", "run.max_steps=20")   # the run folder
    run = load_run(run_dir)            # run.config: the task's config; run.modules: name -> state dict
    task = run.task()                  # the task set up on the CPU with those weights (graph: its embeddings)

Each domain page (``docs/domains/<domain>.md``, section "From Python") rebuilds its network from
``run.config`` and ``run.modules`` with the domain's own builders and runs it on a real input.
Errors are the engine's: a bad config key is a ``ConfigError``, an unreadable checkpoint a ``CheckpointError``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import torch

from contrasuite.core.task.protocol import Task
from contrasuite.domains.init_from import checkpoint_file
from contrasuite.pipelines import checkpoint, trainer
from contrasuite.pipelines.config import LoadedConfig, load_config
from contrasuite.pipelines.noise import silence_expected_noise
from contrasuite.pipelines.standalone import setup_task

__all__ = ["Run", "load_run", "train"]


def train(config: str | Path, *overrides: str, data_root: str | Path | None = None) -> Path:
    """Train ``config`` (a YAML file or a shipped name such as ``image_ssl/reduced_infonce``) with
    ``key=value`` overrides, as ``contrasuite train`` does; returns the run folder."""
    silence_expected_noise()
    return trainer.train(load_config(config, list(overrides), data_root=data_root))


@dataclass(frozen=True)
class Run:
    """A trained run: its folder, config as the run resolved it, and one checkpoint's weights."""

    folder: Path
    loaded: LoadedConfig
    checkpoint: Path
    state: Mapping[str, Any]
    """The checkpoint as read (``weights_only=True``)."""

    @property
    def config(self) -> Any:
        """The task's config section (``config:`` of the run's ``config.yaml``, typed)."""
        return self.loaded.config

    @property
    def data_root(self) -> Path:
        """Where the run read its data (``--data-root``, ``run.data_root`` or ``$CONTRASUITE_DATA``)."""
        return Path(self.loaded.run.data_root)

    @property
    def modules(self) -> Mapping[str, Mapping[str, torch.Tensor]]:
        """The checkpoint's module weights: name (``generator``, ``encoder``, ``model``...) -> state dict."""
        return self.state["modules"]

    def task(self, data_root: str | Path | None = None, device: str = "cpu", work_dir: Path | None = None) -> Task:
        """The run's task set up on ``device`` (its data read from ``data_root``, default the run's) with
        this checkpoint's modules and task state loaded; ``work_dir``: where its setup may write (default
        the run folder, as ``contrasuite eval``)."""
        task = setup_task(self.loaded.task_class(), self.config, device=torch.device(device),
                          data_root=Path(data_root or self.data_root), run_dir=work_dir or self.folder,
                          seed=self.loaded.run.seed)
        checkpoint.restore_modules(dict(self.state), self.checkpoint, modules=dict(task.modules()), task=task)
        return task


def load_run(run_dir: str | Path, which: str = "best") -> Run:
    """A run folder's config and its ``which`` checkpoint (``best``, falling back to ``last``; or ``last``)."""
    silence_expected_noise()
    folder = Path(run_dir)
    if not (folder / "config.yaml").is_file():
        raise FileNotFoundError(f"run_dir {folder} is not a run folder (no config.yaml)")
    loaded = load_config(folder / "config.yaml", name=trainer.saved_run_name(folder))
    file = checkpoint_file(folder, which)
    return Run(folder=folder, loaded=loaded, checkpoint=file, state=checkpoint.load(file))
