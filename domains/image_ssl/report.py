"""``contrasuite compare image_ssl``: the reduced CPU comparison of the image_ssl objectives on CIFAR-10.

Arms: ``configs/image_ssl/reduced_<name>.yaml`` of each objective, tested at the last checkpoint (weighted kNN
and a linear probe on the frozen encoder's features), and ``random_init``: ``reduced_infonce.yaml`` with
``run.epochs=0``, the untrained encoder through the same evaluation. ``contrasuite.pipelines.compare`` trains
each (arm, seed) without a current record, in child processes, and renders the page from the records. One
page per protocol:

- the reduced protocol (``docs/results/image_ssl.md``): its 5 epochs, every objective;
- ``--epochs N`` (``docs/results/image_ssl_epochsN.md``): N epochs of InfoNCE, WEINCE and WEINCE-repro only,
  the question that page asks (does WEINCE's blend help with longer training?).

Each record also keeps the CIFAR-10 copy the run read and the objectives' logged state per epoch (WEINCE's
gate). The page's comparisons are the claims of :data:`EFFECTS` measured on it.

    contrasuite compare image_ssl [--seeds 0 1 2] [--jobs 2] [--arms infonce weince ...]
    contrasuite compare image_ssl --epochs 20 --jobs 2
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path
from typing import Any, Sequence

import yaml

from contrasuite.domains.image_ssl.data import load_cifar10
from contrasuite.pipelines.api import (
    ROOT, Arm, Comparison, Effect, NO_OFFICIAL, compare_main, difference, load_config, logged_per_epoch, mean_std,
)

CONFIG_DIR = "configs/image_ssl"
CONFIGS = (
    "infonce", "dcl", "dhel", "kcl", "weince", "weince_repro", "siglip", "moco", "infonce_ft", "infonce_mochi",
    "infonce_queue",
)
"""The objectives of the reduced protocol, ``configs/image_ssl/reduced_<name>.yaml``, in the page's order."""
EPOCH_CONFIGS = ("infonce", "weince", "weince_repro")
"""The objectives of an ``--epochs N`` page."""
RANDOM_INIT = "random_init"
QUICK = ("run.max_steps=4", "config.batch_size=128", "config.data.train_subset=1000", "config.data.test_subset=1000",
         "config.model.width=8", "config.eval.linear_epochs=5")
"""``--quick``: four steps (the untrained arm stays untrained: ``run.epochs=0``) on 1,000 images."""
PER_ARM_QUICK = {"infonce_mochi": ("config.negatives.warmup_epochs=0",)}  # mix from the first of the four steps


def page_name(epochs: int | None) -> str:
    """``image_ssl`` for the reduced protocol, ``image_ssl_epochsN`` for ``--epochs N``."""
    return "image_ssl" if epochs is None else f"image_ssl_epochs{epochs}"


# -- the claims this comparison measures -------------------------------------------------------------------

_REDUCED = "reduced: small_conv w32, 10k CIFAR-10 images, batch 256, SGD, 5 epochs, last checkpoint"
_LONGER = "reduced, 20 epochs (--epochs 20): small_conv w32, 10k CIFAR-10 images, batch 256, SGD, last checkpoint"
_LINEAR = "test linear-probe accuracy (%), CIFAR-10 (JPEG copy), frozen encoder"
_WEINCE_CLAIM = ("+3.27 linear: InfoNCE 50.01 -> WEINCE 53.28, CIFAR-100, ResNet-18, SimCLR 100 epochs, batch 256, "
                 "mean of 4 encoder seeds (paper Table 2, ICML 2026, arXiv:2606.00262, as the official "
                 "notebooks/analyze_cifar100_r18_repro.ipynb hard-codes it)")
_WEINCE_OFFICIAL = ("the official training code does not adapt to this protocol by configuration (`.cuda()` batches, "
                    "torchvision CIFAR downloads, its ResNets only); its loss and gradient pinned to ours, the blend to "
                    "1e-15 and the repro to 3e-9 in fp64 (records/official/weince.md)")
