"""One comparison runner behind every ``contrasuite compare <domain>``.

A domain's ``report.py`` declares a :class:`Comparison`: its page, its arms (a shipped config and
overrides, in a table group such as a dataset), how to render the page from run records, and what
``--quick`` shrinks. :func:`main` gives every report the same flags::

    contrasuite compare <domain> [--seeds 0 1 2] [--jobs N] [--threads T] [--arms A B ...]
                                 [--out PAGE] [--cache DIR] [--records DIR] [--report-only] [--quick]
                                 [--data-root DIR] [domain flags]

For each (arm, seed) the runner looks for a record ``<records>/<arm>_seed<seed>.json`` (default records:
``docs/results/records/<page>/``). A record is current while its ``config_sha256`` (the resolved config
and the result-changing ``run.*`` keys, :func:`config_digest`) and its ``data_version`` (the SHA-256s of
the declared datasets the config reads) match; every other (arm, seed) is trained and tested in a child
process (``contrasuite train`` then ``eval``, ``--jobs`` at a time with ``--threads`` each; an interrupted
one resumes), and its record written: the command, digests, code commit, machine, library versions,
test metrics, the checkpoint selected on validation and timings. The page is then rendered from the
records and written with ``page.json`` (the arguments that make it), which the CI test re-renders.

A change that moves config keys without changing any run changes the digests: ``records/config_migrations.json``
maps each old digest to the new one, so a record made under the old one stays current, and
:func:`migrate_records` rewrites such records to the new digest (keeping the old one in ``config_migrated``).
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import importlib
import json
import os
import platform
import shlex
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from contrasuite.pipelines.cli_runs import ROOT, TestedRun, config_digest, thread_env, train_and_test
from contrasuite.pipelines.run_dir import cpu_name, read_json, write_json

RESULTS = ROOT / "docs" / "results"
"""The results pages; their records are under ``records/<page>/``."""
PAGE_FILE = "page.json"
"""In a page's records folder: the ``contrasuite compare`` arguments that render it."""
MIGRATIONS = RESULTS / "records" / "config_migrations.json"
"""Config digests of records made before a change that moved config keys without changing what a run does
(issue 43: ``config.optim``), each with the digest the same run has since (``digests: {old: {to, commit, ...}}``)."""


@dataclass(frozen=True)
class Arm:
    """One row of a comparison: a shipped config (relative to the repository root) and its overrides."""

    name: str
    config: str
    overrides: tuple[str, ...] = ()
    group: str = ""
    """The table section it belongs to (a dataset), empty for one table."""
    checkpoint: str | None = None
    """The checkpoint ``contrasuite eval`` tests; None: the run's ``run.eval_checkpoint``."""
    after: str | None = None
    """An arm whose run this one needs: ``{after}`` in ``overrides`` becomes its run folder."""
    after_seed: int | None = None
    """The seed of the ``after`` arm's run to start from; None: this arm's own seed. (PCL-SR's protocol:
    every seed fine-tunes the one converged seed-0 model.)"""
    seeds: tuple[int, ...] | None = None
    """The only seeds this arm runs at (a pretrain that every seed starts from), None: every ``--seeds``."""

    def runs_at(self, seed: int) -> bool:
        """Whether this arm runs at ``seed``."""
        return self.seeds is None or seed in self.seeds

    def prior_seed(self, seed: int) -> int:
        """The seed of the ``after`` arm's run that this arm at ``seed`` starts from."""
        return seed if self.after_seed is None else self.after_seed


Render = Callable[[list[dict[str, Any]], str], str]
"""``(current records, the page's command) -> the page's Markdown``."""


@dataclass(frozen=True)
class Comparison:
    """What ``contrasuite compare <domain>`` trains and how its page is drawn."""

    domain: str
    page: str
    """``docs/results/<page>.md``; its records under ``docs/results/records/<page>/``."""
    arms: tuple[Arm, ...]
    render: Render
    quick: tuple[str, ...] = ()
    """Overrides that make each run a few steps on a few examples (``--quick``)."""
    data_version: Callable[[Arm], str] | None = None
    """The version of the data an arm reads; default: its declared datasets' checksums."""
    extra: Callable[[Arm, TestedRun], dict[str, Any]] = field(default=lambda arm, run: {})
    """More fields for an arm's record, read from its tested run."""
    code: Mapping[str, str] = field(default_factory=dict)
    """Tags of code the results depend on beyond their configs (a pretrained network's name): part of the
    config digest, so records made with another are not current."""


# -- records ------------------------------------------------------------------------------------------------

def record_file(records: Path, arm: str, seed: int) -> Path:
    """``<records>/<arm>_seed<seed>.json``."""
    return records / f"{arm}_seed{seed}.json"


