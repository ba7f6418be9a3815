"""The run folder ``<output_root>/<domain>/<run name>/<timestamp>/`` and what describes it.

The run name is ``run.name`` when given, else the config's shipped path below its domain folder
(``reduced/meow_acm``) or the file stem of any other config, so a reduced and a full config of the same
name never share folders; overrides that change the ``config:`` section add a digest of the change
(``reduced_infonce-2ad9a18a``), so such a run is neither filed with nor resumed as the config's own runs
(:func:`contrasuite.pipelines.config.run_name`).

It holds ``config.yaml`` (resolved), ``environment.json`` (versions, git commit, device),
``status.json``, ``metrics.csv``, ``checkpoints/``, ``eval_*.json`` and ``plots/``.
"""

from __future__ import annotations

import csv
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

PACKAGES = ("contrasuite", "torch", "numpy", "omegaconf", "torchvision", "kornia", "torch_geometric",
            "open_clip_torch", "transformers", "scikit-learn", "matplotlib", "tensorboard")


class RunFolderError(RuntimeError):
    """A run folder that cannot be made under ``run.output_root`` (a file in the way, no permission, a full disk)."""


def new_run_dir(output_root: str | Path, domain: str, name: str) -> Path:
    """Create a fresh, timestamped run folder below ``<output_root>/<domain>/<name>`` (a numeric suffix avoids collisions)."""
    base = Path(output_root) / domain / name
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for n in range(1000):
        candidate = base / (stamp if n == 0 else f"{stamp}-{n}")
        try:
            candidate.mkdir(parents=True, exist_ok=False)
            return candidate
        except FileExistsError as err:
            if not candidate.is_dir():
                raise _cannot_make(output_root, candidate, err) from None
        except OSError as err:
            raise _cannot_make(output_root, candidate, err) from None
    raise RunFolderError(f"run.output_root={output_root}: 1000 run folders named {stamp}* already exist under {base}")


def _cannot_make(output_root: str | Path, folder: Path, err: OSError) -> RunFolderError:
    """Why ``folder`` cannot be made: a file on its way (named), or the system's reason (no permission, ...)."""
    blocker = next((p for p in reversed([folder, *folder.parents]) if p.exists() and not p.is_dir()), None)
    why = f"{blocker} is a file, not a folder" if blocker else (err.strerror or str(err))
    return RunFolderError(f"run.output_root={output_root}: cannot make the run folder {folder}: {why}")


def unfinished_runs(output_root: str | Path, domain: str, name: str) -> list[Path]:
    """This run name's runs with a ``last.pt`` and no finished status, newest first (for ``run.resume=auto``)."""
    base = Path(output_root) / domain / name
    if not base.is_dir():
        return []
    return [run for run in sorted((p for p in base.iterdir() if p.is_dir()), reverse=True)
            if (run / "checkpoints" / "last.pt").is_file() and read_json(run / "status.json").get("state") != "finished"]


def write_json(data: Any, path: Path, sort_keys: bool = True) -> None:
    """Write JSON atomically (temporary file, then rename), creating the folder if needed; ``sort_keys=False``
    keeps the keys' order (a record rewritten in place)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=sort_keys, default=str) + "\n")
    os.replace(tmp, path)


def logged_per_epoch(run_dir: Path, prefix: str) -> dict[str, list[float]]:
    """The values a run logged under names starting with ``prefix`` (``metrics.csv``), averaged per epoch:
    ``{name without prefix: [mean of epoch 0, 1, ...]}``; empty when the run logged none."""
    sums: dict[str, dict[int, list[float]]] = {}
    metrics = Path(run_dir) / "metrics.csv"
    if metrics.is_file():
        with metrics.open() as f:
            for row in csv.DictReader(f):
                if row["name"].startswith(prefix):
                    by_epoch = sums.setdefault(row["name"].removeprefix(prefix), {})
                    by_epoch.setdefault(int(row["epoch"]), []).append(float(row["value"]))
    return {k: [statistics.fmean(by_epoch[e]) for e in sorted(by_epoch)] for k, by_epoch in sums.items()}


def read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def git_commit() -> str | None:
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
        dirty = subprocess.run(["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what ``platform`` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment(device: torch.device, world_size: int) -> dict[str, Any]:
    """Package versions, git commit, python, platform, device and world size."""
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return {
        "packages": versions,
        "git_commit": git_commit(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor(),
        "world_size": world_size,
        "argv": sys.argv,
    }