_DHEL_KCL_CLAIM = ("DHEL and KCL outperform InfoNCE variants such as SimCLR and DCL, even at smaller batch sizes "
                   "(abstract and README, ICML 2024, arXiv:2405.18045; Table 1's numbers not retrieved; a third-party "
                   "CIFAR-100 R18 fine-tune, not a probe: NT-Xent 53.64, DHEL 56.14)")
EFFECTS = (
    Effect("WEINCE, the paper's blend (reduced, 5 epochs)",
           _WEINCE_CLAIM + "; that run also trained the repro script's two top-M terms (research notes 1(b))",
           "image_ssl", "weince", "infonce", "linear_acc", _LINEAR, _REDUCED, official=_WEINCE_OFFICIAL,
           settled=NO_OFFICIAL),
    Effect("WEINCE-repro, blend + top-M terms (reduced, 5 epochs)", _WEINCE_CLAIM, "image_ssl", "weince_repro",
           "infonce", "linear_acc", _LINEAR, _REDUCED, official=_WEINCE_OFFICIAL),
    Effect("WEINCE, the paper's blend (20 epochs)",
           _WEINCE_CLAIM + "; that run also trained the repro script's two top-M terms (research notes 1(b))",
           "image_ssl_epochs20", "weince", "infonce", "linear_acc", _LINEAR, _LONGER, official=_WEINCE_OFFICIAL,
           settled=NO_OFFICIAL),
    Effect("WEINCE-repro, blend + top-M terms (20 epochs)", _WEINCE_CLAIM, "image_ssl_epochs20", "weince_repro",
           "infonce", "linear_acc", _LINEAR, _LONGER, official=_WEINCE_OFFICIAL),
    Effect("DHEL", _DHEL_KCL_CLAIM, "image_ssl", "dhel", "infonce", "linear_acc", _LINEAR, _REDUCED,
           official="no official training code runs here (the repository holds the losses only; the paper trained "
                    "with AndrewAtanov/simclr-pytorch); loss and gradient pinned to the official DHEL "
                    "(records/official/dhel.md)"),
    Effect("KCL", _DHEL_KCL_CLAIM, "image_ssl", "kcl", "infonce", "linear_acc", _LINEAR, _REDUCED,
           official="no official training code runs here (losses only, as DHEL); loss and gradient pinned to the "
                    "official Gaussian KCL (records/official/kcl.md)", settled=NO_OFFICIAL),
    Effect("DCL", "+6.4 IN-1K linear: SimCLR+DCL 68.2, ResNet-50, batch 256, 200 epochs (abstract, ECCV 2022, "
                  "arXiv:2110.06848); Lightly's IN-1K benchmark, 100 epochs: 63.2 -> 65.1",
           "image_ssl", "dcl", "infonce", "linear_acc", _LINEAR, _REDUCED,
           official="no official code located (research notes 7.2)", settled=NO_OFFICIAL),
    Effect("Feature Transformation (against MoCo)",
           "+2.1 IN-1K linear: MoCo-v2 67.5 -> 69.6 with FT, ResNet-50, 200 epochs (official README model table; "
           "ICCV 2021, arXiv:2108.02982)",
           "image_ssl", "infonce_ft", "moco", "linear_acc", _LINEAR,
           _REDUCED + "; MoCo key encoder m 0.99, queue-only negatives 4096, t 0.2, both arms",
           official="the official training code does not run here (CUDA multiprocessing, ImageNet loaders); its "
                    "FT forward pinned to ours to fp32 rounding (records/official/feature_transformation.md)",
           settled=NO_OFFICIAL),
    Effect("MoCHi (against the same InfoNCE + queue)",
           "small IN-1K gains over MoCo-v2 (67.5), below 1 point, 200 epochs (NeurIPS 2020, arXiv:2010.01028; "
           "[memory, verify] in the research notes 7.3: no number verified)",
           "image_ssl", "infonce_mochi", "infonce_queue", "linear_acc", _LINEAR,
           _REDUCED + "; InfoNCE + 1,024-key queue both arms (no key encoder), MoCHi(128, 32, 16)",
           official="none: no official code was published (records/official/mochi.md)", settled=NO_OFFICIAL),
)
"""The claims this comparison measures (``contrasuite compare effects``); the page states each one it can."""


