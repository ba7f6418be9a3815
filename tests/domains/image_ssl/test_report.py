"""The comparison report: the paper-claim sections from numbers, tables from cached results, resume."""

import json
from types import SimpleNamespace

import pytest

import contrasuite.domains.image_ssl.report as report


def rows(**values):
    return {name: [{"config": name, "seed": i, "linear_acc": v, "knn_acc": v, "wall_s": 1.0, "cpu_s": 1.0}
                   for i, v in enumerate(vals)] for name, vals in values.items()}


def test_claim_sections_report_difference_and_spread():
    text = "\n".join(report.claim_sections(rows(infonce=[50.0, 51.0, 52.0], weince=[55.0, 56.0, 57.0],
                                                 weince_repro=[51.0, 50.0, 52.0])))
    assert "## WEINCE against InfoNCE" in text and "+3.3 points" in text  # the paper's claim is quoted
    assert "`weince`: linear 56.00 ± 1.00 vs `infonce` 51.00 ± 1.00" in text and "+5.00 points" in text
    assert "above `infonce` by more than 2 standard errors" in text
    assert "`weince_repro`: linear 51.00" in text and "within the seed spread" in text
    assert "Feature Transformation" not in text  # neither side of that claim was run


def test_claim_sections_name_a_missing_side():
    text = "\n".join(report.claim_sections(rows(moco=[40.0, 41.0])))
    assert "`infonce_ft` or `moco` has no finished runs yet" in text
    assert "`weince` or `infonce` has no finished runs yet" in "\n".join(report.claim_sections(rows(weince=[1.0])))


def test_report_only_builds_a_partial_table_from_cache(tmp_path, monkeypatch):
    cache = tmp_path / "reduced"
    cache.mkdir()
    for seed, acc in enumerate([40.0, 42.0]):
        (cache / f"infonce_seed{seed}.json").write_text(json.dumps(
            {"config": "infonce", "seed": seed, "knn_acc": acc, "linear_acc": acc + 5, "wall_s": 100.0, "cpu_s": 90.0}))
    out = tmp_path / "page.md"
    assert report.main(["--report-only", "--results-dir", str(tmp_path), "--output", str(out), "--seeds", "0,1,2"]) == 0
    page = out.read_text()
    assert "| infonce | `reduced_infonce.yaml` | 2/3 | 41.00 ± 1.41 | 46.00 ± 1.41 | 100 | 90 |" in page
    assert "**Incomplete**" in page and "Reduced protocol" in page and "CIFAR-10 (JPEG copy)" in page
    assert "contrasuite compare image_ssl --results-dir" in page and "--report-only" not in page  # the training command


def test_cached_run_is_reused_only_while_its_config_is_unchanged(tmp_path, monkeypatch):
    args = SimpleNamespace(rerun=False, quick=False, data_root=None, epochs=None)
    overrides = ["run.seed=1", f"run.output_root={tmp_path / 'runs'}"]
    digest = report.config_digest(report.CONFIG_DIR / "reduced_dcl.yaml", overrides)
    cached = {"config": "dcl", "seed": 1, "knn_acc": 1.0, "config_sha256": digest}
    (tmp_path / "dcl_seed1.json").write_text(json.dumps(cached))
    monkeypatch.setattr(report, "train_and_test", lambda *a, **k: (_ for _ in ()).throw(AssertionError("ran again")))
    assert report.run_one("dcl", 1, args, tmp_path) == cached
    assert digest != report.config_digest(report.CONFIG_DIR / "reduced_dcl.yaml", [*overrides, "run.epochs=7"])
    assert digest == report.config_digest(report.CONFIG_DIR / "reduced_dcl.yaml", [*overrides, "run.progress=false"])
    with pytest.raises(AssertionError, match="ran again"):  # a longer protocol is another run
        report.run_one("dcl", 1, SimpleNamespace(**{**vars(args), "epochs": 7}), tmp_path)
