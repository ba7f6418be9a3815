"""The ``contrasuite`` command.

    contrasuite train CONFIG [key=value ...] [--data-root DIR]   (CONFIG: a file, or a shipped name: image_ssl/infonce)
    contrasuite eval RUN_DIR [--checkpoint best|last]
    contrasuite resume RUN_DIR [key=value ...]
    contrasuite validate-configs [--root DIR]   (default: the shipped configs)
    contrasuite smoke [CONFIG ...]         -> contrasuite.pipelines.smoke.main(argv)
    contrasuite export RUN_DIR --format F --out DIR   -> contrasuite.pipelines.export.main(argv)
    contrasuite list                       tasks, objectives, shipped configs, reports, benches, domain commands
    contrasuite data list|fetch NAME|check [NAME]   -> contrasuite.pipelines.data_command.main(argv)
    contrasuite bench NAME [args ...]      -> the engine's bench NAME, or domain NAME's bench.py: main(argv)
    contrasuite compare NAME [args ...]    -> domain NAME's report.py: main(argv)
    contrasuite COMMAND [args ...]         -> the domain module that declares COMMAND: main(argv)
                                              (upscale, retrieve, translate, code-search, generate-negatives)

Domains' entries are found by :mod:`contrasuite.pipelines.catalog`; this file names no domain. Run
several processes with ``torchrun --nproc_per_node N -m contrasuite.pipelines.cli train ...``.
Options and ``key=value`` overrides may come in any order. Bad input (a config key, a data file, a
checkpoint, a locked run folder) exits with status 2 and one line naming it; Ctrl-C exits 130 with one
line; a run stopped by SIGTERM/SIGUSR1/SIGINT saves ``last.pt`` and exits ``128 + signal`` with one line
(:mod:`contrasuite.pipelines.preemption`); anything else is a bug: its traceback, then one line saying
so, exit 1.
"""

from __future__ import annotations

import argparse
import importlib
import json
import re
import sys
import traceback
from pathlib import Path
from typing import Sequence

from contrasuite.pipelines.catalog import Entry, benches, domain_commands, listing, reports
from contrasuite.pipelines.noise import silence_expected_noise

EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130
"""128 + SIGINT, as a shell reports a process that Ctrl-C stopped."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="contrasuite", description="Train, evaluate and compare contrastive pipelines.")
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser("train", help="train a run config")
    train.add_argument("config", help="a YAML file, or a shipped config's name (image_ssl/infonce)")
    train.add_argument("overrides", nargs="*", help="key=value, e.g. config.objective.terms.0.name=weince")
    train.add_argument("--data-root", default=None, help="data root (beats run.data_root and $CONTRASUITE_DATA)")
    ev = sub.add_parser("eval", help="evaluate a run's checkpoint on the test split")
    ev.add_argument("run_dir", type=Path)
    ev.add_argument("--checkpoint", choices=("best", "last"), default=None, help="default: run.eval_checkpoint")
    res = sub.add_parser("resume", help="continue an interrupted run from checkpoints/last.pt")
    res.add_argument("run_dir", type=Path)
    res.add_argument("overrides", nargs="*", help="deliberate config changes, e.g. run.epochs=20")
    val = sub.add_parser("validate-configs", help="load and validate every YAML under a folder")
    val.add_argument("--root", type=Path, default=None, help="default: the shipped configs")
    for name, entry in domain_commands().items():
        cmd = sub.add_parser(name, help=f"{entry.summary} (contrasuite {name} --help)")
        cmd.add_argument("args", nargs=argparse.REMAINDER, help="its own arguments (contrasuite NAME --help)")
    export = sub.add_parser("export", help="a run's model as ONNX, TorchScript, safetensors, ... (contrasuite export --help)")
    export.add_argument("args", nargs=argparse.REMAINDER, help="RUN_DIR --format F --out DIR [--checkpoint best|last]")
    smoke = sub.add_parser("smoke", help="two CPU steps of each full-scale config on a data subset (see --help)")
    smoke.add_argument("args", nargs=argparse.REMAINDER, help="[CONFIG ...] [--data-root DIR --json FILE]")
    sub.add_parser("list", help="tasks, objectives with their parameters, shipped configs, reports and benches")
    data = sub.add_parser("data", help="the datasets: list, fetch NAME, check [NAME] (contrasuite data --help)")
    data.add_argument("args", nargs=argparse.REMAINDER, help="list | fetch NAME | check [NAME] [--data-root DIR]")
    for name, entries in (("bench", benches()), ("compare", reports())):
        p = sub.add_parser(name, help=f"one of: {', '.join(entries)} (contrasuite {name} NAME --help for its options)",
                           formatter_class=argparse.RawDescriptionHelpFormatter,
                           epilog="names:\n" + "\n".join(f"  {n:18s} {e.summary}" for n, e in entries.items()))
        p.add_argument("name", metavar="NAME")
        p.add_argument("args", nargs=argparse.REMAINDER, help="options of that command (see contrasuite NAME --help)")
    return parser


def validate_configs(root: Path) -> int:
    """Validate every ``*.yaml`` under ``root``; print each problem; the number of bad files."""
    from contrasuite.pipelines.config import ConfigError, load_config

    files = sorted(root.rglob("*.yaml"))
    if not files:
        print(f"no YAML files under {root}", file=sys.stderr)
        return 1
    bad = 0
    for path in files:
        try:
            load_config(path)
        except ConfigError as err:
            bad += 1
            print(f"FAIL {err}", file=sys.stderr)
        else:
            print(f"ok   {path}")
    print(f"{len(files) - bad}/{len(files)} configs valid")
    return bad


def _dispatch(verb: str, entries: dict[str, Entry], name: str, argv: list[str]) -> int:
    if name not in entries:
        print(f"contrasuite {verb}: no {verb} named {name!r}; known: {', '.join(entries)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return int(importlib.import_module(entries[name].module).main(argv) or 0)


def _forwarded() -> set[str]:
    """Commands whose arguments go unparsed to their own ``main(argv)`` (which has its own ``--help``)."""
    return {"smoke", "export", "data", *domain_commands()}


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse with options allowed after the overrides (``train CONFIG --data-root D run.seed=1``)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in _forwarded():
        return argparse.Namespace(command=argv[0], args=argv[1:])
    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    overrides = [a for a in extra if "=" in a and not a.startswith("-")]
    if len(overrides) < len(extra) or (overrides and not hasattr(args, "overrides")):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if overrides:
        args.overrides = [*args.overrides, *overrides]
    return args


def main(argv: Sequence[str] | None = None) -> int:
    silence_expected_noise()
    args = _parse(argv)
    try:
        return _run(args)
    except ModuleNotFoundError as err:
        from contrasuite.pipelines.registry import missing_extra

        message = missing_extra(err)
        if message is None:
            raise
        print(f"contrasuite {args.command}: {message}", file=sys.stderr)
        return EXIT_BAD_INPUT


def _out_of_memory(err: BaseException) -> bool:
    """CUDA's OutOfMemoryError, Python's MemoryError, or the CPU allocator's refusal (a RuntimeError)."""
    return isinstance(err, MemoryError) or type(err).__name__ == "OutOfMemoryError" or "can't allocate memory" in str(err)


def _lost_peer(err: BaseException) -> bool:
    """A collective that failed because another rank died (torch's DistError, or gloo's closed connection)."""
    import torch.distributed as dist

    text = str(err)
    lost = ("Connection closed by peer", "Connection reset by peer", "connectFullMesh failed")
    return isinstance(err, dist.DistError) or any(words in text for words in lost)


def _own_words(err: BaseException) -> str:
    """An error's own words without a ``[enforce fail at ...]`` / ``[file.cc:N]`` prefix, on one line."""
    text = re.sub(r"^\[[^\]]*\]\s*(err == 0\.\s*)?", "", " ".join(str(err).split()))
    return text[:200] or type(err).__name__