# -- arms and records ---------------------------------------------------------------------------------------

def arms(epochs: int | None = None, quick: bool = False) -> tuple[Arm, ...]:
    """The objectives of the protocol (``--epochs``: :data:`EPOCH_CONFIGS` for N epochs), tested at the last
    checkpoint, then ``random_init`` (no training)."""
    names = CONFIGS if epochs is None else EPOCH_CONFIGS
    length = () if epochs is None else (f"run.epochs={epochs}",)
    out = [Arm(n, f"{CONFIG_DIR}/reduced_{n}.yaml", (*length, *(PER_ARM_QUICK.get(n, ()) if quick else ())),
               checkpoint="last") for n in names]
    out.append(Arm(RANDOM_INIT, f"{CONFIG_DIR}/reduced_infonce.yaml", ("run.epochs=0",), checkpoint="last"))
    return tuple(out)


def data_source(run_dir: Path) -> str:
    """The copy of the data a run read (``CIFAR-10 (JPEG copy)``: ``config.data.source: auto`` picks it when
    present), from the run's resolved ``config.yaml``."""
    resolved = yaml.safe_load((run_dir / "config.yaml").read_text())
    data = resolved["config"]["data"]
    if data.get("source") == "folder":
        return f"image folder {data.get('folder')}"
    return load_cifar10(resolved["run"]["data_root"], "test", source=data.get("source", "auto"),
                        cache_dir=data.get("cache_dir"), download=False).source


def objective_state_per_epoch(run_dir: Path) -> dict[str, list[float]]:
    """The objectives' logged state (``state/...``, e.g. WEINCE's gate ``lambda_mean``) averaged per epoch,
    by the state's last name (``lambda_mean``)."""
    return {name.rsplit(".", 1)[-1]: values for name, values in logged_per_epoch(run_dir, "state/").items()}


def extra(arm: Arm, run: Any) -> dict[str, Any]:
    """A record's further fields from the tested run (``run.run_dir``): the data copy and the objectives' state
    per epoch."""
    return {"data_source": data_source(run.run_dir), "objective_state": objective_state_per_epoch(run.run_dir)}


# -- the page -----------------------------------------------------------------------------------------------

def protocol(overrides: Sequence[str] = ()) -> str:
    """The reduced protocol in words, read from the resolved ``reduced_infonce.yaml`` with ``overrides``."""
    loaded = load_config(ROOT / CONFIG_DIR / "reduced_infonce.yaml", list(overrides))
    c, run = loaded.config, loaded.run
    subset = (f"a class-balanced {c.data.train_subset:,}-image training subset" if c.data.train_subset
              else "all 50,000 training images")
    test = (f"{c.data.test_subset:,}-image class-balanced test subset" if c.data.test_subset
            else "full 10,000-image test set")
    steps = f" (at most {run.max_steps} steps)" if run.max_steps else ""
    return (
        f"`{c.model.encoder}` encoder of width {c.model.width}, {subset}, batch {c.batch_size}, {run.epochs} "
        f"epochs{steps}, {c.optim.name} lr {c.optim.lr}, crops of ({c.augment.crop_scale[0]}, {c.augment.crop_scale[1]}) "
        f"area, {run.precision}. Evaluation on frozen encoder features with BatchNorm in eval mode: weighted kNN "
        f"(k = {c.eval.knn_k}, T = {c.eval.knn_temperature}) with the training subset as the bank, and a linear probe "
        f"(logistic regression, {c.eval.linear_epochs} epochs; L2 weight and epoch selected on a stratified "
        f"{c.data.val_fraction:.0%} validation split of the training subset), both reported on the {test}, at the "
        "last checkpoint"
    )


