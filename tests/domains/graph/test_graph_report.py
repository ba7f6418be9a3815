"""The graph comparison report: cached cells, resumable table, published rows."""

import json
import os
from pathlib import Path

import pytest

import contrasuite.domains.graph.bench as bench
import contrasuite.domains.graph.report as report


def fake_record(method, dataset, value):
    metrics = {f"{m}_{r}": value for m in ("macro_f1", "micro_f1", "auc") for r in (20, 40, 60)}
    metrics.update({f"{m}_std_{r}": 0.5 for m in ("macro_f1", "micro_f1", "auc") for r in (20, 40, 60)})
    metrics.update(nmi=40.0, ari=30.0)
    return {"method": method, "dataset": dataset, "metrics": metrics, "epochs": 60, "seconds_per_epoch": 1.5,
            "best_epoch": 40}


def test_table_only_renders_cached_cells_and_lists_missing(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "meow_acm.json").write_text(json.dumps(fake_record("meow", "acm", 90.0)))
    (cache / "infonce_acm.json").write_text(json.dumps(fake_record("infonce", "acm", 85.0)))
    out = tmp_path / "graph.md"
    assert report.main(["--table-only", "--cache", str(cache), "--out", str(out)]) == 0
    text = out.read_text()
    assert "| MEOW (ours) | 0 | 90.00 ± 0.50" in text and "| InfoNCE, same encoder (ours) | 0 | 85.00 ± 0.50" in text
    assert "88.56" in text and "91.12" in text  # HeCo paper and official MEOW rows on ACM
    assert "adameow_acm" in text.split("Not yet run")[1]  # what is missing is named
    assert "REDUCED" in text
    assert "--table-only" not in text  # the page names the command that trains its runs


def test_cached_cell_is_not_rerun(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    record = fake_record("weince", "imdb", 70.0)
    (cache / "weince_imdb.json").write_text(json.dumps(record))
    assert report.run_one("weince", "imdb", False, cache, None) == record


def test_several_seeds_give_mean_and_std_over_seeds(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    for seed, value in ((0, 90.0), (1, 92.0), (2, 94.0)):
        name = report.cache_file(cache, "meow", "dblp", False, seed).name
        (cache / name).write_text(json.dumps(fake_record("meow", "dblp", value) | {"seed": seed}))
    assert sorted(p.name for p in cache.iterdir()) == ["meow_dblp.json", "meow_dblp_seed1.json", "meow_dblp_seed2.json"]
    out = tmp_path / "graph.md"
    assert report.main(["--table-only", "--cache", str(cache), "--out", str(out)]) == 0
    assert "| MEOW (ours) | 0, 1, 2 | 92.00 ± 2.00 |" in out.read_text()  # std over seeds, not the probe std 0.5


def test_meow_against_infonce_gives_difference_standard_error_and_verdict():
    def seeds(method, values):
        return [fake_record(method, "acm", v) | {"seed": s} for s, v in enumerate(values)]

    close = {("meow", "acm"): seeds("meow", [90.0, 91.0, 92.0]), ("infonce", "acm"): seeds("infonce", [89.0, 91.0, 90.0])}
    text = report.versus(close, "acm")
    assert "+1.00 ± 0.82 at 20 labels per class" in text and "does not measurably beat" in text
    apart = {**close, ("infonce", "acm"): seeds("infonce", [80.0, 81.0, 82.0])}
    assert "(beyond 2 standard errors)" in report.versus(apart, "acm")
    assert "does not measurably" not in report.versus(apart, "acm")
    assert report.versus({("meow", "acm"): close[("meow", "acm")][:1]}, "acm") == ""  # one seed: no comparison
    page = report.render(close, None, True, ["--full"])
    assert "(full length)" in page and "mean 60 s to the checkpoint selected on validation" in page
    assert "272 s" in page and "## DBLP" not in page and "Not yet run" not in page


DATA = Path(os.environ["CONTRASUITE_DATA"])
needs_acm = pytest.mark.skipif(not (DATA / "graph" / "acm").is_dir(),
                               reason="needs the ACM graph under $CONTRASUITE_DATA")


@needs_acm
def test_a_cell_trains_and_tests_through_the_commands_in_child_processes(tmp_path):
    """One way of training for every report: ``contrasuite train`` and ``eval`` in children, logged."""
    short = ["run.epochs=1", "run.eval_every_epochs=1", "config.probe.runs=2", "config.val_probe_runs=1"]
    record = report.run_one("infonce", "acm", False, tmp_path, str(DATA), 0, extra=short)
    assert record["best_epoch"] == 1 and record["epochs"] == 1
    assert 0 < record["metrics"]["macro_f1_20"] <= 100 and record["train_seconds"] > 0
    assert record["command"].startswith("contrasuite train configs/graph/reduced/infonce_acm.yaml run.seed=0 run.epochs=1")
    log = (tmp_path / "logs" / "infonce_acm.log").read_text()
    assert "$ contrasuite train" in log and "$ contrasuite eval" in log
    assert json.loads((tmp_path / "infonce_acm.json").read_text()) == record


@needs_acm
def test_the_pair_weight_bench_keeps_far_less_than_the_naive_form(tmp_path):
    out = tmp_path / "memory.json"
    assert bench.main(["--dataset", "acm", "--epochs", "1", "--json", str(out)]) == 0
    record = json.loads(out.read_text())
    assert record["nodes"] == 4019 and record["seconds_per_epoch"] > 0
    assert record["weights_saved_for_backward_MiB"] < record["naive_pair_input_MiB"] / 20
