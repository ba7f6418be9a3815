"""The ``contrasuite`` command.

    contrasuite train CONFIG [key=value ...] [--data-root DIR]   (CONFIG: a file, or a shipped name: image_ssl/infonce)
    contrasuite eval RUN_DIR [--checkpoint best|last]
    contrasuite resume RUN_DIR [key=value ...]
    contrasuite validate-configs [--root DIR]   (default: the shipped configs)
    contrasuite upscale RUN_DIR INPUT OUTPUT [--tile N]  -> contrasuite.pipelines.upscale.main(argv)
    contrasuite retrieve RUN_DIR QUERY_IMAGE GALLERY_DIR [--top K]  -> contrasuite.pipelines.retrieve.main(argv)
    contrasuite translate RUN_DIR INPUT_DIR OUTPUT_DIR [--checkpoint best|last]  -> contrasuite.pipelines.translate.main(argv)
    contrasuite code-search mine|index|query ...  -> contrasuite.pipelines.code_search_cli.main(argv)
    contrasuite generate-negatives CONFIG [key=value ...] [--out FILE]  -> contrasuite.pipelines.generate_negatives.main(argv)
    contrasuite smoke [CONFIG ...]         -> contrasuite.pipelines.smoke.main(argv)
    contrasuite list                       tasks, objectives, shipped configs, reports, benches
    contrasuite bench NAME [args ...]      -> contrasuite.pipelines.bench.<NAME>.main(argv)
    contrasuite compare NAME [args ...]    -> contrasuite.pipelines.reports.<NAME>.main(argv)

Run several processes with ``torchrun --nproc_per_node N -m contrasuite.pipelines.cli train ...``.
Options and ``key=value`` overrides may come in any order. Bad input (a config key, a data file, a
checkpoint, a locked run folder) exits with status 2 and one line naming it.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path
from typing import Sequence

from contrasuite.pipelines.catalog import commands, listing

EXIT_BAD_INPUT = 2


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
    up = sub.add_parser("upscale", help="super-resolve an image or folder with a super_resolution run (see --help)")
    up.add_argument("args", nargs=argparse.REMAINDER, help="RUN_DIR INPUT OUTPUT [--tile N --overlap N --checkpoint best|last]")
    ret = sub.add_parser("retrieve", help="top matches of a query image in a gallery with a metric_learning run (see --help)")
    ret.add_argument("args", nargs=argparse.REMAINDER, help="RUN_DIR QUERY_IMAGE GALLERY_DIR [--top K --out PNG --checkpoint best|last]")
    cs = sub.add_parser("code-search", help="mine a code search dataset, index a source tree, query it (see --help)")
    cs.add_argument("args", nargs=argparse.REMAINDER, help="mine|index|query ...")
    gen = sub.add_parser("generate-negatives", help="write hard negatives for an image_text config (see --help)")
    gen.add_argument("args", nargs=argparse.REMAINDER, help="CONFIG [key=value ...] [--out FILE --data-root DIR]")
    tr = sub.add_parser("translate", help="apply a translation run's generator to a folder of images (see --help)")
    tr.add_argument("args", nargs=argparse.REMAINDER, help="RUN_DIR INPUT_DIR OUTPUT_DIR [--checkpoint best|last --device D]")
    smoke = sub.add_parser("smoke", help="two CPU steps of each full-scale config on a data subset (see --help)")
    smoke.add_argument("args", nargs=argparse.REMAINDER, help="[CONFIG ...] [--data-root DIR --json FILE]")
    sub.add_parser("list", help="tasks, objectives with their parameters, shipped configs, reports and benches")
    for name, package in (("bench", "bench"), ("compare", "reports")):
        names = commands(package)
        p = sub.add_parser(name, help=f"one of: {', '.join(names)} (contrasuite {name} NAME --help for its options)",
                           formatter_class=argparse.RawDescriptionHelpFormatter,
                           epilog="names:\n" + "\n".join(f"  {n:18s} {doc}" for n, doc in names.items()))
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


def _dispatch(package: str, name: str, argv: list[str]) -> int:
    module_name = f"contrasuite.pipelines.{package}.{name}"
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if err.name and module_name.startswith(err.name):
            print(f"contrasuite: no {package} named {name!r} (module {module_name} not found); "
                  f"known: {', '.join(commands(package))}", file=sys.stderr)
            return EXIT_BAD_INPUT
        raise
    if not hasattr(module, "main"):
        print(f"contrasuite: {module_name} has no main(argv)", file=sys.stderr)
        return EXIT_BAD_INPUT
    return int(module.main(argv) or 0)


FORWARDED = ("upscale", "retrieve", "code-search", "generate-negatives", "translate", "smoke")
"""Commands whose arguments go unparsed to their own ``main(argv)`` (which has its own ``--help``)."""


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse with options allowed after the overrides (``train CONFIG --data-root D run.seed=1``)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in FORWARDED:
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


def _run(args: argparse.Namespace) -> int:
    from contrasuite.domains.errors import DataError, SetupError, one_line
    from contrasuite.pipelines import distributed, trainer  # heavy imports only for commands that need them
    from contrasuite.pipelines.checkpoint import CheckpointError
    from contrasuite.pipelines.config import ConfigError, config_root, load_config
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
        elif args.command == "upscale":
            from contrasuite.pipelines.upscale import main as upscale_main

            return upscale_main(args.args)
        elif args.command == "retrieve":
            from contrasuite.pipelines.retrieve import main as retrieve_main

            return retrieve_main(args.args)
        elif args.command == "translate":
            from contrasuite.pipelines.translate import main as translate_main

            return translate_main(args.args)
        elif args.command == "code-search":
            from contrasuite.pipelines.code_search_cli import main as code_search_main

            return code_search_main(args.args)
        elif args.command == "generate-negatives":
            from contrasuite.pipelines.generate_negatives import main as generate_negatives_main

            return generate_negatives_main(args.args)
        elif args.command == "smoke":
            from contrasuite.pipelines.smoke import main as smoke_main

            return smoke_main(args.args)
        elif args.command == "list":
            print(listing())
        elif args.command == "validate-configs":
            return 1 if validate_configs(args.root or config_root()) else 0
        else:
            package = "bench" if args.command == "bench" else "reports"
            return _dispatch(package, args.name, args.args)
    except (ConfigError, CheckpointError, FileNotFoundError, DataError, RunLockedError, SetupError) as err:
        print(f"contrasuite {args.command}: {one_line(err)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except (NonFiniteStepError, distributed.RanksDivergedError) as err:
        print(f"contrasuite {args.command}: {one_line(err)}", file=sys.stderr)
        return 1
    finally:
        distributed.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
