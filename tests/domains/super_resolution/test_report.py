"""``contrasuite compare super_resolution`` on the comparison runner: the pages from hand-made records, the
effects' arms, and one quick --finetune run through the runner (pretrain, then the arms from it)."""

import json
from pathlib import Path

import pytest

from contrasuite.domains.super_resolution.report import (
    EFFECTS, PAPER_GAINS, arms, main, render_finetune, render_scratch, sets_version,
)


def record(arm, seed, psnr, *, config="configs/super_resolution/reduced_x2_l1.yaml", overrides=()):
    return {"page": "p", "arm": arm, "group": "", "seed": seed, "config": config, "overrides": list(overrides),
            "command": f"contrasuite train {config} run.seed={seed}", "machine": {"threads": 1},
            "metrics": {"Set5/psnr_y": psnr, "Set5/ssim_y": 0.9},
            "selected": {"global_step": 100, "validation": 30.0 + seed},
            "timings": {"train_seconds": 10.0, "eval_seconds": 2.0}}


BICUBIC = {"page": "p", "arm": "bicubic", "group": "", "sets": ["Set5"],
           "metrics": {"x2/Set5/psnr_y": 33.682, "x2/Set5/ssim_y": 0.93051, "x4/Set5/psnr_y": 28.431,
                       "x4/Set5/ssim_y": 0.81128}}


def test_finetune_page_compares_each_pcl_arm_with_the_l1_arm_per_seed():
    ft = "configs/super_resolution/reduced_finetune_x2_l1.yaml"
    records = [BICUBIC, record("pretrain", 0, 33.5, overrides=["run.epochs=30", "config.cosine_steps=3000"]),
               record("pretrain", 1, 33.7, overrides=["run.epochs=30", "config.cosine_steps=3000"]),
               record("finetune_x2_l1", 0, 33.6, config=ft), record("finetune_x2_l1", 1, 33.7, config=ft),
               record("finetune_x2_pcl_official", 0, 33.6, config=ft), record("finetune_x2_pcl_official", 1, 33.8, config=ft)]
    text = render_finetune(records, "contrasuite compare super_resolution --finetune --seeds 0 1", quick=False)
    assert "by `contrasuite compare super_resolution --finetune --seeds 0 1`" in text and "REDUCED protocol" in text
    assert "| bicubic | - | 33.682 | 0.9305 |\n| un-fine-tuned | 0, 1 | 33.600 ± 0.141 | 0.9000 ± 0.0000 |" in text
    assert "| x2 | 33.682 / 0.9305 (33.66 / 0.9299) |\n| x4 | 28.431 / 0.8113 (28.42 / 0.8104) |" in text
    assert "| fine-tuned, L1 only (the control) | 0, 1 | 33.650 ± 0.071 |" in text
    assert "- Set5: +0.000, +0.100 (mean +0.050, standard error 0.050)" in text  # official minus L1, seeds 0 and 1
    assert "Not yet run: finetune_x2_pcl_gradient." in text and PAPER_GAINS in text
    assert "30 x 100 steps of 16 LR patches of 24 px" in text  # the pretrain's protocol, read from its config
    assert "| pretrain | 1 | 100 | 31.000 | 10.0 | 2.0 | 1 | `contrasuite train" in text


def test_one_seed_gives_values_without_spread_or_standard_error():
    ft = "configs/super_resolution/reduced_finetune_x2_pcl_gradient.yaml"
    records = [record("finetune_x2_l1", 0, 33.6, config=ft), record("finetune_x2_pcl_gradient", 0, 33.2, config=ft)]
    text = render_finetune(records, "c", quick=True)
    assert "QUICK" in text and "- Set5: -0.400 (mean -0.400)" in text and "| bicubic |" not in text
    assert "Not yet run: pretrain, finetune_x2_pcl_official." in text


