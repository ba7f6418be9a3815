"""``python -c 'from contrasuite.pipelines.installed import check; check()'``: is this install usable?

Run by CI on the installed wheel from a folder outside the checkout: every registered task imports,
every shipped config loads, the configs are the installed package's own (not a checkout's), every
domain's report, bench and commands are found in the installed domain folders, and every dataset the
configs read is declared (``contrasuite data``; the graph declarations read the installed configs).
"""

from __future__ import annotations

from pathlib import Path

import contrasuite.pipelines as pipelines_package
from contrasuite.pipelines.catalog import benches, domain_commands, reports
from contrasuite.pipelines.config import config_root, load_config, shipped_configs
from contrasuite.pipelines.data_command import declared
from contrasuite.pipelines.registry import TASKS, resolve_task


def check() -> None:
    """Raise on the first problem; print one summary line otherwise."""
    package_dir = Path(next(iter(pipelines_package.__path__))).parent
    root = config_root()
    if not root.is_relative_to(package_dir):
        raise RuntimeError(f"the shipped configs come from {root}, not from the installed package {package_dir}")
    tasks = {name: resolve_task(name) for name in TASKS}
    configs = shipped_configs()
    for path in configs:
        load_config(path)
    datasets = declared()
    unread = sorted(name for name, d in datasets.items() if not d.configs)
    if unread:
        raise RuntimeError(f"declared datasets that no installed config reads: {unread}")
    entries = {"compare": reports(), "bench": benches(), "commands": domain_commands()}
    for kind, found in entries.items():
        if not found:
            raise RuntimeError(f"no {kind} entries found in the installed domain folders")
    print(f"installed: {len(tasks)} tasks import, {len(configs)} shipped configs load from {root}, "
          f"{len(datasets)} datasets declared; "
          + ", ".join(f"{len(found)} {kind}" for kind, found in entries.items()))