def versus(runs: dict[str, list[dict]], name: str, baseline: str) -> str:
    """``name`` against ``baseline`` in linear accuracy: both means, the difference, its standard error, a verdict."""
    a = [r["metrics"]["linear_acc"] for r in runs.get(name, [])]
    b = [r["metrics"]["linear_acc"] for r in runs.get(baseline, [])]
    if len(a) < 2 or len(b) < 2:
        return f"not measured: `{name}` has {len(a)} seed(s) and `{baseline}` {len(b)}; a difference needs two a side."
    d = difference(a, b)
    verdict = ((("above" if d.mean > 0 else "below") + f" `{baseline}` by at least 2 standard errors") if d.beyond
               else "within 2 standard errors")
    return (f"`{name}`: linear {mean_std(a)} vs `{baseline}` {mean_std(b)} ({len(a)} and {len(b)} seeds), a "
            f"difference of {d.mean:+.2f} points (standard error {d.se:.2f}), {verdict}.")


def claim_sections(page: str, runs: dict[str, list[dict]]) -> list[str]:
    """For each effect of :data:`EFFECTS` on ``page`` with a run on either side: the paper's claim and this page's."""
    lines: list[str] = []
    for e in EFFECTS:
        if e.page == page and (e.arm in runs or e.baseline in runs):
            lines += [f"## {e.method} against `{e.baseline}`", "",
                      f"Paper: {e.claim}. Here ({e.measure}): {versus(runs, e.arm, e.baseline)}", ""]
    return lines