def test_scratch_page_has_table_spread_and_gains():
    records = [BICUBIC, record("l1", 0, 34.0), record("l1", 1, 34.2),
               record("pcl", 0, 34.1, config="configs/super_resolution/reduced_x2_pcl.yaml"),
               record("pcl", 1, 34.1, config="configs/super_resolution/reduced_x2_pcl.yaml")]
    text = render_scratch(records, "contrasuite compare super_resolution --seeds 0 1", quick=False)
    assert "| bicubic | - | 33.682 | 0.9305 |" in text
    assert "| EDSR-baseline, L1 | 0, 1 | 34.100 ± 0.141 |" in text
    assert "- Set5: +0.100, -0.100 (mean +0.000, standard error 0.100)" in text
    assert "10 x 100 steps" in text


def test_arms_and_effects():
    assert [a.name for a in arms(False)] == ["l1", "pcl"]
    finetune = {a.name: a for a in arms(True)}
    assert finetune["pretrain"].after is None and finetune["pretrain"].overrides == ("run.epochs=30", "config.optim.schedule={name: cosine, end: {steps: 3000}}")
    assert all(a.after == "pretrain" and a.overrides == ("config.init_from={after}",) and a.checkpoint == "best"
               for n, a in finetune.items() if n != "pretrain")
    for effect in EFFECTS:
        assert effect.page == "super_resolution_finetune" and {effect.arm, effect.baseline} <= set(finetune)
    assert sets_version(["Set5"]) != sets_version(["Set5", "Set14"])


@pytest.mark.slow
def test_quick_finetune_runs_each_arm_from_its_seeds_pretrain(tmp_path, sr_data_root):
    """--finetune --quick through the runner: the pretrain, then each arm with config.init_from at its run
    folder. The official PCL arm, whose contrastive term sends no gradient to the SR network, ends bit for bit
    where the L1 control ends (the same batches, the same clipped L1 gradient, the same Adam steps). A second
    call trains nothing, and --report-only renders the same page."""
    import torch

    args = ["--finetune", "--quick", "--seeds", "0", "--cache", str(tmp_path), "--data-root", str(sr_data_root),
            "--arms", "pretrain", "finetune_x2_l1", "finetune_x2_pcl_official"]
    assert main(args) == 0
    records = tmp_path / "records"
    assert sorted(p.name for p in records.glob("*.json")) == [
        "bicubic.json", "finetune_x2_l1_seed0.json", "finetune_x2_pcl_official_seed0.json", "page.json",
        "pretrain_seed0.json"]
    source = json.loads((records / "pretrain_seed0.json").read_text())["run_dir"]
    generators, metrics = [], []
    for arm in ("finetune_x2_l1", "finetune_x2_pcl_official"):
        result = json.loads((records / f"{arm}_seed0.json").read_text())
        assert f"init_from: {source}" in (Path(result["run_dir"]) / "config.yaml").read_text()
        last = torch.load(Path(result["run_dir"]) / "checkpoints" / "last.pt", weights_only=True)
        generators.append(last["modules"]["generator"])
        metrics.append(result["metrics"])
    start = torch.load(Path(source) / "checkpoints" / "best.pt", weights_only=True)["modules"]["generator"]
    assert any(not torch.equal(start[k], generators[0][k]) for k in start)  # the control did train
    assert all(torch.equal(generators[0][k], generators[1][k]) for k in start) and metrics[0] == metrics[1]
    page = (tmp_path / "super_resolution_finetune.md").read_text()
    assert "QUICK" in page and "| un-fine-tuned | 0 |" in page and "| bicubic | - |" in page
    assert "Not yet run: finetune_x2_pcl_gradient." in page
    stamps = {p.name: p.stat().st_mtime_ns for p in records.glob("*_seed0.json")}
    out = tmp_path / "again.md"
    assert main([*args, "--report-only", "--out", str(out)]) == 0
    assert out.read_text() == page and {p.name: p.stat().st_mtime_ns for p in records.glob("*_seed0.json")} == stamps
