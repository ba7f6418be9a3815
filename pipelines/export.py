"""``contrasuite export RUN_DIR --format F --out DIR``: a run's trained model in a format other libraries load.

Each domain declares what it exports (``domains/<d>/export.py``: ``FORMATS`` and ``export(request)``;
``contrasuite list`` shows them): encoders as ONNX, TorchScript or safetensors, code search's
bi-encoder as a sentence-transformers folder, image-text towers as an open_clip state dict, graph
node embeddings as ``.npy``. The checkpoint (``--checkpoint best|last``) is read with
``weights_only=True``; every written file is loaded back by its consumer and must reproduce the run's
model on fixed inputs (``domains/exporting.py``). The folder gets a model card (``README.md``: task,
config digest, training data, the run's metrics, the commands, the pretrained parts' licences) and
``export.json`` (the same as data, with each file's SHA-256). Nothing is written on failure: the
export is made in a temporary folder beside ``--out`` and renamed into place.
"""

from __future__ import annotations

import argparse
import importlib
import os
import shlex
import shutil
import sys
from dataclasses import asdict
from importlib import metadata
from pathlib import Path
from typing import Any, Sequence

import torch

from contrasuite.domains.archives import sha256_of
from contrasuite.domains.exporting import ONNX_OPSET, ExportError, Exported, ExportRequest, require_format
from contrasuite.pipelines.catalog import domain_folders, export_formats
from contrasuite.pipelines.cli_runs import config_digest
from contrasuite.pipelines.run_dir import read_json, write_json


def _training_command(run_dir: Path) -> str | None:
    """The command line that trained the run (``environment.json``), its program by name, not by path."""
    argv = list(read_json(run_dir / "environment.json").get("argv") or [])
    return shlex.join([Path(argv[0]).name, *argv[1:]]) if argv else None


def _metrics_lines(run_dir: Path) -> list[str]:
    lines = []
    for split in ("val", "test"):
        result = read_json(run_dir / f"eval_{split}.json")
        if result.get("metrics"):
            values = ", ".join(f"{k} {v:.4g}" for k, v in sorted(result["metrics"].items()))
            lines.append(f"- {split} ({result.get('checkpoint', 'best')} checkpoint, step {result.get('global_step', '?')}): {values}")
    return lines or ["- no evaluation recorded in the run folder (run `contrasuite eval RUN_DIR`, then export again)"]


def _data_section(config: dict[str, Any]) -> dict[str, Any] | None:
    """The run's data settings: ``config.data``, or ``config.dataset`` (graph), with their key."""
    key = next((k for k in ("data", "dataset") if isinstance(config.get(k), dict)), None)
    return None if key is None else {"key": f"config.{key}", "values": config[key]}


def _data_lines(data: dict[str, Any] | None) -> list[str]:
    if not data:
        return []
    return [f"The run's `{data['key']}`:", "", *(f"- `{k}`: `{v}`" for k, v in data["values"].items())]


def model_card(record: dict[str, Any], exported: Exported) -> str:
    """The export folder's ``README.md``."""
    run = record["run"]
    lines = [
        f"# {record['task']} model: {run['name']}, {record['format']}",
        "",
        f"Exported by contrasuite {record['contrasuite']} from `{run['folder']}` ({record['checkpoint']} checkpoint, "
        f"global step {run['global_step']}).",
        "",
        "| | |", "|---|---|",
        f"| task | `{record['task']}` |",
        f"| format | {record['format']}{f' (opset {ONNX_OPSET})' if record['format'] == 'onnx' else ''} |",
        f"| config digest | `{run['config_digest'][:16]}` (SHA-256 of the resolved config) |",
        f"| files | {', '.join(f'`{f}`' for f in exported.files)} |",
        "",
        "## Interface", "", f"- inputs: {exported.inputs}", f"- outputs: {exported.outputs}", "",
        "## Check", "",
        "Loaded back by its consumer and compared with what the run's own PyTorch model computes (fp32):",
        "",
        *([f"- `{name}`: max abs difference {diff:.3g}" for name, diff in exported.max_abs_diff.items()]
          or ["- the stored tensors equal the checkpoint's bit for bit"]),
        "",
        "## Training data", "", exported.training_data, "", *_data_lines(run.get("data")), "",
        "## Metrics of the run", "", *_metrics_lines(Path(run["folder"])), "",
        "## Commands", "",
        f"- trained with: `{run['command']}`" if run["command"] else "- trained with: (not recorded)",
        f"- exported with: `{record['command']}`",
        "",
        "## Pretrained parts and licences", "",
        *([f"- {entry}" for entry in exported.licences] or ["- none: every weight was trained by this run"]),
        "",
        "## Load it", "", "```python", exported.usage.strip(), "```", "",
    ]
    return "\n".join(lines)


