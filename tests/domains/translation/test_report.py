"""``contrasuite compare translation`` on the comparison runner: the page from hand-made records, the data
version (FD/KID's network included), the effects' arms, and one quick run through the runner."""

import json

import pytest

from contrasuite.domains.translation import report
from contrasuite.domains.translation.report import ARMS, EFFECTS, data_version, main, render_page


def record(arm, seed, kid, psnr=14.0):
    metrics = {"psnr": psnr + seed, "ssim": 0.5, "fd": 100.0 + seed, "kid": kid,
               "input_psnr": 12.0, "input_ssim": 0.34, "input_fd": 170.0, "input_kid": 0.0127}
    return {"page": "translation", "arm": arm, "group": "", "seed": seed, "config": f"configs/translation/{arm}.yaml",
            "metrics": metrics, "test_last": metrics | {"kid": 2 * kid}, "grid": f"translation/{arm}_seed{seed}.png",
            "selected": {"global_step": 600}, "timings": {"train_seconds": 10.0, "eval_seconds": 3.0},
            "machine": {"threads": 1}}


def test_page_from_records():
    records = [record("cut", 0, 0.010), record("cut", 1, 0.012), record("gan", 0, 0.5, psnr=10.0),
               record("gan", 1, 0.6, psnr=10.0)]
    records += [{**record("input", s, 0.0127), "metrics": {"psnr": 12.0, "ssim": 0.34, "fd": 170.0, "kid": 0.0127}}
                for s in (0, 1)]
    for r in records[-2:]:
        del r["grid"], r["test_last"]
    page = render_page(records, "contrasuite compare translation --seeds 0 1")
    assert "by `contrasuite compare translation --seeds 0 1`" in page and "REDUCED protocol" in page
    assert "EfficientNet-Lite0" in page and "contrasuite bench translation" in page
    assert "| untranslated input (floor) | 0, 1 | 12.000 ± 0.000 | 0.340 ± 0.000 | 170.000 ± 0.000 | 12.700 ± 0.000 |" in page
    # best: KID x 1000 = 10 and 12 -> 11 ± 1.414; last doubles it
    assert "| CUT (lambda_NCE 1, identity PatchNCE) | 0, 1 | 14.500 ± 0.707 | 0.500 ± 0.000 | 100.500 ± 0.707 | 11.000 ± 1.414 |" in page
    assert "22.000 ± 2.828" in page and "![](translation/cut_seed1.png)" in page
    assert "- CUT minus the GAN alone, over 2 and 2 seeds: PSNR (dB) +4.000 ± 0.707 (better, beyond 2 standard errors)" in page
    assert "- CUT minus the input, over 2 and 2 seeds:" in page and "CUT minus FastCUT" not in page
    assert "Not run: fastcut, single_image." in page
    assert "| cut | 1 | 600 | 10.0 | 3.0 | 1 |" in page


def test_floor_from_the_runs_without_an_input_arm_and_a_single_image_section():
    single = record("single_image", 0, 0.255) | {"grid": "translation/single_image_seed0.png"}
    page = render_page([record("fastcut", 0, 0.02), single], "c", quick=True)
    assert "QUICK" in page and "| untranslated input (floor) | - | 12.000 | 0.340 | 170.000 | 12.700 |" in page
    assert "## Single image (Monet -> Etretat photo), seed 0" in page and "KID x 1000 255.0" in page
    assert "![single image](translation/single_image_seed0.png)" in page and "## Differences" not in page


def test_data_version_names_the_data_and_the_feature_network(monkeypatch):
    arms = {a.name: a for a in ARMS}
    emoji, monet = data_version(arms["cut"]), data_version(arms["single_image"])
    assert emoji == data_version(arms["gan"]) and emoji != monet
    monkeypatch.setattr(report, "FEATURE_NETWORK", "another network")
    assert data_version(arms["cut"]) != emoji


def test_effects_name_arms_of_the_page():
    names = {a.name for a in ARMS}
    for effect in EFFECTS:
        assert effect.page == "translation" and {effect.arm, effect.baseline} <= names and not effect.higher_is_better


@pytest.mark.slow
def test_quick_run_through_the_runner(tmp_path, data_root):
    """--quick: cut and the input arm train (a few steps) and are tested; the input arm's metrics are the
    evaluation's input scores; cut keeps its test grid and its last checkpoint's scores; a second call
    trains nothing and renders the same page."""
    args = ["--quick", "--seeds", "0", "--arms", "cut", "input", "--cache", str(tmp_path), "--data-root", str(data_root)]
    assert main(args) == 0
    records = tmp_path / "records"
    assert sorted(p.name for p in records.glob("*.json")) == ["cut_seed0.json", "input_seed0.json", "page.json"]
    cut = json.loads((records / "cut_seed0.json").read_text())
    given = json.loads((records / "input_seed0.json").read_text())
    assert set(given["metrics"]) == {"psnr", "ssim", "fd", "kid"}
    assert given["metrics"]["psnr"] == cut["metrics"]["input_psnr"]
    assert set(cut["test_last"]) >= {"psnr", "kid"} and (tmp_path / cut["grid"]).is_file()
    page = (tmp_path / "translation.md").read_text()
    assert "QUICK" in page and f"![]({cut['grid']})" in page and "| untranslated input (floor) | 0 |" in page
    stamps = {p.name: p.stat().st_mtime_ns for p in records.glob("*_seed0.json")}
    out = tmp_path / "again.md"
    assert main([*args, "--report-only", "--out", str(out)]) == 0
    assert out.read_text() == page and {p.name: p.stat().st_mtime_ns for p in records.glob("*_seed0.json")} == stamps
