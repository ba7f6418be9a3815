"""How the compare reports run the project's own commands: ``contrasuite train`` and ``eval`` in a child
process with a fixed number of torch threads, the command line, stdout and stderr appended to a log,
and the run folder read from ``train``'s ``run folder:`` line. A failed command raises an error that
names the command and the log. :func:`train_and_test` is the one way a report trains and tests a run."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from contrasuite.pipelines.run_dir import read_json

ROOT = Path(__file__).resolve().parents[1]
"""The repository root: the children run there, so config paths relative to it work."""


def data_root_args(data_root: str | None) -> list[str]:
    """``--data-root`` for a child command, made absolute (the children run in :data:`ROOT`), or nothing."""
    return ["--data-root", str(Path(data_root).resolve())] if data_root else []


RESULT_KEYS = ("epochs", "max_steps", "seed", "precision", "deterministic")
"""The ``run.*`` settings that change a run's result (with the whole ``config:`` section)."""


def config_digest(config: Path, overrides: Sequence[str], code: Mapping[str, str] | None = None) -> str:
    """SHA-256 of what determines a run's result: the resolved ``config:`` section, :data:`RESULT_KEYS` (and
    ``run.early_stop_patience`` when set),
    and ``code``: tags of code the result depends on beyond its config (e.g. a pretrained network's).

    A cached result is reused only while this matches, so editing a config reruns its cached runs."""
    from contrasuite.pipelines.config import load_config
    from contrasuite.pipelines.precision import planned_precision

    resolved = load_config(config, list(overrides)).resolved
    run = resolved.get("run", {})
    run["precision"] = planned_precision(run["precision"], run["device"])  # auto -> what this machine runs
    key = {"config": resolved.get("config", {}), "run": {k: run.get(k) for k in RESULT_KEYS}}
    if run.get("early_stop_patience"):  # absent at 0 (never), so the digests made before the key existed stay valid
        key["run"]["early_stop_patience"] = run["early_stop_patience"]
    if code:  # absent when not given, so the digests made before ``code`` existed stay valid
        key["code"] = dict(code)
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()


def thread_env(threads: int, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment with ``threads`` OpenMP/MKL threads (and ``extra`` variables)."""
    return {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads), **(extra or {})}


@dataclass(frozen=True)
class Finished:
    """A command that exited with status 0."""

    stdout: str
    cpu_seconds: float
    """User plus system CPU time of the child, all its threads."""


def run_cli(args: Sequence[str], log: Path, env: Mapping[str, str]) -> Finished:
    """Run ``contrasuite ARGS`` (this interpreter's ``contrasuite.pipelines.cli``) in ``ROOT`` with ``env``.

    Its command line, stderr and then stdout are appended to ``log``. Raises ``RuntimeError`` naming the
    command, its exit status and ``log`` when it fails.
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    command = "contrasuite " + shlex.join(args)
    with log.open("a") as handle:
        handle.write(f"$ {command}\n")
        handle.flush()
        proc = subprocess.Popen([sys.executable, "-m", "contrasuite.pipelines.cli", *args], stdout=subprocess.PIPE,
                                stderr=handle, text=True, env=dict(env), cwd=ROOT)
        with proc.stdout:  # read to the end before waiting, so a full pipe cannot block the child
            stdout = proc.stdout.read()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        handle.write(stdout)
    if proc.returncode:
        raise RuntimeError(f"{command} failed with exit status {proc.returncode}; see {log}")
    return Finished(stdout, usage.ru_utime + usage.ru_stime)


def run_folder(stdout: str) -> Path:
    """The run folder that ``contrasuite train`` printed last (``run folder: PATH``)."""
    for line in reversed(stdout.splitlines()):
        if line.startswith("run folder:"):
            return Path(line.removeprefix("run folder:").strip())
    raise RuntimeError("no 'run folder:' line in the output of contrasuite train")


@dataclass(frozen=True)
class TestedRun:
    """A run trained by ``contrasuite train`` and tested by ``contrasuite eval``."""

    run_dir: Path
    test: dict[str, Any]
    """``eval_test.json``: the checkpoint, its position (``epoch``, ``global_step``) and ``metrics``."""
    command: str
    """The training command line (``contrasuite train CONFIG OVERRIDES``)."""
    train_seconds: float
    eval_seconds: float
    cpu_seconds: float
    """User plus system CPU time of both children; for a resumed run, plus the training CPU time of its earlier
    processes up to the checkpoint it resumed from (``earlier_train_cpu_seconds`` in ``status.json``; their setup
    and any work after that checkpoint are not counted)."""

    def val(self) -> dict[str, Any]:
        """``eval_val.json``: the validation history and the ``best`` score the checkpoint was chosen by."""
        return json.loads((self.run_dir / "eval_val.json").read_text())


def train_and_test(config: Path | str, overrides: Sequence[str], log: Path, env: Mapping[str, str], *,
                   checkpoint: str | None = None, data_root: str | None = None) -> TestedRun:
    """``contrasuite train CONFIG run.resume=auto OVERRIDES``, then ``contrasuite eval RUN_DIR [--checkpoint C]``
    (default: the run's ``run.eval_checkpoint``), both in children with ``env``, logged to ``log``.

    An interrupted run of the same config (a report stopped with its machine) is continued, not begun
    again. The training seconds are the trainer's (the fit loop, summed over the processes of a resumed run)."""
    args = ["train", str(config), "run.resume=auto", *overrides, *data_root_args(data_root)]
    started = time.time()
    trained = run_cli(args, log, env)
    run_dir = run_folder(trained.stdout)
    status = read_json(run_dir / "status.json")
    # The trainer's count (summed over a resumed run's processes); a run folder without one: the child's wall time.
    train_seconds = status.get("train_seconds", time.time() - started)
    started = time.time()
    tested = run_cli(["eval", str(run_dir), *(["--checkpoint", checkpoint] if checkpoint else [])], log, env)
    return TestedRun(run_dir, json.loads((run_dir / "eval_test.json").read_text()), "contrasuite " + shlex.join(args),
                     train_seconds, time.time() - started,
                     trained.cpu_seconds + tested.cpu_seconds + status.get("earlier_train_cpu_seconds", 0.0))
