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


def test_unknown_method_is_rejected():
    from contrasuite.domains.super_resolution.report import main

    with pytest.raises(SystemExit, match="unknown method"):
        main(["--methods", "gan"])
