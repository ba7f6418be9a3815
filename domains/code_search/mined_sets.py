"""Named mined datasets: where ``contrasuite code-search mine --name NAME`` writes, what ``config.data.mined`` reads.

A named set lives in ``<cache root>/code_search/mined/<name>`` (``$CONTRASUITE_CACHE``, else
``~/.cache/contrasuite``): it is derived from this interpreter's standard library and site-packages
(``smoke``: :data:`SMOKE_MODULES` of the standard library only, ~300 pairs mined in about a second,
the data subset ``contrasuite smoke`` runs code_search on), not downloaded, so it sits beside the other
derived data (extracted archives, embeddings) and not in the data root. The task mines a missing set on
first use and the command on request; both call :func:`mine_into` with the set's :data:`MINED_SETS`
parameters and :func:`set_sources`, so the files and their ``dataset_version`` are the same either way.
Mining writes into a temporary sibling folder and renames it into place: a set is complete
(``manifest.json`` present) or absent, never half written. Under several processes rank 0 mines while
the others wait, then read its folder.
"""

from __future__ import annotations

import functools
import os
import shutil
import sysconfig
import tempfile
from pathlib import Path
from typing import Callable, Sequence

from contrasuite.core.task.errors import DataError
from contrasuite.core.task.protocol import Progress, no_progress
from contrasuite.domains.archives import cache_root
from contrasuite.domains.code_search.encoder import console_progress
from contrasuite.domains.code_search.mine import MineConfig, MineReport, default_sources, mine
from contrasuite.domains.disk_cache import rank_zero_first


MINED_SETS: dict[str, MineConfig] = {
    "reduced": MineConfig(max_per_package=500, max_pairs=20000),
    "full": MineConfig(),
    "smoke": MineConfig(),
}
"""Set name -> its mining parameters; the sources are :func:`set_sources`."""

SMOKE_MODULES = ("argparse", "base64", "calendar", "configparser", "csv", "difflib", "fnmatch", "fractions", "gettext",
                 "glob", "heapq", "ipaddress", "json", "pprint", "shlex", "statistics", "string", "textwrap", "tomllib",
                 "zipfile")
"""The standard-library modules the ``smoke`` set is mined from (a file or a package each; each is a package of the split)."""


def set_sources(name: str | None, stdlib: bool = True, site_packages: bool = True) -> list[Path]:
    """What a named set is mined from: the standard library and site-packages (each unless turned off); for
    ``smoke``, :data:`SMOKE_MODULES` of the standard library."""
    if name != "smoke":
        return default_sources(stdlib, site_packages)
    lib = Path(sysconfig.get_paths()["stdlib"])
    found = [next((p for p in (lib / f"{m}.py", lib / m) if p.exists()), None) for m in SMOKE_MODULES] if stdlib else []
    return [p for p in found if p is not None]


def mined_folder(name: str) -> Path:
    """Where the named set lives: ``<cache root>/code_search/mined/<name>``."""
    return cache_root() / "code_search" / "mined" / name


def mine_command(name: str, out: Path | None = None) -> str:
    """The command that mines the named set (into ``out`` when it is not the set's own folder)."""
    where = f" --out {out}" if out is not None and Path(out) != mined_folder(name) else ""
    return f"contrasuite code-search mine --name {name}{where}"


file_progress = functools.partial(console_progress, unit="file")
"""The miner's bar outside the engine (the command, compare): files scanned on stderr, running counts after it."""


def is_mined(folder: Path) -> bool:
    """True when ``folder`` holds a finished mined set (its ``manifest.json`` is written last)."""
    return (Path(folder) / "manifest.json").is_file()


def _install(tmp: Path, out: Path) -> None:
    """Move a finished set from ``tmp`` to ``out``: one rename when ``out`` is absent or empty, else file by
    file with ``manifest.json`` removed first and moved last (a reader never sees a stale manifest)."""
    try:
        os.replace(tmp, out)
        return
    except OSError:
        if not out.is_dir():
            raise
    (out / "manifest.json").unlink(missing_ok=True)
    for item in sorted(tmp.iterdir(), key=lambda p: p.name == "manifest.json"):
        os.replace(item, out / item.name)


def mine_into(sources: Sequence[Path], out: Path, cfg: MineConfig, *, log: Callable[[str], None] = print,
              progress: Progress = no_progress) -> MineReport:
    """:func:`~contrasuite.domains.code_search.mine.mine` into a temporary sibling of ``out``, then moved there."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.mining-", dir=out.parent))
    try:
        report = mine(sources, tmp, cfg, log=log, progress=progress)
        _install(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    report.out = out
    log(f"mine: wrote {out}")
    return report


def ensure_mined(name: str, folder: Path | None = None, *, log: Callable[[str], None] = print,
                 progress: Progress = no_progress, rank: int = 0) -> Path:
    """The named set's folder (``folder``, default :func:`mined_folder`), mined there first when it is missing;
    a :class:`DataError` giving the command when there is no source to mine it from. In an initialised process
    group rank 0 (``rank``) mines while the others wait (:func:`rank_zero_first`)."""
    folder = Path(folder) if folder is not None else mined_folder(name)

    def ensure() -> Path:
        if is_mined(folder):
            return folder
        command = mine_command(name, folder)
        sources = set_sources(name)
        if not sources:
            raise DataError(f"config.data.mined: mined set {name!r} not found at {folder} and there is no standard "
                            f"library or site-packages source here to mine it from; create it with: {command}")
        log(f"code_search: mined set {name!r} not found at {folder}; mining it now, as `{command}` would (later runs "
            "reuse it)")
        mine_into(sources, folder, MINED_SETS[name], log=log, progress=progress)
        return folder

    return rank_zero_first(ensure, rank)
