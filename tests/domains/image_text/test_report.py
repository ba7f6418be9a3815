"""``contrasuite compare image_text`` on the comparison runner: the page from hand-made records, and a quick run
of the four arms on the emoji data in child processes."""

import argparse
import json

import pytest

import contrasuite.domains.image_text.report as report
from contrasuite.pipelines.compare import keys


def metrics(comp, r1):
    return {"i2t_r1": r1, "t2i_r1": r1, "comp_text/mean": comp, "comp_image/mean": comp, "comp_text/change_number": comp,
            "comp_text/change_number/n": 128.0, "comp_text/swap_attributes": comp, "google/i2t_r1": r1 / 2}


def record(comparison, name, seed, comp, r1, val_comp, val_r1):
    arm = next(a for a in comparison.arms if a.name == name)
    digest, version = keys(comparison, arm, seed)
    return {"page": comparison.page, "arm": name, "group": "", "seed": seed, "config": arm.config,
            "overrides": list(arm.overrides), "config_sha256": digest, "data_version": version,
            "machine": {"precision": "fp32"}, "metrics": metrics(comp, r1), "val_metrics": metrics(val_comp, val_r1),
            "timings": {"train_seconds": 60.0, "eval_seconds": 5.0}}


def write_records(folder, split_seed, rows):
    comparison = report._build(argparse.Namespace(split_seed=split_seed))
    folder.mkdir()
    for name, seeds in rows.items():
        for seed, values in seeds:
            (folder / f"{name}_seed{seed}.json").write_text(json.dumps(record(comparison, name, seed, *values)))


def test_goal_on_validation_and_test_from_the_records(tmp_path):
    rows = {name: [(s, (comp + s, r1, vc, vr)) for s in (0, 1, 2)]
            for name, comp, r1, vc, vr in (("align", 60, 30, 60, 30), ("pairs", 60, 30, 60, 30),
                                           ("text_negatives", 65, 30, 66, 30),
                                           ("text_image_negatives", 71, 29.5, 68, 28))}
    write_records(tmp_path / "records", 0, rows)
    page = tmp_path / "page.md"
    assert report.main(["--report-only", "--records", str(tmp_path / "records"), "--out", str(page)]) == 0
    text = page.read_text()
    assert "| validation | +8.0 | -2.0 | NOT met |" in text and "| test | +11.0 | -0.5 | met |" in text
    assert "| + text and image negatives | 29.5 ± 0.0 | " in text  # test headline, mean ± std over seeds
    assert "| comp_text/change_number | 128 | 61.0 ± 1.0 | 61.0 ± 1.0 | 66.0 ± 1.0 | 72.0 ± 1.0 |" in text
    assert "| comp_text/swap_attributes | - | 61.0 ± 1.0 |" in text  # runs that did not record the count
    assert "Training loop time of the recorded runs, summed: 12.0 min" in text
    assert "by `contrasuite compare image_text --seeds 0 1 2`" in text and "precision fp32" in text
    assert "pairs: configs/image_text/reduced_pairs.yaml config.init_from={after}" in text
    assert "QUICK" not in text and "Not yet run" not in text


def test_another_split_is_its_own_page_and_records(tmp_path):
    rows = {name: [(0, (60, 30, 60, 30))] for name in ("align", "pairs")}
    write_records(tmp_path / "records", 2, rows)
    page = tmp_path / "page.md"
    assert report.main(["--split-seed", "2", "--report-only", "--records", str(tmp_path / "records"), "--out", str(page)]) == 0
    text = page.read_text()
    assert "(split seed 2)" in text and "`contrasuite compare image_text --split-seed 2 --seeds 0`" in text
    assert "records/clip_hard_negatives_split2/" in text and "Not yet run: text_negatives, text_image_negatives." in text
    assert all("config.data.split_seed=2" in a.overrides for a in report.arms(2))
    assert report.page_name(0) == "clip_hard_negatives" and report.page_name(2) == "clip_hard_negatives_split2"


def test_a_split_without_image_side_comparisons_has_no_goal_row():
    """``--quick``'s tiny validation split holds no negative image: its goal row is left out, the test row stays."""
    results = {name: [{"metrics": metrics(60, 30), "val_metrics": metrics(60, 30)}]
               for name in ("align", "pairs", "text_negatives", "text_image_negatives")}
    for runs in results.values():
        del runs[0]["val_metrics"]["comp_image/mean"]
    assert report.goal(results, "val_metrics") is None and report.goal(results, "metrics") == (0.0, 0.0)


@pytest.mark.slow
def test_a_quick_comparison_trains_the_four_arms_in_children(emoji_root, tmp_path):
    cache = tmp_path / "compare"
    assert report.main(["--quick", "--cache", str(cache), "--seeds", "0", "--data-root", str(emoji_root)]) == 0
    records = {p.stem: json.loads(p.read_text()) for p in (cache / "records").glob("*_seed0.json")}
    assert sorted(records) == ["align_seed0", "pairs_seed0", "text_image_negatives_seed0", "text_negatives_seed0"]
    align = records["align_seed0"]["run_dir"]
    assert all(f"config.init_from={align}" in records[f"{n}_seed0"]["command"] for n, _ in report.VARIANTS)
    assert all(r["selected"]["checkpoint"] == "last" and "i2t_r1" in r["metrics"] and r["val_metrics"]
               for r in records.values())
    text = (cache / "clip_hard_negatives.md").read_text()
    assert "QUICK SMOKE SETTINGS" in text and "| + text and image negatives |" in text and "## Runs" in text
