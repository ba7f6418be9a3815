"""``contrasuite compare code_search`` on the comparison runner: records keyed by the mined set's version, the
page rendered from them, the kept scale records, and a quick run on the ``smoke`` mined set."""

import argparse
import json
from pathlib import Path

import pytest

import contrasuite.domains.code_search.report as report
from contrasuite.pipelines.cli_runs import ROOT
from contrasuite.pipelines.compare import keys

SCALE_RECORDS = ROOT / "docs" / "results" / "records" / "code_search_scale"
ARCHIVED_SCALE = ROOT / "docs" / "results" / "archive" / "code_search_scale.md"


def fake_mined(cache: Path, version: str, name: str = "reduced") -> None:
    """A manifest for the named set under the cache root: the report reads its version and does not mine."""
    folder = cache / "code_search" / "mined" / name
    folder.mkdir(parents=True)
    counts = {"pairs": 20000, "train": 15943, "val": 1947, "test": 2110}
    (folder / "manifest.json").write_text(json.dumps({"dataset_version": version, "counts": counts}))


def build(protocol: str) -> report.Comparison:
    return report._build(argparse.Namespace(protocol=protocol, quick=False, arms=None))


def record(comparison, arm_name: str, seed: int, mrr: float, flagged: float | None = None) -> dict:
    arm = next(a for a in comparison.arms if a.name == arm_name)
    digest, version = keys(comparison, arm, seed)
    metrics = {f"mined_{m}": mrr for m in report.METRICS} | {f"cosqa_{m}": mrr / 2 for m in report.METRICS}
    return {"page": comparison.page, "arm": arm_name, "group": "", "seed": seed, "config": arm.config,
            "overrides": list(arm.overrides), "config_sha256": digest, "data_version": version, "metrics": metrics,
            "selected": {"validation": mrr + 1}, "timings": {"train_seconds": 50.0, "eval_seconds": 10.0},
            "mined_set": {"dataset_version": version, "pairs": 20000, "train": 15943, "val": 1947, "test": 2110},
            "prior": {} if flagged is None else {"flagged_share": flagged}}


def test_the_page_is_rendered_from_current_records_only(tmp_path, monkeypatch):
    monkeypatch.setenv("CONTRASUITE_CACHE", str(tmp_path / "cache"))
    fake_mined(tmp_path / "cache", "abc123abc123")
    comparison = build("scale")
    records = tmp_path / "records"
    records.mkdir()
    for seed, (base, soft) in enumerate(((70.0, 71.0), (70.2, 71.1), (70.1, 70.9))):
        for name, value in (("infonce", base), ("soft_bm25", soft)):
            flagged = None if name == "infonce" else 0.001
            (records / f"{name}_seed{seed}.json").write_text(json.dumps(record(comparison, name, seed, value, flagged)))
    stale = record(comparison, "soft_model", 0, 99.0) | {"data_version": "another0set"}  # trained on another mined set
    (records / "soft_model_seed0.json").write_text(json.dumps(stale))
    page = tmp_path / "page.md"
    assert report.main(["--protocol", "scale", "--report-only", "--records", str(records), "--out", str(page)]) == 0
    text = page.read_text()
    assert "| InfoNCE | 0, 1, 2 | 71.10 ± 0.10 | 70.10 ± 0.10 |" in text
    assert "| Soft-InfoNCE, BM25 prior | 0, 1, 2 | 72.00 ± 0.10 | 71.00 ± 0.10 |" in text
    assert "| 0.100 ± 0.000 | 1.0 |" in text  # flagged negatives in %, minutes of train + eval
    assert "BM25 prior +0.90 ± 0.08 over 3 and 3 seeds (beyond 2 standard errors)" in text
    assert "99.00" not in text and "Not yet run: zero_shot, soft_simcse, soft_model." in text
    assert "Dataset version `abc123abc123`: 20000 pairs (train 15943, val 1947, test 2110)." in text
    assert "`contrasuite compare code_search --protocol scale --seeds 0 1 2`" in text
    assert "soft_model: configs/code_search/reduced_soft_model.yaml" not in text  # no record of it is current
    assert json.loads((records / "page.json").read_text()) == {"domain": "code_search", "args": ["--protocol", "scale"],
                                                              "quick": False}


