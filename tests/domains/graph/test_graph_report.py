"""The graph comparison report: its page drawn from run records, its arms, a run through the runner."""

import json
import os
from pathlib import Path

import pytest

import contrasuite.domains.graph.bench as bench
import contrasuite.domains.graph.report as report
from contrasuite.pipelines.config import load_config


def fake_record(arm, value, seed=0, group=None):
    metrics = {f"{m}_{r}": value for m in ("macro_f1", "micro_f1", "auc") for r in (20, 40, 60)}
    metrics.update({f"{m}_std_{r}": 0.5 for m in ("macro_f1", "micro_f1", "auc") for r in (20, 40, 60)})
    metrics.update(nmi=40.0, ari=30.0)
    return {"arm": arm, "group": group or arm.rsplit("_", 1)[1], "seed": seed, "metrics": metrics,
            "timings": {"epochs_run": 60, "seconds_per_epoch": 1.5, "selected_epoch": 40, "seconds_to_selected": 60.0}}


def test_one_seed_shows_the_probe_std_and_lists_what_is_missing():
    page = report.render_page("reduced", [fake_record("meow_acm", 90.0), fake_record("infonce_acm", 85.0)], "CMD")
    assert "| MEOW (ours) | 0 | 90.00 ± 0.50" in page and "| InfoNCE, same encoder (ours) | 0 | 85.00 ± 0.50" in page
    assert "88.56" in page  # the quoted HeCo row on ACM
    assert "adameow_acm" in page.split("Not yet run")[1] and "REDUCED" in page and "`CMD`" in page
    assert "MEOW minus InfoNCE" not in page  # one seed: no difference with a standard error


def test_several_seeds_give_mean_and_std_over_seeds_and_the_differences():
    records = [fake_record("meow_dblp", v, s) for s, v in enumerate((90.0, 92.0, 94.0))]
    records += [fake_record("infonce_dblp", v, s) for s, v in enumerate((89.0, 91.0, 90.0))]
    records += [fake_record("official_meow", v, s, group="dblp") for s, v in enumerate((95.0, 96.0))]
    page = report.render_page("paper", records, "CMD")
    assert "| MEOW (ours) | 0, 1, 2 | 92.00 ± 2.00 |" in page  # std over seeds, not the probe std 0.5
    assert "| MEOW, official code (jianxiangyu/MEOW code_meow, CPU patches) | 0, 1 | 95.50 ± 0.71 |" in page
    assert "MEOW minus InfoNCE, test Macro-F1, mean difference ± its standard error over 3 and 3 seeds: " \
           "+2.00 ± 1.29 at 20 labels per class" in page and "No difference reaches 2 standard errors." in page
    assert "official MEOW minus MEOW" in page and "(beyond 2 standard errors)" not in page.split("official MEOW minus")[0]
    assert "mean 60 s to the selected checkpoint" in page and "## ACM" not in page
    assert "CPU s)" not in page  # the fake records hold no CPU time to the checkpoint
    for r in records:
        r["timings"]["cpu_seconds_to_selected"] = 50.0 + r["seed"]
    assert "mean 60 s to the selected checkpoint (51 CPU s)" in report.render_page("paper", records, "CMD")


def test_the_effects_name_the_arms_of_the_paper_page():
    arms = {a.name for a in report.arms("paper")}
    assert all(e.arm in arms and e.baseline in arms and e.page == "graph_paper" for e in report.EFFECTS)
    assert {a.config for a in report.arms("reduced")} >= {"configs/graph/reduced/weince_imdb.yaml"}


def test_the_settings_control_runs_on_imdb_at_the_paper_protocol_only_and_is_compared_with_adameow():
    paper = {a.name: a.config for a in report.arms("paper")}
    assert paper["infonce_ada_imdb"] == "configs/graph/infonce_ada_imdb.yaml" and "infonce_ada_acm" not in paper
    assert not any(a.name.startswith("infonce_ada") for a in report.arms("reduced"))
    records = [fake_record("adameow_imdb", v, s) for s, v in enumerate((60.0, 61.0))]
    records += [fake_record("infonce_ada_imdb", v, s) for s, v in enumerate((58.0, 58.0))]
    page = report.render_page("paper", records, "CMD")
    assert "| InfoNCE with AdaMEOW's settings (ours) | 0, 1 | 58.00 ± 0.00 |" in page
    assert "AdaMEOW minus InfoNCE (AdaMEOW's settings), test Macro-F1" in page and "+2.50 ± 0.50" in page
    assert "meow_imdb" in page.split("Not yet run")[1] and "infonce_ada_imdb" not in page.split("Not yet run")[1]


