"""The compare report builds its page from cached per-run JSON without training (``--table-only``)."""

import json
from pathlib import Path

import pytest

from contrasuite.pipelines.cli_runs import config_digest
from contrasuite.domains.translation.report import CODE, goal_lines, main

CONFIGS = Path(__file__).resolve().parents[3] / "configs" / "translation"


def fake(seed: int, kid: float) -> dict:
    metrics = {"psnr": 14.0 + seed, "ssim": 0.5, "fd": 100.0, "kid": kid,
               "input_psnr": 12.0, "input_ssim": 0.34, "input_fd": 170.0, "input_kid": 0.0127}
    return {"config": "c.yaml", "seed": seed, "run_dir": "r", "train_seconds": 10.0, "test_best": metrics,
            "test_last": metrics | {"kid": 2 * kid}, "grid": f"translation/x{seed}.png"}


def test_table_only_page(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    for seed in (0, 1):
        digest = config_digest(CONFIGS / "reduced_cut_emoji.yaml", [f"run.seed={seed}"], CODE)
        (results / f"reduced_cut_seed{seed}.json").write_text(json.dumps(fake(seed, 0.010 + 0.002 * seed)
                                                                         | {"config_sha256": digest}))
    (results / "reduced_gan_seed0.json").write_text(json.dumps(fake(0, 0.5)))  # made under another config
    before = config_digest(CONFIGS / "reduced_gan_emoji.yaml", ["run.seed=1"])  # FD/KID's network before issue 23
    (results / "reduced_gan_seed1.json").write_text(json.dumps(fake(1, 0.5) | {"config_sha256": before}))
    out = tmp_path / "page.md"
    assert main(["--table-only", "--results-dir", str(results), "--out", str(out), "--variants", "cut", "gan"]) == 0
    page = out.read_text()
    assert "REDUCED protocol" in page and "EfficientNet-Lite0" in page and "FID" in page
    assert "| untranslated input (floor) | - | 12.000 | 0.340 | 170.000 | 12.700 |" in page
    # best: KID x 1000 = 10 and 12 -> 11 ± 1.414; last doubles it
    assert "| 2 | 14.500 ± 0.707 | 0.500 ± 0.000 | 100.000 ± 0.000 | 11.000 ± 1.414 |" in page
    assert "22.000 ± 2.828" in page and "![](translation/x1.png)" in page
    assert "| GAN alone (LSGAN, no PatchNCE) | 0 |" in page  # runs under another config or network are not shown


def test_goal_lines_compare_cut_with_gan_and_input():
    cut = [fake(s, 0.010 + 0.002 * s) for s in (0, 1)]  # PSNR 14, 15 > input 12; KID 10-12 (x1000) < input 12.7
    gan = [fake(s, 0.050) | {"test_best": fake(s, 0.050)["test_best"] | {"psnr": 14.2 + s}} for s in (0, 1)]
    rows = {line.split(" | ")[0].lstrip("| "): line for line in goal_lines({"cut": cut, "gan": gan})[2:]}
    assert rows["PSNR (dB)"].endswith("| no | yes |")  # 14.5 vs 14.7: not better than the GAN
    assert rows["KID x 1000 (Lite0)"].endswith("| yes | yes |")
    assert rows["FD (Lite0)"].endswith("| no | yes |")  # equal FD is not "clearly better"
    assert goal_lines({"cut": cut, "gan": []}) == []


@pytest.mark.slow
def test_parallel_jobs_train_each_run_once_and_build_the_page(tmp_path, data_root, emoji_cache, tiny_overrides):
    """``--jobs 2``: the runs train in two worker processes, each result is stored once, and a second
    call trains nothing (the stored runs are reused)."""
    results, out = tmp_path / "results", tmp_path / "page.md"
    args = ["--jobs", "2", "--skip-single", "--variants", "cut", "gan", "--seeds", "0", "--results-dir", str(results),
            "--out", str(out), "--output-root", str(tmp_path / "runs"), "--data-root", str(data_root),
            *tiny_overrides, f"config.data.cache_dir={emoji_cache}"]
    assert main(args) == 0
    stored = sorted(p.name for p in results.glob("*.json"))
    assert stored == ["reduced_cut_seed0.json", "reduced_gan_seed0.json"]
    first = {p.name: p.stat().st_mtime_ns for p in results.glob("*.json")}
    assert "CUT (lambda_NCE 1" in out.read_text()
    assert main(args) == 0
    assert {p.name: p.stat().st_mtime_ns for p in results.glob("*.json")} == first