def load_records(records: Path) -> list[dict[str, Any]]:
    """Every run record in ``records`` (not ``page.json``), sorted by file name."""
    if not records.is_dir():
        return []
    return [read_json(f) for f in sorted(records.glob("*.json")) if f.name != PAGE_FILE]


def declared_data_version(config: str, overrides: Sequence[str] = ()) -> str:
    """12 hex digits over the declared files (path and SHA-256) of every dataset the config reads
    (``domains/<d>/datasets.py``), ``undeclared`` when it reads none that is declared."""
    from contrasuite.pipelines.config import load_config

    loaded = load_config(ROOT / config, list(overrides))
    try:
        module = importlib.import_module(f"{loaded.task_class.__module__.rsplit('.', 1)[0]}.datasets")
    except ModuleNotFoundError:
        return "undeclared"
    names = module.uses(loaded.resolved)
    if not names:
        return "undeclared"
    files = sorted((f.path, f.sha256 or "") for dataset in module.DATASETS if dataset.name in names for f in dataset.files)
    return hashlib.sha256(json.dumps(files).encode()).hexdigest()[:12]


def keys(comparison: Comparison, arm: Arm, seed: int) -> tuple[str, str]:
    """The ``(config_sha256, data_version)`` a current record of ``arm`` at ``seed`` carries."""
    # the prior's folder is a path on this machine: the digest names the arm (and another seed) it comes from
    prior = f"run-of-{arm.after}" + (f"-seed{arm.prior_seed(seed)}" if arm.prior_seed(seed) != seed else "")
    overrides = [o.replace("{after}", prior) for o in arm.overrides] + [f"run.seed={seed}"]
    version = comparison.data_version(arm) if comparison.data_version else declared_data_version(arm.config, overrides)
    return config_digest(ROOT / arm.config, overrides, comparison.code or None), version


@functools.cache
def _migrations() -> dict[str, dict[str, Any]]:
    return read_json(MIGRATIONS).get("digests", {})


def migrated(digest: str | None) -> str | None:
    """The digest a record made under ``digest`` has today: followed through :data:`MIGRATIONS`."""
    seen: set[str] = set()
    while digest in _migrations() and digest not in seen:
        seen.add(digest)
        digest = _migrations()[digest]["to"]
    return digest


def is_current(record: Mapping[str, Any] | None, digest: str, version: str) -> bool:
    """Whether ``record`` was made under this config digest (or one :data:`MIGRATIONS` maps to it) and data version."""
    return bool(record) and migrated(record.get("config_sha256")) == digest and record.get("data_version") == version


def migrate_records(records: Path) -> list[str]:
    """Rewrite each record in ``records`` whose digest :data:`MIGRATIONS` maps to another: ``config_sha256`` becomes
    today's digest and ``config_migrated`` keeps ``{"from": its digest, "commit": the change that moved the keys}``.
    Returns the files rewritten."""
    done = []
    for path in sorted(records.glob("*.json")):
        record = read_json(path)
        old = record.get("config_sha256")
        if path.name == PAGE_FILE or migrated(old) == old:
            continue
        moved = {"from": old, "commit": _migrations()[old]["commit"]}
        write_json(_with_digest(record, migrated(old), moved), path, sort_keys=False)
        done.append(path.name)
    return done


def make_record(comparison: Comparison, arm: Arm, seed: int, run: TestedRun, digest: str, version: str,
                threads: int, load: float) -> dict[str, Any]:
    """The record of one tested run (see the module docstring for its fields)."""
    env = read_json(run.run_dir / "environment.json")
    status = read_json(run.run_dir / "status.json")
    steps = int(status.get("global_step") or 0)  # 0 for an arm evaluated without training (run.epochs=0)
    epochs = int(status.get("epoch") or 0)
    selected_step = int(run.test.get("global_step") or steps)
    val = read_json(run.run_dir / "eval_val.json")
    return {
        "page": comparison.page, "arm": arm.name, "group": arm.group, "seed": seed,
        "command": run.command, "config": arm.config, "overrides": list(arm.overrides),
        "config_sha256": digest, "data_version": version,
        "code": {"commit": env.get("git_commit")},
        "machine": {"platform": env.get("platform", platform.platform()), "cpu": cpu_name(), "cores": os.cpu_count(),
                    "device": env.get("device"), "threads": threads, "load_average_1min": load,
                    "precision": env.get("precision")},
        "libraries": {"python": env.get("python"), **env.get("packages", {})},
        "metrics": run.test.get("metrics", {}),
        "selected": {"checkpoint": run.test.get("checkpoint"), "epoch": run.test.get("epoch"),
                     "global_step": selected_step, "validation_metric": val.get("best_metric"),
                     "validation": val.get("best")},
        "timings": {"train_seconds": round(run.train_seconds, 1), "eval_seconds": round(run.eval_seconds, 1),
                    "cpu_seconds": round(run.cpu_seconds, 1), "epochs_run": epochs, "steps_run": steps,
                    "selected_epoch": run.test.get("epoch"),
                    "seconds_per_epoch": round(run.train_seconds / max(epochs, 1), 2),
                    **_to_selected(run, selected_step, steps)},
        "run_dir": str(run.run_dir),
        "recorded": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        **comparison.extra(arm, run),
    }