def test_the_random_ties_controls_run_on_acm_only_and_are_compared_with_meow_and_each_other():
    paper = {a.name: a.config for a in report.arms("paper")}
    for method in ("meow", "infonce"):
        assert paper[f"{method}_random_ties_acm"] == f"configs/graph/{method}_random_ties_acm.yaml"
        ours, shipped = (load_config(f"configs/graph/{n}.yaml").config
                         for n in (f"{method}_random_ties_acm", f"{method}_acm"))
        assert ours.model.pathsim_ties == "random" and shipped.model.pathsim_ties == "numpy"
        assert ours.model.nei_max == shipped.model.nei_max and ours.objective == shipped.objective
        assert ours.negatives == shipped.negatives and ours.optim == shipped.optim
    assert not any("random_ties" in name for name in paper if not name.endswith("_acm"))
    records = [fake_record("meow_acm", v, s) for s, v in enumerate((92.0, 91.0))]
    records += [fake_record("meow_random_ties_acm", v, s) for s, v in enumerate((89.0, 90.0))]
    records += [fake_record("infonce_random_ties_acm", v, s) for s, v in enumerate((88.0, 88.0))]
    page = report.render_page("paper", records, "CMD")
    assert "| MEOW, PSP ties kept at random (ours) | 0, 1 | 89.50 ± 0.71 |" in page
    assert "MEOW minus MEOW (random ties), test Macro-F1" in page and "+2.00 ± 0.71" in page
    assert "| InfoNCE, PSP ties kept at random (ours) | 0, 1 | 88.00 ± 0.00 |" in page
    assert "MEOW (random ties) minus InfoNCE (random ties), test Macro-F1" in page and "+1.50 ± 0.50" in page


DATA = Path(os.environ["CONTRASUITE_DATA"])
needs_acm = pytest.mark.skipif(not (DATA / "graph" / "acm").is_dir(),
                               reason="needs the ACM graph under $CONTRASUITE_DATA")


@needs_acm
def test_a_run_trains_and_tests_through_the_runner_in_child_processes(tmp_path):
    """``contrasuite compare graph --quick``: one arm, one seed, its record and the page drawn from it."""
    assert report.main(["--quick", "--protocol", "reduced", "--arms", "infonce_acm", "--seeds", "0",
                        "--cache", str(tmp_path), "--data-root", str(DATA)]) == 0
    record = json.loads((tmp_path / "records" / "infonce_acm_seed0.json").read_text())
    assert record["selected"]["epoch"] == 1 and record["timings"]["epochs_run"] == 1
    assert 0 < record["metrics"]["macro_f1_20"] <= 100 and record["timings"]["train_seconds"] > 0
    assert record["command"].startswith("contrasuite train configs/graph/reduced/infonce_acm.yaml run.resume=auto "
                                        "run.epochs=1")
    assert record["data_version"] != "undeclared"  # the declared ACM files' checksums
    log = (tmp_path / "logs" / "infonce_acm_seed0.log").read_text()
    assert "$ contrasuite train" in log and "$ contrasuite eval" in log
    assert "| InfoNCE, same encoder (ours) | 0 |" in (tmp_path / "graph.md").read_text()


@needs_acm
def test_the_pair_weight_bench_keeps_far_less_than_the_naive_form(tmp_path):
    out = tmp_path / "memory.json"
    assert bench.main(["--dataset", "acm", "--epochs", "1", "--json", str(out)]) == 0
    record = json.loads(out.read_text())
    assert record["nodes"] == 4019 and record["seconds_per_epoch"] > 0
    assert record["weights_saved_for_backward_MiB"] < record["naive_pair_input_MiB"] / 20
