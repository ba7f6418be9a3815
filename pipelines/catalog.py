"""What the suite ships, for ``contrasuite list`` and the CLI's subcommands: found without importing.

Each registered task's package (``contrasuite.domains.<d>`` for ``...<d>.task:Class``, or a plugin's)
is a domain folder, whose front modules the CLI serves:

- ``report.py`` with a ``main(argv)``: ``contrasuite compare <d>``;
- ``bench.py`` with a ``main(argv)``: ``contrasuite bench <d>``, beside the engine's own benches in
  ``contrasuite.pipelines.bench``;
- any module with a top-level ``COMMAND = "name"`` and a ``main(argv)``: ``contrasuite name``;
- ``export.py`` with ``FORMATS`` and ``export(request)``: ``contrasuite export RUN_DIR --format F`` for that domain's runs.

One-line summaries are the first lines of the modules' docstrings (after the ``contrasuite ...``: part),
read with ``ast``, so listing them imports none of their heavy dependencies.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import inspect
import pkgutil
from dataclasses import dataclass
from pathlib import Path

ENGINE_BENCHES = Path(__file__).resolve().parent / "bench"


@dataclass(frozen=True)
class Entry:
    """A CLI entry: the module to import for its ``main(argv)`` and its one-line summary."""

    module: str
    summary: str


def _summary(tree: ast.Module) -> str:
    doc = (ast.get_docstring(tree) or "").strip().splitlines()
    return doc[0].split("``: ", 1)[-1] if doc else ""  # drop the leading "``contrasuite bench x``: "


def _has_main(tree: ast.Module) -> bool:
    return any(isinstance(n, ast.FunctionDef) and n.name == "main" for n in tree.body)


def _command_name(tree: ast.Module) -> str | None:
    """The value of a top-level ``COMMAND = "name"``, if any."""
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id == "COMMAND" and isinstance(node.value, ast.Constant)):
            return str(node.value.value)
    return None


def domain_folders() -> dict[str, tuple[str, Path]]:
    """``{task name: (package, folder)}`` of every registered task defined in a ``<package>.task`` module."""
    from contrasuite.pipelines.registry import known_tasks

    out = {}
    for name, target in sorted(known_tasks().items()):
        module = target.partition(":")[0]
        if not module.endswith(".task"):
            continue
        package = module.rpartition(".")[0]
        spec = importlib.util.find_spec(package)
        if spec is not None and spec.submodule_search_locations:
            out[name] = (package, Path(next(iter(spec.submodule_search_locations))))
    return out


@functools.cache
def _front_modules() -> tuple[tuple[str, str, ast.Module], ...]:
    """``(domain, module name, parsed source)`` of every module with a ``main`` in every domain folder.

    Read once per process: a CLI call asks for the commands, the reports and the benches."""
    out = []
    for domain, (package, folder) in domain_folders().items():
        for info in sorted(pkgutil.iter_modules([str(folder)]), key=lambda i: i.name):
            path = folder / f"{info.name}.py"
            text = path.read_text() if path.is_file() else ""
            if "\ndef main(" in text:  # only modules with a main(argv) can be entries; skip parsing the rest
                out.append((domain, f"{package}.{info.name}", ast.parse(text)))
    return tuple(out)


def reports() -> dict[str, Entry]:
    """``contrasuite compare NAME``: each domain's ``report.py``, and ``effects`` (the table across them)."""
    out = {d: Entry(m, _summary(t)) for d, m, t in _front_modules() if m.endswith(".report") and _has_main(t)}
    return out | {"effects": Entry("contrasuite.pipelines.effects", "what the papers claim and what we measured, "
                                   "docs/results/README.md")}


def benches() -> dict[str, Entry]:
    """``contrasuite bench NAME``: the engine's benches and each domain's ``bench.py``."""
    out = {}
    for info in sorted(pkgutil.iter_modules([str(ENGINE_BENCHES)]), key=lambda i: i.name):
        tree = ast.parse((ENGINE_BENCHES / f"{info.name}.py").read_text())
        if _has_main(tree):
            out[info.name] = Entry(f"contrasuite.pipelines.bench.{info.name}", _summary(tree))
    out |= {d: Entry(m, _summary(t)) for d, m, t in _front_modules() if m.endswith(".bench") and _has_main(t)}
    return dict(sorted(out.items()))


