"""``contrasuite generate-negatives CONFIG [key=value ...] [--out FILE] [--data-root DIR]``: write hard negatives.

Reads an ``image_text`` run config, loads its ``config.data`` pairs (every emoji style), generates
hard negatives as ``config.negatives`` says, and writes the JSONL (one negative a line, each with its
operation) plus the edited images next to it (``images/<style>/NNNNNN.png``). Point a run's
``config.negatives_file`` at the result to train and evaluate with exactly these negatives.
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path
from typing import Sequence

from contrasuite.pipelines.api import ConfigError, load_config

COMMAND = "generate-negatives"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="contrasuite generate-negatives", description=__doc__.splitlines()[0])
    parser.add_argument("config", type=Path, help="an image_text run config")
    parser.add_argument("overrides", nargs="*", help="key=value, e.g. config.negatives.per_operation=3")
    parser.add_argument("--out", type=Path, default=None, help="output JSONL (default: config.negatives.output)")
    parser.add_argument("--data-root", default=None)
    args = parser.parse_args(argv)
    loaded = load_config(args.config, args.overrides, data_root=args.data_root)
    if loaded.task_name != "image_text":
        raise ConfigError(f"{args.config}: a config of task {loaded.task_name!r}; "
                          f"generate-negatives needs an image_text config")
    cfg = loaded.config
    from contrasuite.domains.image_text.negatives import generate, write_negatives
    from contrasuite.domains.image_text.style_data import load_pairs

    pairs = load_pairs(cfg, Path(loaded.run.data_root))
    texts, images = generate(pairs, cfg.negatives)
    out = write_negatives(args.out or Path(cfg.negatives.output), texts, images)
    counts = Counter(r["operation"] for r in texts)
    print(f"{len(texts)} text negatives: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    for style, (records, _) in images.items():
        by = Counter(f"{r['operation']}/{r['editor']}" for r in records)
        print(f"{style}: {len(records)} image negatives: " + ", ".join(f"{k} {v}" for k, v in sorted(by.items())))
    print(f"negatives file: {out}")
    return 0
