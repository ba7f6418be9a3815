"""The engine's public API for a domain's commands, comparison report and benchmark.

A domain's front modules (``report.py``, ``bench.py`` and the modules that declare a ``COMMAND``)
import the engine from here and nowhere else in ``contrasuite.pipelines`` (tests/test_dependency_rule.py);
the rest of a domain never imports the engine. What is here:

- configs and runs: :func:`load_config`, :class:`ConfigError`, :func:`seed_all`, :func:`load_checkpoint`
  (:class:`CheckpointError`), :func:`write_json`;
- running the project's own commands in child processes, the one way the reports train:
  :func:`train_and_test`, and its parts :data:`ROOT`, :func:`run_cli` (any other command),
  :func:`thread_env`, :func:`data_root_args`; :func:`config_digest`, :func:`current_result`;
- inputs and devices: :func:`readable_images`, :func:`require_image`, :func:`pick_device`;
- one optimisation step as the trainer makes it (benchmarks): :class:`Step`, :func:`make_scaler`;
- :func:`write_output`: a benchmark's rows as JSON; :func:`mean_std`: a results table's cell.
"""

from contrasuite.pipelines.bench import write_output
from contrasuite.pipelines.checkpoint import CheckpointError, load as load_checkpoint
from contrasuite.pipelines.cli_runs import (
    ROOT, config_digest, current_result, data_root_args, run_cli, thread_env, train_and_test,
)
from contrasuite.pipelines.config import ConfigError, load_config
from contrasuite.pipelines.image_inputs import readable_images, require_image
from contrasuite.pipelines.precision import make_scaler, pick_device
from contrasuite.pipelines.run_dir import write_json
from contrasuite.pipelines.step import Step
from contrasuite.pipelines.tables import mean_std
from contrasuite.pipelines.trainer import seed_all

__all__ = [
    "ROOT", "CheckpointError", "ConfigError", "Step", "config_digest", "current_result", "data_root_args", "load_checkpoint",
    "load_config", "make_scaler", "mean_std", "pick_device", "readable_images", "require_image", "run_cli",
    "seed_all", "thread_env", "write_json", "write_output", "train_and_test",
]