def _to_selected(run: TestedRun, selected_step: int, steps: int) -> dict[str, float]:
    """``seconds_to_selected`` (wall) and ``cpu_seconds_to_selected``: the training time the selected checkpoint
    holds (validations included; the trainer's ``train_times``). A checkpoint written before it held one: the
    wall training time scaled by the selected step's share of the steps run, and no CPU time."""
    if "train_cpu_seconds" in run.test:
        return {"seconds_to_selected": run.test["train_seconds"], "cpu_seconds_to_selected": run.test["train_cpu_seconds"]}
    return {"seconds_to_selected": round(run.train_seconds * min(selected_step, steps) / max(steps, 1), 1)}


def _with_digest(record: Mapping[str, Any], digest: str | None, moved: dict[str, str]) -> dict[str, Any]:
    """``record`` with ``config_sha256`` set to ``digest`` and ``config_migrated: moved`` after it, keys in order."""
    out: dict[str, Any] = {}
    for key, value in record.items():
        if key != "config_migrated":
            out[key] = value
        if key == "config_sha256":
            out.update(config_sha256=digest, config_migrated=moved)
    return out


# -- running --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Settings:
    """The shared flags, parsed."""

    seeds: tuple[int, ...]
    jobs: int
    threads: int
    cache: Path
    records: Path
    data_root: str | None


def train_arm(comparison: Comparison, arm: Arm, seed: int, settings: Settings, digest: str, version: str,
              prior_run: str | None = None) -> dict:
    """Train and test ``arm`` at ``seed`` in children and write its record (``digest``, ``version``: its
    :func:`keys`); ``prior_run``: the ``after`` arm's run folder, for ``{after}``."""
    overrides = [o.replace("{after}", prior_run) if prior_run else o for o in arm.overrides]
    overrides += [f"run.seed={seed}", f"run.output_root={settings.cache.resolve() / 'runs'}", "run.progress=false"]
    load = round(os.getloadavg()[0], 2)
    run = train_and_test(arm.config, overrides, settings.cache / "logs" / f"{arm.name}_seed{seed}.log",
                         thread_env(settings.threads), checkpoint=arm.checkpoint, data_root=settings.data_root)
    record = make_record(comparison, arm, seed, run, digest, version, settings.threads, load)
    write_json(record, record_file(settings.records, arm.name, seed))
    return record


def run_missing(comparison: Comparison, arms: Sequence[Arm], settings: Settings) -> list[str]:
    """Train every (arm, seed) without a current record, ``settings.jobs`` at a time; arms that name
    another with ``after`` wait for its record. Returns the failures, one line each."""
    failures: list[str] = []
    by_name = {a.name: a for a in comparison.arms}
    waves = [[a for a in arms if not a.after], [a for a in arms if a.after]]
    for wave in waves:
        pending = []
        for arm in wave:
            needed = {d.prior_seed(s) for d in arms if d.after == arm.name for s in settings.seeds if d.runs_at(s)}
            for seed in sorted({s for s in settings.seeds if arm.runs_at(s)} | needed):
                digest, version = keys(comparison, arm, seed)
                if not is_current(read_json(record_file(settings.records, arm.name, seed)), digest, version):
                    pending.append((arm, seed, digest, version))
        if not pending:
            continue
        print(f"{comparison.page}: training {len(pending)} run(s), {settings.jobs} at a time", flush=True)

        def one(item: tuple[Arm, int, str, str]) -> None:
            arm, seed, digest, version = item
            prior_run = None
            if arm.after:
                prior_seed = arm.prior_seed(seed)
                prior = read_json(record_file(settings.records, arm.after, prior_seed))
                if not is_current(prior, *keys(comparison, by_name[arm.after], prior_seed)):
                    failures.append(f"{arm.name} seed {seed}: needs a current record of {arm.after} seed {prior_seed}")
                    return
                prior_run = prior["run_dir"]
            print(f"== {arm.name}, seed {seed}", flush=True)
            try:
                train_arm(comparison, arm, seed, settings, digest, version, prior_run)
            except RuntimeError as err:
                failures.append(f"{arm.name} seed {seed}: {err}")

        with ThreadPoolExecutor(max(1, settings.jobs)) as pool:
            list(pool.map(one, pending))
    return failures


