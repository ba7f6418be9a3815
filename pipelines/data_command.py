"""``contrasuite data list|fetch NAME|check [NAME]``: the datasets the shipped configs read, under the data root.

Each domain declares its datasets in ``domains/<d>/datasets.py`` (``DATASETS`` and ``uses(config)``,
:mod:`contrasuite.domains.data_sources`); they are found through the task registry
(:func:`~contrasuite.pipelines.catalog.domain_folders`), so this file names no domain. The data root is
``--data-root``, else ``$CONTRASUITE_DATA``, else ``./data``; docs/data.md describes every dataset.

``list`` prints one row a dataset: the configs that read it, its size, whether its files are under the
data root. ``fetch NAME`` downloads the files with a public source (progress on stderr, SHA-256 checked,
written atomically); a dataset without one is one line saying which files to put where, exit 2. ``check``
verifies the size and SHA-256 of every file of each dataset present (``check NAME``: of that one), one
line a dataset, exit 1 when a file is missing from a dataset, or wrong, or when no dataset is there at all.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Sequence

from contrasuite.core.task.errors import DataError
from contrasuite.domains.archives import download
from contrasuite.domains.data_sources import Dataset, file_problem, is_there
from contrasuite.pipelines.catalog import domain_folders
from contrasuite.pipelines.config import config_root, default_data_root, is_fragment, read_raw, shipped_configs


@dataclass(frozen=True)
class Declared:
    """A dataset and the shipped configs that read it."""

    dataset: Dataset
    configs: tuple[str, ...]


def _declaring_modules() -> dict[str, ModuleType]:
    """``{task name: its domain's datasets module}`` for every registered domain that has one."""
    return {task: importlib.import_module(f"{package}.datasets")
            for task, (package, folder) in domain_folders().items() if (folder / "datasets.py").is_file()}


def declared() -> dict[str, Declared]:
    """Every declared dataset by name, sorted."""
    modules = _declaring_modules()
    datasets = {dataset.name: dataset for module in modules.values() for dataset in module.DATASETS}
    users: dict[str, list[str]] = {name: [] for name in datasets}
    root = config_root()
    for path in shipped_configs():
        if is_fragment(path):
            continue
        raw = read_raw(path)
        module = modules.get(str(raw.get("task")))
        for name in module.uses(raw) if module else ():
            users[name].append("/".join(path.relative_to(root).with_suffix("").parts))
    return {name: Declared(datasets[name], tuple(users[name])) for name in sorted(datasets)}


def _size(n: int | None) -> str:
    return "?" if n is None else f"{n / 1e6:.1f} MB"


def _configs_text(configs: Sequence[str], all_configs: dict[str, int]) -> str:
    """``graph/* (12)`` for a folder whose configs all read it, else ``graph/{a,b}``."""
    by_folder: dict[str, list[str]] = {}
    for name in configs:
        folder, _, stem = name.rpartition("/")
        by_folder.setdefault(folder, []).append(stem)
    parts = [f"{folder}/* ({len(stems)})" if len(stems) == all_configs[folder]
             else f"{folder}/{stems[0]}" if len(stems) == 1 else f"{folder}/{{{','.join(stems)}}}"
             for folder, stems in by_folder.items()]
    return " ".join(parts) or "-"


def _presence(root: Path, dataset: Dataset) -> str:
    """``present``, ``missing`` or ``partial (k/n files)``: existence only, nothing hashed."""
    there = sum(is_there(root, f) for f in dataset.files)
    if there == len(dataset.files):
        return "present"
    return "missing" if there == 0 else f"partial ({there}/{len(dataset.files)} files)"


def list_datasets(root: Path) -> str:
    """The table of ``contrasuite data list``."""
    found = declared()
    all_configs: dict[str, int] = {}
    for path in shipped_configs():
        if not is_fragment(path):
            folder = "/".join(path.relative_to(config_root()).parts[:-1])
            all_configs[folder] = all_configs.get(folder, 0) + 1
    lines = [f"datasets under {root} (contrasuite data fetch NAME; docs/data.md):",
             f"  {'name':14s} {'size':>9s}  {'here':8s} {'fetch':6s} used by"]
    for name, entry in found.items():
        d = entry.dataset
        lines.append(f"  {name:14s} {_size(d.size):>9s}  {_presence(root, d):8s} {'yes' if d.fetchable else 'hand':6s} "
                     f"{_configs_text(entry.configs, all_configs)}")
    return "\n".join(lines)


def _lookup(name: str) -> Dataset:
    found = declared()
    if name not in found:
        raise DataError(f"no dataset named {name!r}; known: {', '.join(found)} (contrasuite data list)")
    return found[name].dataset


def fetch(root: Path, name: str) -> None:
    """Download dataset ``name``'s missing or wrong files into ``root``; one line a file on stdout."""
    dataset = _lookup(name)
    by_hand = [f for f in dataset.files if not (f.url and f.sha256) and file_problem(root, f)]
    if by_hand:
        raise DataError(f"{name} is placed by hand (no download with a checksum declared here): put "
                        f"{', '.join(f.path for f in by_hand)} under {root}: {dataset.by_hand} (docs/data.md)")
    for f in dataset.files:
        if file_problem(root, f) is None:
            print(f"ok      {f.path} (already there)")
        elif f.url and f.sha256:
            download(f.url, root / f.path, f.sha256, size=f.size)
            print(f"fetched {f.path}")
    print(f"{name}: {len(dataset.files)} files under {root}")


def check(root: Path, name: str | None) -> int:
    """Verify one dataset (``name``) or every one present; one line each; 1 when something is wrong."""
    datasets = [_lookup(name)] if name else [e.dataset for e in declared().values()]
    bad = checked = 0
    for dataset in datasets:
        if name is None and _presence(root, dataset) == "missing":
            print(f"absent  {dataset.name} (contrasuite data fetch {dataset.name})")
            continue
        problems = [f"{f.path}: {p}" for f in dataset.files if (p := file_problem(root, f))]
        bad, checked = bad + bool(problems), checked + 1
        print(f"FAIL    {dataset.name}: {'; '.join(problems)}" if problems else f"ok      {dataset.name} "
              f"({len(dataset.files)} file{'s' * (len(dataset.files) > 1)})", flush=True)
    if not checked:
        print(f"no dataset under {root}: nothing was checked (--data-root, $CONTRASUITE_DATA)")
    return 1 if bad or not checked else 0


def main(argv: Sequence[str] | None = None) -> int:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--data-root", default=None, help="default: $CONTRASUITE_DATA, else ./data")
    parser = argparse.ArgumentParser(prog="contrasuite data", description="The datasets the shipped configs read: "
                                     "list them, fetch one, check the copies under the data root (docs/data.md).")
    sub = parser.add_subparsers(dest="action", required=True)
    sub.add_parser("list", parents=[common], help="every dataset: size, whether it is here, the configs that read it")
    sub.add_parser("fetch", parents=[common], help="download a dataset (SHA-256 checked)").add_argument("name")
    sub.add_parser("check", parents=[common], help="verify every dataset present, or NAME").add_argument("name", nargs="?")
    args = parser.parse_args(argv)
    root = Path(args.data_root or default_data_root())
    if args.action == "list":
        print(list_datasets(root))
    elif args.action == "fetch":
        fetch(root, args.name)
    else:
        return check(root, args.name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