def gate_section(runs: dict[str, list[dict]]) -> list[str]:
    """How WEINCE's gate evolves: per-epoch means over seeds of the logged ``lambda`` statistics."""
    lines: list[str] = []
    for name in ("weince", "weince_repro"):
        states = [st for st in (r.get("objective_state") or {} for r in runs.get(name, [])) if st.get("lambda_mean")]
        if not states:
            continue
        keys = [k for k in ("lambda_mean", "lambda_std", "lambda_active", "beta_ema") if all(k in st for st in states)]
        epochs = min(len(st["lambda_mean"]) for st in states)
        shown = sorted({0, epochs // 4, epochs // 2, 3 * epochs // 4, epochs - 1})
        lines += [f"`{name}` ({len(states)} seeds; `lambda_active` is the share of anchors with lambda > 0.5):", "",
                  "| epoch | " + " | ".join(keys) + " |", "|---" * (len(keys) + 1) + "|"]
        for e in shown:
            cells = [mean_std([st[k][e] for st in states], 2 if k == "beta_ema" else 3) for k in keys]
            lines.append(f"| {e + 1} | " + " | ".join(cells) + " |")
        lines.append("")
    if lines:
        lines = ["## WEINCE's gate during training", "",
                 "The gate lambda (per anchor, no gradient) logged every `run.log_every_steps` steps as "
                 "`state/objective.terms.0.*` in each run's metrics.csv, averaged per epoch, mean ± std over seeds.",
                 "", *lines]
    return lines


def machine_line(records: list[dict[str, Any]]) -> str:
    """The machines, threads, torch versions, loads and dates the records name."""
    def values(get) -> str:
        return ", ".join(sorted({str(get(r)) for r in records}))

    loads = [r["machine"]["load_average_1min"] for r in records if r["machine"].get("load_average_1min") is not None]
    dates = sorted(r["recorded"][:10] for r in records if r.get("recorded"))
    return (f"Machine: {values(lambda r: r['machine']['cpu'])} ({values(lambda r: r['machine']['cores'])} cores), "
            f"{values(lambda r: r['machine']['threads'])} thread(s) per run, torch {values(lambda r: r['libraries'].get('torch'))}; "
            + (f"1-minute load average {min(loads):.2f} to {max(loads):.2f} when the runs started; " if loads else "")
            + (f"recorded {dates[0]} to {dates[-1]}." if dates else ""))


def render_page(epochs: int | None, quick: bool, records: list[dict[str, Any]], command: str) -> str:
    """The Markdown page of the protocol (``epochs``) from its records."""
    page = page_name(epochs)
    runs: dict[str, list[dict]] = {}
    for r in sorted(records, key=lambda r: (r["arm"], r["seed"])):
        runs.setdefault(r["arm"], []).append(r)
    overrides = [*((f"run.epochs={epochs}",) if epochs is not None else ()), *(QUICK if quick else ())]
    sources = sorted({r["data_source"] for r in records if r.get("data_source")})
    names = CONFIGS if epochs is None else EPOCH_CONFIGS
    title = "# image_ssl: reduced CPU comparison of the objectives" + ("" if epochs is None else f", {epochs} epochs")
    lines = [
        title + (" (QUICK smoke version)" if quick else ""),
        "",
        f"Rendered from the run records in `docs/results/records/{page}/` by `{command}`, which trains the runs that",
        "have no current record (a record is current while its config digest and data version match).",
        "",
        f"Data: {', '.join(sources) or 'CIFAR-10 (no record yet)'}. **Reduced protocol, not the paper setting** "
        f"(`configs/image_ssl/base/reduced.yaml`{''.join(f', `{o}`' for o in overrides)}): {protocol(overrides)}. "
        "Accuracies in %, mean ± standard deviation over training seeds (one seed: its value).",
        "",
    ]
    if records:
        lines += [machine_line(records), ""]
    lines += ["| objective | config | seeds | kNN acc | linear acc | wall time per run (s) | CPU time per run (s) |",
              "|---|---|---|---|---|---|---|"]
    for name in (*names, RANDOM_INIT):
        got = runs.get(name, [])
        if not got:
            continue
        label, config = (("random init (no training)", "`reduced_infonce.yaml`, `run.epochs=0`") if name == RANDOM_INIT
                         else (name, f"`reduced_{name}.yaml`"))
        wall = statistics.fmean(r["timings"]["train_seconds"] + r["timings"]["eval_seconds"] for r in got)
        cpu = statistics.fmean(r["timings"]["cpu_seconds"] for r in got)
        lines.append(f"| {label} | {config} | {', '.join(str(r['seed']) for r in got)} | "
                     f"{mean_std([r['metrics']['knn_acc'] for r in got])} | "
                     f"{mean_std([r['metrics']['linear_acc'] for r in got if 'linear_acc' in r['metrics']])} | "
                     f"{wall:.0f} | {cpu:.0f} |")
    trained = [r for r in records if r["arm"] != RANDOM_INIT]
    if trained:
        cpu = [r["timings"]["cpu_seconds"] for r in trained]
        lines += ["", f"CPU time (user + system of the train and eval children): {sum(cpu) / 60:.1f} min over the "
                      f"{len(trained)} trained runs, {statistics.fmean(cpu):.0f} s per run on average; each run uses "
                      "one thread, so on an idle core its wall time is about its CPU time, and `--jobs 2` runs two "
                      "at a time on a 2-core machine."]
    lines += ["", *claim_sections(page, runs), *gate_section(runs)]
    missing = [n for n in (*names, RANDOM_INIT) if n not in runs]
    if missing:
        lines += [f"Not yet run: {', '.join(missing)}.", ""]
    lines += ["The full-scale configs (`configs/image_ssl/<name>.yaml`, ResNet-18, 200 epochs, batch 512) are what a "
              "GPU user runs: `contrasuite train configs/image_ssl/infonce.yaml`.", ""]
    return "\n".join(lines)


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--epochs", type=int, default=None,
                   help=f"train N epochs instead of the reduced protocol's: {', '.join(EPOCH_CONFIGS)} only, "
                        "on docs/results/image_ssl_epochsN.md")


def _build(args: argparse.Namespace) -> Comparison:
    epochs, quick = args.epochs, args.quick
    return Comparison("image_ssl", page_name(epochs), arms(epochs, quick),
                      lambda records, command: render_page(epochs, quick, records, command), quick=QUICK, extra=extra)


def main(argv: Sequence[str] | None = None) -> int:
    return compare_main("image_ssl", _build, argv, __doc__.splitlines()[0], _arguments)


if __name__ == "__main__":
    raise SystemExit(main())