def export_run(run_dir: Path, fmt: str, out: Path, which: str = "best", data_root: Path | None = None,
               argv: Sequence[str] = ()) -> Path:
    """Export ``run_dir``'s ``which`` checkpoint as ``fmt`` into the new or empty folder ``out``; returns ``out``."""
    run_dir = Path(run_dir)
    if not (run_dir / "config.yaml").is_file():
        raise FileNotFoundError(f"RUN_DIR {run_dir} is not a run folder (no config.yaml)")
    from contrasuite.pipelines.python_api import load_run

    run = load_run(run_dir, which)
    loaded, path, state = run.loaded, run.checkpoint, run.state
    formats = export_formats()
    domain = loaded.task_name
    if domain not in formats:
        raise ExportError(f"{run_dir}: the {domain!r} task has no export (domains with one: {', '.join(sorted(formats))})")
    require_format(fmt, formats[domain], f"a {domain} run")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ExportError(f"--out {out} exists and is not an empty folder; choose a new one")
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.parent / f".{out.name}.partial-{os.getpid()}"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir()
    try:
        module = importlib.import_module(f"{domain_folders()[domain][0]}.export")
        request = ExportRequest(run_dir=run_dir, config=loaded.config, modules=state["modules"], format=fmt, out=partial,
                                task=lambda: run.task(data_root, work_dir=partial / ".scratch"))
        exported: Exported = module.export(request)
        shutil.rmtree(partial / ".scratch", ignore_errors=True)
        record = {
            "task": domain, "format": fmt, "checkpoint": path.stem, "opset": ONNX_OPSET if fmt == "onnx" else None,
            "command": shlex.join(["contrasuite", "export", *argv]) if argv else f"contrasuite export {run_dir} --format {fmt}",
            "contrasuite": metadata.version("contrasuite"), "torch": torch.__version__,
            "run": {"folder": str(run_dir.resolve()), "name": loaded.name,
                    "global_step": state["position"].get("global_step", "?"),
                    "config_digest": config_digest(run_dir / "config.yaml", []),
                    "data": _data_section(loaded.resolved.get("config", {})),
                    "command": _training_command(run_dir)},
            "model_file": exported.files[0], "files": {f: sha256_of(partial / f) for f in exported.files},
            **{k: v for k, v in asdict(exported).items() if k != "files"},
        }
        write_json(record, partial / "export.json")
        (partial / "README.md").write_text(model_card(record, exported))
        if out.exists():
            out.rmdir()
        partial.rename(out)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="contrasuite export", description=__doc__.splitlines()[0].split("``: ", 1)[-1])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--format", required=True, help="one of the run's domain's formats (contrasuite list)")
    parser.add_argument("--out", type=Path, required=True, help="a new or empty folder")
    parser.add_argument("--checkpoint", choices=("best", "last"), default="best")
    parser.add_argument("--data-root", type=Path, default=None, help="for exports that need the data (graph)")
    args = parser.parse_args(argv)
    out = export_run(args.run_dir, args.format, args.out, args.checkpoint, args.data_root, argv)
    print(f"exported {args.run_dir} as {args.format} to {out} (model card: {out / 'README.md'})")
    return 0