def _run(args: argparse.Namespace) -> int:
    from contrasuite.core.task.errors import ConfigValueError, DataError, SetupError, one_line
    from contrasuite.domains.exporting import ExportError
    from contrasuite.pipelines import distributed, trainer  # heavy imports only for commands that need them
    from contrasuite.pipelines.checkpoint import CheckpointError
    from contrasuite.pipelines.config import ConfigError, config_root, load_config
    from contrasuite.pipelines.preemption import Preempted
    from contrasuite.pipelines.run_dir import RunFolderError
    from contrasuite.pipelines.run_lock import RunLockedError
    from contrasuite.pipelines.step import NonFiniteStepError

    try:
        if args.command == "train":
            run_dir = trainer.train(load_config(args.config, args.overrides, data_root=args.data_root))
            print(f"run folder: {run_dir}")
        elif args.command == "resume":
            print(f"run folder: {trainer.resume(args.run_dir, args.overrides)}")
        elif args.command == "eval":
            print(f"evaluating {args.run_dir} on the test split ({args.checkpoint or 'run.eval_checkpoint'})", file=sys.stderr)
            print(json.dumps(trainer.evaluate(args.run_dir, args.checkpoint), indent=2))
        elif args.command == "smoke":
            from contrasuite.pipelines.smoke import main as smoke_main

            return smoke_main(args.args)
        elif args.command == "export":
            from contrasuite.pipelines.export import main as export_main

            return export_main(args.args)
        elif args.command == "data":
            from contrasuite.pipelines.data_command import main as data_main

            return data_main(args.args)
        elif args.command == "list":
            print(listing())
        elif args.command == "validate-configs":
            return 1 if validate_configs(args.root or config_root()) else 0
        elif args.command == "bench":
            return _dispatch("bench", benches(), args.name, args.args)
        elif args.command == "compare":
            return _dispatch("compare", reports(), args.name, args.args)
        else:
            return _dispatch(args.command, domain_commands(), args.command, args.args)
    except (ConfigError, ConfigValueError, CheckpointError, FileNotFoundError, DataError, RunLockedError, SetupError,
            ExportError, RunFolderError) as err:
        print(f"contrasuite {args.command}: {one_line(err)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except (NonFiniteStepError, distributed.RanksDivergedError) as err:
        print(f"contrasuite {args.command}: {one_line(err)}", file=sys.stderr)
        return 1
    except Preempted as err:
        print(f"contrasuite {args.command}: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print(f"contrasuite {args.command}: interrupted (Ctrl-C); a run folder keeps its last checkpoint "
              "(contrasuite resume RUN_DIR)", file=sys.stderr)
        return EXIT_INTERRUPTED
    except ModuleNotFoundError:
        raise  # main() names the extra to install
    except Exception as err:  # noqa: BLE001 - the boundary: a bug shows its traceback, then one line says so
        if _lost_peer(err):
            print(f"contrasuite {args.command}: lost another process of the group ({_own_words(err)[:160]}); under "
                  "torchrun --max-restarts with run.resume=auto the group restarts and continues from last.pt "
                  "(docs/engine.md, Distributed)", file=sys.stderr)
            return 1
        if _out_of_memory(err):
            print(f"contrasuite {args.command}: out of memory ({_own_words(err)}): lower the config's batch size, "
                  "or use GradCache where the domain offers it (docs/engine.md)", file=sys.stderr)
            return EXIT_BAD_INPUT
        traceback.print_exc()
        where = f"; the run folder {err.run_dir} keeps its metrics.csv and status.json" if hasattr(err, "run_dir") else ""
        print(f"contrasuite {args.command}: unexpected {type(err).__name__} (traceback above): a bug in contrasuite "
              f"or a library it calls, not a problem with your input; please report it with the traceback{where}",
              file=sys.stderr)
        return 1
    finally:
        distributed.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
