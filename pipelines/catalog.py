"""What the suite ships, for ``contrasuite list`` and the ``bench``/``compare`` help: read without importing.

Reports and benches are found as modules of ``contrasuite.pipelines.reports`` / ``.bench`` with a
``main(argv)``; their one-line summaries are their docstrings' first lines, read with ``ast`` so that
listing them imports none of their heavy dependencies.
"""

from __future__ import annotations

import ast
import inspect
import pkgutil
from pathlib import Path

SKIP = {"cli_runs"}
"""Helper modules of those packages that are no command."""


def commands(package: str) -> dict[str, str]:
    """``{name: first docstring line}`` of every command module in ``contrasuite.pipelines.<package>``."""
    folder = Path(__file__).resolve().parent / package
    out = {}
    for info in sorted(pkgutil.iter_modules([str(folder)]), key=lambda i: i.name):
        if info.name in SKIP or info.name.startswith("_"):
            continue
        tree = ast.parse((folder / f"{info.name}.py").read_text())
        if not any(isinstance(n, ast.FunctionDef) and n.name == "main" for n in tree.body):
            continue
        doc = (ast.get_docstring(tree) or "").strip().splitlines()
        out[info.name] = doc[0].split("``: ", 1)[-1] if doc else ""  # drop the leading "``contrasuite bench x``: "
    return out


def objective_parameters() -> dict[str, str]:
    """``{objective: "temperature=0.1, ..."}``: each registered objective's constructor defaults."""
    from contrasuite.core.objectives import OBJECTIVES

    out = {}
    for name, cls in sorted(OBJECTIVES.items()):
        params = [p for p in inspect.signature(cls.__init__).parameters.values() if p.name != "self"]
        out[name] = ", ".join(f"{p.name}={p.default!r}" if p.default is not p.empty else p.name for p in params
                              if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD))
    return out


def listing() -> str:
    """The text of ``contrasuite list``: tasks, objectives, shipped configs, reports and benches."""
    from contrasuite.pipelines.config import config_root, shipped_configs
    from contrasuite.pipelines.registry import known_tasks

    lines = ["tasks (config key 'task:'):"]
    lines += [f"  {name:18s} {target}" for name, target in sorted(known_tasks().items())]
    lines += ["", "objectives (config.objective.terms: {name: ..., weight: ..., <parameter>: ...}):"]
    lines += [f"  {name:24s} {params}" for name, params in objective_parameters().items()]
    root = config_root()
    lines += ["", f"shipped configs (contrasuite train NAME; files under {root}):"]
    by_domain: dict[str, list[str]] = {}
    for path in shipped_configs():
        rel = path.relative_to(root).with_suffix("")
        by_domain.setdefault(rel.parts[0], []).append("/".join(rel.parts))
    for domain, names in by_domain.items():
        lines.append(f"  {domain}: {' '.join(names)}")
    for package, verb in (("reports", "compare"), ("bench", "bench")):
        lines += ["", f"{verb} (contrasuite {verb} NAME --help):"]
        lines += [f"  {name:18s} {summary}" for name, summary in commands(package).items()]
    return "\n".join(lines)