def test_the_soft_model_prior_is_the_same_seeds_infonce_run_and_zero_shot_trains_nothing():
    arms = {a.name: a for a in report.arms("scale")}
    assert arms["soft_model"].after == "infonce" and "config.prior.checkpoint={after}" in arms["soft_model"].overrides
    assert arms["zero_shot"].overrides[-1] == "run.epochs=0" and arms["zero_shot"].config.endswith("reduced_infonce.yaml")
    assert all(a.overrides[:4] == report.PROTOCOLS["scale"][0] for a in arms.values())
    assert all(not a.overrides or a.overrides[0] == "run.epochs=0" or a.after for a in report.arms("reduced"))
    assert "config.prior.max_steps=2" in next(a for a in report.arms("reduced", quick=True) if a.name == "soft_simcse").overrides


def test_the_kept_scale_records_hold_the_archived_pages_numbers(tmp_path, monkeypatch):
    """The 13 records converted from the old report's cache render the table the page showed, where the named
    set is the version they were trained on (d94fa3f780c2; this machine's packages mine another)."""
    monkeypatch.setenv("CONTRASUITE_CACHE", str(tmp_path / "cache"))
    fake_mined(tmp_path / "cache", "d94fa3f780c2")
    records = tmp_path / "records"
    records.mkdir()
    for f in SCALE_RECORDS.glob("*_seed*.json"):
        (records / f.name).write_text(f.read_text())
    assert len(list(records.iterdir())) == 13
    page = tmp_path / "page.md"
    assert report.main(["--protocol", "scale", "--report-only", "--records", str(records), "--out", str(page)]) == 0
    table = [line for line in ARCHIVED_SCALE.read_text().splitlines() if line.startswith("| ") and "|---" not in line]
    rendered = page.read_text()
    assert len(table) == 6
    for line in table[1:]:  # every number of every row; the seeds column now names the seeds
        cells = line.split(" | ")
        assert " | ".join([cells[0], *cells[2:]]) in "\n".join(
            " | ".join([r.split(" | ")[0], *r.split(" | ")[2:]]) for r in rendered.splitlines() if r.startswith("| "))


@pytest.mark.slow
def test_a_quick_comparison_trains_on_the_smoke_set_in_children(tmp_path, monkeypatch):
    """Zero-shot (no training), InfoNCE and the model prior from the same seed's InfoNCE run, on the ``smoke``
    mined set (mined into the temporary cache root in about a second)."""
    monkeypatch.setenv("CONTRASUITE_CACHE", str(tmp_path / "cache"))
    cache = tmp_path / "compare"
    assert report.main(["--quick", "--cache", str(cache), "--seeds", "0",
                        "--arms", "zero_shot", "infonce", "soft_model"]) == 0
    records = {p.stem: json.loads(p.read_text()) for p in (cache / "records").glob("*_seed0.json")}
    assert sorted(records) == ["infonce_seed0", "soft_model_seed0", "zero_shot_seed0"]
    smoke = tmp_path / "cache" / "code_search" / "mined" / "smoke"
    version = json.loads((smoke / "manifest.json").read_text())["dataset_version"]
    assert {r["data_version"] for r in records.values()} == {version}
    assert records["zero_shot_seed0"]["timings"]["epochs_run"] == 0
    assert records["infonce_seed0"]["run_dir"] in records["soft_model_seed0"]["command"]  # its prior
    assert 0 < records["soft_model_seed0"]["prior"]["weight_min"] <= 1 and records["infonce_seed0"]["prior"] == {}
    text = (cache / "code_search.md").read_text()
    assert "| InfoNCE | 0 |" in text and "| Soft-InfoNCE, InfoNCE-model prior | 0 |" in text
    soft = next(line for line in text.splitlines() if line.startswith("| Soft-InfoNCE, InfoNCE-model prior"))
    assert soft.split(" | ")[-2] != "-"  # the flagged-negatives column, from the prior's logged statistics
    assert "Not yet run: soft_bm25, soft_simcse." in text and f"Dataset version `{version}`" in text
