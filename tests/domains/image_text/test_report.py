"""The results page of ``contrasuite compare image_text``, from made-up cached runs."""

from contrasuite.domains.image_text.report import goal, write_page


def run(name, seed, comp, r1, val_comp, val_r1):
    def metrics(c, r):
        return {"i2t_r1": r, "t2i_r1": r, "comp_text/mean": c, "comp_image/mean": c, "comp_text/change_number": c,
                "comp_text/change_number/n": 128.0, "comp_text/swap_attributes": c, "google/i2t_r1": r / 2}
    return {"name": name, "seed": seed, "seconds": 60.0, "command": f"contrasuite train reduced_{name}.yaml",
            "metrics": metrics(comp, r1), "val_metrics": metrics(val_comp, val_r1)}


def test_goal_on_validation_and_test(tmp_path):
    results = {name: [run(name, s, comp + s, r1, vc, vr) for s in (0, 1, 2)]
               for name, comp, r1, vc, vr in (("align", 60, 30, 60, 30), ("pairs", 60, 30, 60, 30),
                                              ("text_negatives", 65, 30, 66, 30),
                                              ("text_image_negatives", 71, 29.5, 68, 28))}
    assert goal(results, "metrics") == (11.0, -0.5) and goal(results, "val_metrics") == (8.0, -2.0)
    page = tmp_path / "page.md"
    write_page(results, page, (0, 1, 2), quick=False)
    text = page.read_text()
    assert "| validation | +8.0 | -2.0 | NOT met |" in text and "| test | +11.0 | -0.5 | met |" in text
    assert "| + text and image negatives | 29.5 ± 0.0 | " in text  # test headline, mean ± std over seeds
    assert "| comp_text/change_number | 128 | 61.0 ± 1.0 | 61.0 ± 1.0 | 66.0 ± 1.0 | 72.0 ± 1.0 |" in text
    assert "| comp_text/swap_attributes | - | 61.0 ± 1.0 |" in text  # runs that did not record the count
    assert "Total training wall time of the cached runs: 12.0 min (" in text


def test_page_names_another_split(tmp_path):
    results = {name: [run(name, 0, 60, 30, 60, 30)] for name in ("align", "pairs", "text_negatives", "text_image_negatives")}
    page = tmp_path / "page.md"
    write_page(results, page, (0,), quick=False, split_seed=2)
    text = page.read_text()
    assert "(split seed 2)" in text and "contrasuite compare image_text --split-seed 2 --results-dir RESULTS_DIR" in text


def test_a_split_without_image_side_comparisons_has_no_goal_row(tmp_path):
    """``--quick``'s tiny validation split holds no negative image: its goal row is left out, the test row stays."""
    results = {name: [run(name, 0, 60, 30, 60, 30)] for name in ("align", "pairs", "text_negatives", "text_image_negatives")}
    for runs in results.values():
        del runs[0]["val_metrics"]["comp_image/mean"]
    assert goal(results, "val_metrics") is None and goal(results, "metrics") == (0.0, 0.0)
    page = tmp_path / "page.md"
    write_page(results, page, (0,), quick=True)
    text = page.read_text()
    assert "| test | +0.0 | +0.0 | NOT met |" in text and "| validation |" not in text
