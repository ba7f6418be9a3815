"""``contrasuite code-search``: mine a dataset, index a source tree, search it.

    contrasuite code-search mine --name reduced|full [--out DIR] [--source PATH ...] [--no-stdlib] [--no-site-packages] [--max-pairs N ...]
    contrasuite code-search mine --out DIR [...]     (MineConfig's defaults, as --name full)
    contrasuite code-search index PATH --out INDEX [--model NAME_OR_DIR | --run RUN_DIR]
    contrasuite code-search query INDEX "read a csv file into rows" [--top-k 10]

``mine --name NAME`` writes the named set where ``config.data.mined: NAME`` reads it
(``<cache root>/code_search/mined/NAME``, :mod:`~contrasuite.domains.code_search.mined_sets`) with its
parameters; a flag given beside it overrides one. ``--run`` takes the encoder settings from the run's
``config.yaml`` and the weights from its ``checkpoints/best.pt`` (else ``last.pt``); without it the
pretrained ``--model`` is used.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Sequence

from contrasuite.core.task.errors import DataError, one_line
from contrasuite.domains.checkpoint_fit import require_task
from contrasuite.domains.code_search.encoder import EncoderConfig
from contrasuite.domains.code_search.mine import MineConfig
from contrasuite.domains.code_search.mined_sets import MINED_SETS, file_progress, mine_into, mined_folder, set_sources
from contrasuite.domains.code_search.search_index import build_index, search
from contrasuite.domains.init_from import checkpoint_file
from contrasuite.pipelines.api import load_config

COMMAND = "code-search"

EXIT_BAD_INPUT = 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="contrasuite code-search", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("mine", help="mine (docstring summary, code) pairs into a versioned JSONL dataset")
    m.add_argument("--source", type=Path, action="append", default=[], help="a source tree (repeatable)")
    m.add_argument("--no-stdlib", action="store_true", help="do not mine the standard library")
    m.add_argument("--no-site-packages", action="store_true", help="do not mine this interpreter's site-packages")
    m.add_argument("--name", choices=MINED_SETS, default=None,
                   help="a named set: its parameters, and by default its folder <cache root>/code_search/mined/NAME")
    m.add_argument("--out", type=Path, default=None, help="the output folder (default: the named set's)")
    defaults = MineConfig()
    for f in dataclasses.fields(MineConfig):
        default = getattr(defaults, f.name)
        if f.name == "split_fractions":
            m.add_argument("--split-fractions", type=float, nargs=3, default=None, help=f"default {list(default)}")
        else:
            m.add_argument(f"--{f.name.replace('_', '-')}", type=type(default), default=None,
                           help=f"default {default} (or the named set's)")
    i = sub.add_parser("index", help="embed every function under a source tree into an index")
    i.add_argument("source", type=Path)
    i.add_argument("--out", type=Path, required=True, help="INDEX: writes INDEX.safetensors and INDEX.json")
    i.add_argument("--model", default=EncoderConfig.model, help="bundled model name or local model folder")
    i.add_argument("--run", type=Path, default=None, help="a code_search run folder (its encoder and weights)")
    i.add_argument("--max-code-length", type=int, default=EncoderConfig.max_code_length)
    i.add_argument("--batch-size", type=int, default=64)
    i.add_argument("--device", default="cpu")
    q = sub.add_parser("query", help="print the best matching functions with file and line")
    q.add_argument("index", type=Path)
    q.add_argument("text")
    q.add_argument("--top-k", type=int, default=10)
    q.add_argument("--device", default="cpu")
    return parser


def _encoder_from_run(run_dir: Path) -> tuple[EncoderConfig, str]:
    """The encoder settings of a ``code_search`` run and its checkpoint file (``best.pt``, else ``last.pt``)."""
    loaded = load_config(run_dir / "config.yaml")
    require_task(run_dir, loaded.task_name, "code_search", f"{COMMAND} index --run")
    section = loaded.config.encoder
    cfg = EncoderConfig(**{f.name: getattr(section, f.name) for f in dataclasses.fields(EncoderConfig)})
    return cfg, str(checkpoint_file(run_dir))


def _mine(args: argparse.Namespace) -> None:
    """``code-search mine``: the named set's parameters (or MineConfig's), overridden by the flags given."""
    if args.name is None and args.out is None:
        raise ValueError(f"give --name ({' or '.join(MINED_SETS)}: the set a config's config.data.mined reads) "
                         "or --out DIR")
    sources = list(args.source) + set_sources(args.name, not args.no_stdlib, not args.no_site_packages)
    if not sources:
        raise ValueError("no sources (give --source or allow the stdlib/site-packages)")
    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(MineConfig) if getattr(args, f.name) is not None}
    if "split_fractions" in given:
        given["split_fractions"] = tuple(given["split_fractions"])
    cfg = dataclasses.replace(MINED_SETS[args.name] if args.name else MineConfig(), **given)
    mine_into(sources, args.out or mined_folder(args.name), cfg, progress=file_progress)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "mine":
            _mine(args)
        elif args.command == "index":
            if args.run is not None:
                cfg, checkpoint = _encoder_from_run(args.run)
            else:
                cfg, checkpoint = EncoderConfig(model=args.model), None
            cfg = dataclasses.replace(cfg, max_code_length=args.max_code_length)
            build_index(args.source, args.out, cfg, checkpoint, batch_size=args.batch_size, device=args.device)
        else:
            for hit in search(args.index, args.text, args.top_k, args.device):
                doc = f"  # {hit.doc}" if hit.doc else ""
                print(f"{hit.score:7.4f}  {hit.file}:{hit.line}  {hit.name}{doc}")
    except (FileNotFoundError, ValueError, DataError) as err:  # ValueError: ConfigError too
        print(f"contrasuite code-search {args.command}: {one_line(err)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return 0


if __name__ == "__main__":
    sys.exit(main())