def domain_commands() -> dict[str, Entry]:
    """``contrasuite NAME``: every domain module that declares ``COMMAND = "NAME"``."""
    out = {}
    for _, module, tree in _front_modules():
        name = _command_name(tree)
        if name is not None and _has_main(tree):
            out[name] = Entry(module, _summary(tree))
    return dict(sorted(out.items()))


def export_formats() -> dict[str, dict[str, str]]:
    """``contrasuite export``: ``{domain: {format: what it holds}}``, each domain's ``export.py`` ``FORMATS``."""
    out = {}
    for domain, (_, folder) in domain_folders().items():
        path = folder / "export.py"
        if not path.is_file():
            continue
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "FORMATS" for t in node.targets):
                out[domain] = dict(ast.literal_eval(node.value))
    return out


def _defaults(cls: type) -> dict[str, object]:
    """``{parameter: default}`` (``inspect.Parameter.empty`` when required) of a class's constructor, or, for a
    class that takes flat keys into a config dataclass (WEINCE), the keys its ``config_defaults()`` declares."""
    if hasattr(cls, "config_defaults"):
        return cls.config_defaults()
    params = inspect.signature(cls.__init__).parameters.values()
    return {p.name: p.default for p in params if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}


def _parameters(registry: dict[str, type], given: tuple[str, ...] = ()) -> dict[str, str]:
    """``{name: "temperature=0.1, ..."}``: each registered class's parameters with their defaults,
    leaving out those the caller passes (``given``)."""
    return {name: ", ".join(key if default is inspect.Parameter.empty else f"{key}={default!r}"
                            for key, default in _defaults(cls).items() if key not in given)
            for name, cls in sorted(registry.items())}


def objective_parameters() -> dict[str, str]:
    """``{objective: "temperature=0.1, ..."}``: each registered objective's constructor defaults."""
    from contrasuite.core.objectives import OBJECTIVES

    return _parameters(OBJECTIVES)


def negative_source_parameters() -> dict[str, str]:
    """``{source: "size=4096, ..."}``: each registered negative source's parameters (``dim`` is the domain's)."""
    from contrasuite.core.negatives.sources import NEGATIVE_SOURCES

    return _parameters(NEGATIVE_SOURCES, ("dim",))


def listing() -> str:
    """The text of ``contrasuite list``: tasks, objectives, negative sources, shipped configs, reports and benches."""
    from contrasuite.pipelines.config import config_root, is_fragment, shipped_configs
    from contrasuite.pipelines.registry import known_tasks

    lines = ["tasks (config key 'task:'):"]
    lines += [f"  {name:18s} {target}" for name, target in sorted(known_tasks().items())]
    lines += ["", "objectives (config.objective.terms: {name: ..., weight: ..., <parameter>: ...}):"]
    lines += [f"  {name:24s} {params}" for name, params in objective_parameters().items()]
    lines += ["", "negative sources (a domain's config.negatives: {name: ..., <parameter>: ...}; docs/negatives.md):"]
    lines += [f"  {name:24s} {params}" for name, params in negative_source_parameters().items()]
    root = config_root()
    lines += ["", f"shipped configs (contrasuite train NAME; files under {root}):"]
    by_domain: dict[str, list[str]] = {}
    fragments = []
    for path in shipped_configs():
        name = "/".join(path.relative_to(root).with_suffix("").parts)
        if is_fragment(path):
            fragments.append(name)
        else:
            by_domain.setdefault(name.split("/")[0], []).append(name)
    for domain, names in by_domain.items():
        lines.append(f"  {domain}: {' '.join(names)}")
    lines += ["", f"fragments the configs above extend (not trainable alone): {' '.join(fragments)}"]
    for verb, entries in (("compare", reports()), ("bench", benches())):
        lines += ["", f"{verb} (contrasuite {verb} NAME --help):"]
        lines += [f"  {name:18s} {entry.summary}" for name, entry in entries.items()]
    lines += ["", "export formats (contrasuite export RUN_DIR --format F --out DIR):"]
    lines += [f"  {domain:18s} {' '.join(formats)}" for domain, formats in export_formats().items()]
    lines += ["", "domain commands (contrasuite NAME --help):"]
    lines += [f"  {name:18s} {entry.summary}" for name, entry in domain_commands().items()]
    return "\n".join(lines)