def current_records(comparison: Comparison, records: Path) -> tuple[list[dict], list[str]]:
    """The records of ``records`` that are current for an arm of ``comparison``, and a line for each stale one.

    Records of arms the comparison does not declare (an official code's run, written by its own script, or a
    value the report computes) are kept as they are: they carry no config digest."""
    arms = {a.name: a for a in comparison.arms}
    current, stale = [], []
    for record in load_records(records):
        arm = arms.get(record.get("arm", ""))
        if arm is None or is_current(record, *keys(comparison, arm, int(record["seed"]))):
            current.append(record)
        else:
            stale.append(f"{record['arm']} seed {record['seed']}")
    return current, stale


def parser(prog: str, description: str) -> argparse.ArgumentParser:
    """The flags every ``contrasuite compare <domain>`` takes; a domain adds its own to it."""
    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2], help="training seeds (default 0 1 2)")
    p.add_argument("--jobs", type=int, default=1, help="runs trained at once (default 1)")
    p.add_argument("--threads", type=int, default=1, help="torch/OpenMP threads per run (default 1)")
    p.add_argument("--arms", nargs="+", default=None, help="only these arms (default: all)")
    p.add_argument("--out", type=Path, default=None, help="the page (default docs/results/<page>.md)")
    p.add_argument("--cache", type=Path, default=None, help="run folders and logs (default runs/compare/<page>)")
    p.add_argument("--records", type=Path, default=None,
                   help="run records (default docs/results/records/<page>; with --quick <cache>/records)")
    p.add_argument("--report-only", action="store_true", help="train nothing: render the page from the records")
    p.add_argument("--quick", action="store_true", help="a few steps per run, records and page under --cache")
    p.add_argument("--data-root", default=None)
    return p


SHARED_FLAGS = ("--seeds", "--jobs", "--threads", "--arms", "--out", "--cache", "--records", "--report-only",
                "--quick", "--data-root")


def page_args(argv: Sequence[str]) -> list[str]:
    """The arguments that decide what a page shows (the domain's own flags): ``argv`` without the shared ones."""
    out, skip = [], False
    for arg in argv:
        if arg.startswith("--"):
            skip = arg.split("=", 1)[0] in SHARED_FLAGS
            if skip:
                continue
        elif skip:
            continue
        out.append(arg)
    return out


def main(domain: str, build: Callable[[argparse.Namespace], Comparison], argv: Sequence[str] | None,
         description: str, add_arguments: Callable[[argparse.ArgumentParser], None] | None = None) -> int:
    """``contrasuite compare <domain>``: train what is missing, render the page; exit 1 when a run failed."""
    argv = list(argv) if argv is not None else sys.argv[1:]
    p = parser(f"contrasuite compare {domain}", description)
    if add_arguments:
        add_arguments(p)
    args = p.parse_args(argv)
    comparison = build(args)
    cache = args.cache or Path("runs") / "compare" / comparison.page
    records = args.records or (cache / "records" if args.quick else RESULTS / "records" / comparison.page)
    out = args.out or (cache / f"{comparison.page}.md" if args.quick else RESULTS / f"{comparison.page}.md")
    settings = Settings(tuple(args.seeds), args.jobs, args.threads, cache, records, args.data_root)
    unknown = sorted(set(args.arms or ()) - {a.name for a in comparison.arms})
    if unknown:
        p.error(f"--arms: unknown {unknown}; this comparison has {[a.name for a in comparison.arms]}")
    if args.quick:  # part of each arm, so its records are keyed by the shortened config
        comparison = replace(comparison, arms=tuple(replace(a, overrides=(*a.overrides, *comparison.quick)) for a in comparison.arms))
    arms = [a for a in comparison.arms if args.arms is None or a.name in args.arms]
    failures = [] if args.report_only else run_missing(comparison, arms, settings)
    current, stale = current_records(comparison, records)
    if stale:
        print(f"{len(stale)} record(s) made under another config or data, left out of the page: {', '.join(stale)}",
              file=sys.stderr)
    own = page_args(argv)
    command = shlex.join(["contrasuite", "compare", domain, *own, "--seeds", *map(str, sorted({r["seed"] for r in current
                                                                                          if "seed" in r} or args.seeds))])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(comparison.render(current, command))
    write_json({"domain": domain, "args": own, "quick": args.quick}, records / PAGE_FILE)
    print(f"wrote {out} from {len(current)} record(s) in {records}")
    for line in failures:
        print(f"FAILED {line}", file=sys.stderr)
    return 1 if failures else 0
