"""The comparison page is built from cached per-run results (no training here)."""

import argparse

import pytest

from contrasuite.domains.super_resolution.report import PAPER_GAINS, write_page


def result(method, seed, psnr):
    return {"method": method, "seed": seed, "run_dir": f"/r/{method}{seed}", "best_val_psnr_y": 30.0 + seed,
            "train_seconds": 10.0, "eval_seconds": 2.0, "command": f"contrasuite train x_{method}.yaml run.seed={seed}",
            "metrics": {"Set5/psnr_y": psnr, "Set5/ssim_y": 0.9}}


def test_page_has_table_spread_gains_and_context(tmp_path):
    results = [result("l1", 0, 34.0), result("l1", 1, 34.2), result("pcl", 0, 34.1), result("pcl", 1, 34.1)]
    args = argparse.Namespace(quick=False, prefix="reduced_x2_")
    bench = {"device": "CPU", "threads": 1, "rows": [{"mode": "l1", "precision": "bf16", "patch": 24, "batch": 16,
                                                       "seconds_per_step": 0.5, "patches_per_second": 32.0,
                                                       "cpu_seconds_per_step": 0.4}]}
    page = tmp_path / "sr.md"
    write_page(results, {"Set5/psnr_y": 33.68, "Set5/ssim_y": 0.93}, bench, [], args, 2, ["Set5"], page, "PROTOCOL")
    text = page.read_text()
    assert "REDUCED protocol" in text and PAPER_GAINS in text and "x2; PROTOCOL;" in text
    assert "| bicubic | 33.680 | 0.9300 |" in text
    assert "34.100 ± 0.141" in text  # L1 mean ± std over the two seeds
    assert "- Set5: +0.100, -0.100 (mean +0.000)" in text
    assert "| l1 | bf16 | 24 | 16 | 0.500 | 32.0 | 0.400 |" in text
    assert "[super_resolution_finetune.md](super_resolution_finetune.md)" in text


def test_unknown_method_is_rejected():
    from contrasuite.domains.super_resolution.report import main

    with pytest.raises(SystemExit, match="unknown method"):
        main(["--methods", "gan"])


def test_finetune_page_compares_each_pcl_arm_with_the_l1_arm_per_seed(tmp_path):
    from contrasuite.domains.super_resolution.report import write_finetune_page

    pretrain = result("x2_l1", 0, 33.5)
    results = [result("finetune_x2_l1", 0, 33.6), result("finetune_x2_l1", 1, 33.7),
               result("finetune_x2_pcl_official", 0, 33.6), result("finetune_x2_pcl_official", 1, 33.8),
               result("finetune_x2_pcl_gradient", 0, 33.2)]
    args = argparse.Namespace(quick=False, prefix="reduced_", pretrain_epochs=30, pretrain_threads=2)
    page = tmp_path / "ft.md"
    bic = {2: {"Set5/psnr_y": 33.682, "Set5/ssim_y": 0.93051}, 4: {"Set5/psnr_y": 28.431, "Set5/ssim_y": 0.81128}}
    write_finetune_page(pretrain, results, args, ["Set5"], page, "PROTOCOL", bic)
    text = page.read_text()
    assert "| bicubic | - | 33.682 | 0.9305 |\n| un-fine-tuned | - | 33.500 | 0.9000 |" in text
    assert "| x2 | 33.682 / 0.9305 (33.66 / 0.9299) |\n| x4 | 28.431 / 0.8113 (28.42 / 0.8104) |" in text
    assert "| fine-tuned, L1 only (the control) | 2 | 33.650 ± 0.071 |" in text
    assert "- Set5: +0.000, +0.100 (mean +0.050, standard error 0.050)" in text  # official minus L1, seeds 0 and 1
    assert "- Set5: -0.400 (mean -0.400)" in text  # the gradient arm has seed 0 only
    assert "`contrasuite compare super_resolution --finetune --pretrain-epochs 30 --pretrain-threads 2`" in text


@pytest.mark.slow
def test_finetune_runs_start_from_the_one_pretrained_model(tmp_path):
    """--finetune --quick: one L1 model (its lr decayed over its steps), then each arm with
    config.init_from at its run folder. The official PCL arm, whose contrastive term sends no gradient
    to the SR network, ends bit for bit where the L1 control ends (the same batches, the same clipped L1 gradient, the same Adam steps)."""
    import json
    from pathlib import Path

    import torch

    from contrasuite.domains.super_resolution.report import main

    out = tmp_path / "page.md"
    assert main(["--finetune", "--quick", "--seeds", "0", "--jobs", "1", "--results-dir", str(tmp_path),
                 "--methods", "finetune_x2_l1,finetune_x2_pcl_official", "--output", str(out)]) == 0
    (pretrain,) = (tmp_path / "quick" / "pretrain_epochs1_cosine").glob("x2_l1_seed0.json")
    source = json.loads(pretrain.read_text())["run_dir"]
    assert "cosine_steps: 2\n" in (Path(source) / "config.yaml").read_text()  # decayed over its 1 x 2 steps
    arms = sorted((tmp_path / "quick" / "from_epochs1_cosine").glob("finetune_*_seed0.json"))
    assert [p.stem for p in arms] == ["finetune_x2_l1_seed0", "finetune_x2_pcl_official_seed0"]
    generators, metrics = [], []
    for arm in arms:
        result = json.loads(arm.read_text())
        saved = (Path(result["run_dir"]) / "config.yaml").read_text()
        assert f"init_from: {source}" in saved
        last = torch.load(Path(result["run_dir"]) / "checkpoints" / "last.pt", weights_only=True)
        generators.append(last["modules"]["generator"])
        metrics.append(result["metrics"])
    start = torch.load(Path(source) / "checkpoints" / "best.pt", weights_only=True)["modules"]["generator"]
    assert any(not torch.equal(start[k], generators[0][k]) for k in start)  # the control did train
    assert all(torch.equal(generators[0][k], generators[1][k]) for k in start) and metrics[0] == metrics[1]
    assert "| un-fine-tuned | - |" in out.read_text()
