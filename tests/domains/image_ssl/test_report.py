"""``contrasuite compare image_ssl``: its arms, the page drawn from hand-made records, a quick run through the runner."""

import json
import os
from pathlib import Path

import pytest

import contrasuite.domains.image_ssl.report as report


def record(arm, seed, linear, knn=None, state=None):
    return {"arm": arm, "group": "", "seed": seed, "metrics": {"knn_acc": knn if knn is not None else linear - 5,
                                                               "linear_acc": linear},
            "timings": {"train_seconds": 100.0, "eval_seconds": 20.0, "cpu_seconds": 90.0},
            "machine": {"cpu": "CPU X", "cores": 2, "threads": 1, "load_average_1min": 1.5},
            "libraries": {"torch": "2.0"}, "recorded": f"2026-12-0{seed + 1}T00:00:00Z",
            "data_source": "CIFAR-10 (JPEG copy)", "objective_state": state or {}}


def test_arms_one_page_per_protocol():
    reduced = {a.name: a for a in report.arms()}
    assert list(reduced) == [*report.CONFIGS, "random_init"]
    assert reduced["infonce_ft"].config == "configs/image_ssl/reduced_infonce_ft.yaml" and reduced["moco"].checkpoint == "last"
    assert reduced["random_init"].overrides == ("run.epochs=0",) and reduced["infonce"].overrides == ()
    longer = {a.name: a for a in report.arms(20)}
    assert list(longer) == ["infonce", "weince", "weince_repro", "random_init"]
    assert longer["weince"].overrides == ("run.epochs=20",) and longer["random_init"].overrides == ("run.epochs=0",)
    assert report.page_name(None) == "image_ssl" and report.page_name(20) == "image_ssl_epochs20"
    assert {a.name: a for a in report.arms(quick=True)}["infonce_mochi"].overrides == ("config.negatives.warmup_epochs=0",)


def test_the_effects_name_arms_of_their_pages():
    for e in report.EFFECTS:
        names = {a.name for a in report.arms(None if e.page == "image_ssl" else 20)}
        assert e.arm in names and e.baseline in names and e.metric == "linear_acc", e
    assert {(e.arm, e.baseline) for e in report.EFFECTS} >= {("infonce_ft", "moco"), ("dhel", "infonce"),
                                                              ("infonce_mochi", "infonce_queue")}


def test_page_from_records():
    gate = {"lambda_mean": [0.2, 0.21, 0.22], "lambda_std": [0.3, 0.3, 0.3], "lambda_active": [0.19, 0.2, 0.2]}
    records = [record("infonce", s, v) for s, v in enumerate((50.0, 51.0, 52.0))]
    records += [record("weince", s, v, state=gate) for s, v in enumerate((55.0, 56.0, 57.0))]
    records += [record("moco", 0, 40.0), record("random_init", 0, 39.0, knn=32.0)]
    page = report.render_page(None, False, records, "CMD")
    assert "`CMD`" in page and "docs/results/records/image_ssl/" in page and "Data: CIFAR-10 (JPEG copy)." in page
    assert "10,000-image training subset, batch 256, 5 epochs" in page  # the protocol read from the config
    assert "| infonce | `reduced_infonce.yaml` | 0, 1, 2 | 46.00 ± 1.00 | 51.00 ± 1.00 | 120 | 90 |" in page
    assert "| random init (no training) | `reduced_infonce.yaml`, `run.epochs=0` | 0 | 32.00 | 39.00 |" in page
    assert "CPU X (2 cores), 1 thread(s) per run, torch 2.0; 1-minute load average 1.50 to 1.50" in page
    assert "recorded 2026-12-01 to 2026-12-03" in page
    weince = page.split("## WEINCE, the paper's blend (reduced, 5 epochs) against `infonce`")[1].split("##")[0]
    assert "+3.27 linear" in weince and "`weince`: linear 56.00 ± 1.00 vs `infonce` 51.00 ± 1.00 (3 and 3 seeds)" in weince
    assert "a difference of +5.00 points (standard error 0.82), above `infonce` by at least 2 standard errors" in weince
    assert "not measured: `infonce_ft` has 0 seed(s) and `moco` 1" in page  # FT's section: one side ran, too few seeds
    assert "MoCHi" not in page  # neither side of that claim ran
    assert "| 3 | 0.220 ± 0.000 | 0.300 ± 0.000 | 0.200 ± 0.000 |" in page  # the gate, last epoch
    assert "Not yet run: dcl, dhel, kcl, weince_repro, siglip, infonce_ft, infonce_mochi, infonce_queue." in page
    assert "20 epochs" not in page and "image_ssl_epochs20" not in page


def test_the_longer_page_has_its_own_title_protocol_and_claims():
    page = report.render_page(20, False, [record("weince_repro", 0, 55.0)], "CMD")
    assert page.startswith("# image_ssl: reduced CPU comparison of the objectives, 20 epochs\n")
    assert "`run.epochs=20`" in page and "batch 256, 20 epochs" in page and "records/image_ssl_epochs20/" in page
    assert "## WEINCE-repro, blend + top-M terms (20 epochs) against `infonce`" in page and "DHEL" not in page
    assert "Not yet run: infonce, weince, random_init." in page


DATA = Path(os.environ["CONTRASUITE_DATA"])


@pytest.mark.skipif(not (DATA / "cifar10").is_dir(), reason="needs CIFAR-10 under $CONTRASUITE_DATA")
@pytest.mark.slow
def test_a_quick_run_through_the_runner(tmp_path):
    """``contrasuite compare image_ssl --quick``: a WEINCE arm and the untrained one, seed 0, their records and page."""
    assert report.main(["--quick", "--arms", "weince", "random_init", "--seeds", "0", "--cache", str(tmp_path),
                        "--data-root", str(DATA)]) == 0
    weince = json.loads((tmp_path / "records" / "weince_seed0.json").read_text())
    untrained = json.loads((tmp_path / "records" / "random_init_seed0.json").read_text())
    assert weince["command"].startswith("contrasuite train configs/image_ssl/reduced_weince.yaml run.resume=auto "
                                        "run.max_steps=4")
    assert weince["timings"]["steps_run"] == 4 and untrained["timings"]["epochs_run"] == 0
    assert untrained["selected"]["global_step"] <= 1 and untrained["selected"]["checkpoint"] == "last"
    assert 0 <= weince["metrics"]["linear_acc"] <= 100 and weince["data_source"].startswith("CIFAR-10")
    assert weince["objective_state"]["lambda_mean"] and weince["data_version"] != "undeclared"
    page = (tmp_path / "image_ssl.md").read_text()
    assert "(QUICK smoke version)" in page and "| weince | `reduced_weince.yaml` | 0 |" in page
    assert "| random init (no training) |" in page and "`weince` (1 seeds;" in page
    assert json.loads((tmp_path / "records" / "page.json").read_text()) == {"domain": "image_ssl", "args": [],
                                                                              "quick": True}
