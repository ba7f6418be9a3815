"""``contrasuite compare image_text`` on the comparison runner: the page from hand-made records, and a quick run
of the four arms on the emoji data in child processes."""

import argparse
import json

import pytest

import contrasuite.domains.image_text.report as report
from contrasuite.domains.image_text import tuning
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
    comparison = report._build(argparse.Namespace(split_seed=split_seed, tune=False))
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


class Unreadable(dict):
    """Test metrics the tuning must never read: any access fails."""

    def __getitem__(self, key):
        raise AssertionError(f"the tuning read a test metric: {key}")

    get = __contains__ = keys = items = values = __iter__ = __getitem__


def tuned(name, comp, r1, test_comp=0.0):
    return {"arm": name, "seed": 0, "config": tuning.CONFIG, "overrides": [], "timings": {"train_seconds": 30.0},
            "val_metrics": metrics(comp, r1), "metrics": Unreadable(metrics(test_comp, 0))}


def test_the_tuning_winner_is_the_highest_validation_score_and_reads_no_test_metric():
    points = [tuning.point_name(p) for p in tuning.points()]
    assert len(points) == len(set(points)) == 4 * 2 * 2 and points[0] == "w1_t3_i2" and "w4_t3_i2" in points
    pairs = tuned("pairs", 70, 30)
    # w2: +8 at -0.5 R@1 (score 8); w8: +11 at -4 R@1 (score 11 - 3 = 8, declared later: loses the tie);
    # t6: +9 at -2 R@1 (score 8); i4: +8.5 at +1 (score 8.5, the winner); the centre: +5 at 0 (score 5)
    records = [pairs, tuned("w4_t3_i2", 75, 30, test_comp=99), tuned("w2_t3_i2", 78, 29.5), tuned("w8_t3_i2", 81, 26),
               tuned("w4_t6_i2", 79, 28), tuned("w4_t3_i4", 78.5, 31)]
    assert [tuning.score(r, pairs) for r in records[1:]] == [5.0, 8.0, 8.0, 8.0, 8.5]
    assert tuning.winner(records) == "w4_t3_i4"
    assert tuning.winner(records[:4]) == "w2_t3_i2"  # a tie goes to the point declared first
    assert tuning.winner(records[1:]) is None  # no pairs-only baseline yet
    text = tuning.render_page(records, "contrasuite compare image_text --tune --seeds 0", "clip_tuning")
    assert "| **w4_t3_i4** (winner) | 4 | 3 | 4 | 78.5 | 78.5 | 31.0 | 31.0 | +8.5 | +1.0 | +8.5 |" in text
    assert "Winner: **w4_t3_i4**, the highest score of the points run so far (not yet run: w1_t3_i2, " in text
    assert f"sets {tuning.shipped()}" in text and tuning.shipped() in points


def test_the_tuning_points_pin_every_knob_and_start_from_the_align_run():
    for arm in tuning.arms()[2:]:
        assert arm.after == "align" and arm.seeds == (0,) and arm.checkpoint == "last"
        assert [o.split("=")[0] for o in arm.overrides[1:]] == [f"config.hard_negatives.{k}" for k in tuning.KNOBS]


@pytest.mark.slow
def test_a_quick_tuning_trains_in_children_and_chooses_on_validation(emoji_root, tmp_path):
    cache = tmp_path / "tune"
    argv = ["--tune", "--quick", "--cache", str(cache), "--data-root", str(emoji_root),
            "--arms", "align", "pairs", "w4_t3_i2", "w2_t3_i2"]
    assert report.main(argv) == 0
    records = [json.loads(p.read_text()) for p in sorted((cache / "records").glob("*_seed0.json"))]
    assert sorted(r["arm"] for r in records) == ["align", "pairs", "w2_t3_i2", "w4_t3_i2"]
    by_arm = {r["arm"]: r for r in records}
    run = [n for n in map(tuning.point_name, tuning.points()) if n in by_arm]  # declared order: a tie goes first
    best = max(run, key=lambda n: tuning.score(by_arm[n], by_arm["pairs"]))
    assert tuning.winner(records) == best
    assert "config.hard_negatives.weight=2" in by_arm["w2_t3_i2"]["command"]
    text = (cache / "clip_tuning.md").read_text()
    assert "QUICK SMOKE SETTINGS" in text and f"Winner: **{best}**" in text and "not yet run: w1_t3_i2" in text
