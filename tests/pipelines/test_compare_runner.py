"""The one comparison runner (pipelines/compare.py): records per run, resumable, keyed by config and data,
pages rendered only from current records; and the effects table (pipelines/effects.py)."""

import json
from pathlib import Path

import pytest

from contrasuite.pipelines import compare, effects
from contrasuite.pipelines.compare import Arm, Comparison, page_args


def _render(records, command):
    rows = [f"{r['arm']} seed {r['seed']}: loss {r['metrics'].get('loss', float('nan')):.4f}"
            for r in sorted(records, key=lambda r: (r["arm"], r["seed"]))]
    return "\n".join([f"# toy ({command})", *rows, ""])


@pytest.fixture
def toy_comparison(toy_yaml, cli_env, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", cli_env["PYTHONPATH"])  # the children import the toy task
    plain = toy_yaml("plain", run={"max_steps": 2})
    wider = toy_yaml("wider", run={"max_steps": 2}, config={"hidden": 24})

    def build(args):
        arms = (Arm("plain", str(plain)), Arm("wider", str(wider)),
                Arm("needs_plain", str(plain), ("config.data_file={after}/status.json",), after="plain"))
        return Comparison("toy", "toy_page", arms, _render, quick=("run.max_steps=1",))

    return build, plain


def _main(build, tmp_path, *flags):
    return compare.main("toy", build, ["--cache", str(tmp_path / "cache"), "--records", str(tmp_path / "records"),
                                       "--out", str(tmp_path / "page.md"), *flags], "toy comparison")


def test_runs_are_recorded_once_and_the_page_re_renders_from_the_records(toy_comparison, tmp_path, capsys):
    build, _ = toy_comparison
    assert _main(build, tmp_path, "--seeds", "0", "1") == 0
    records = tmp_path / "records"
    names = sorted(p.name for p in records.iterdir())
    assert names == ["needs_plain_seed0.json", "needs_plain_seed1.json", "page.json", "plain_seed0.json",
                     "plain_seed1.json", "wider_seed0.json", "wider_seed1.json"]
    record = json.loads((records / "plain_seed1.json").read_text())
    for key in ("command", "config_sha256", "data_version", "code", "machine", "libraries", "metrics", "timings",
                "selected", "seed"):
        assert key in record, key
    assert record["seed"] == 1 and "run.seed=1" in record["command"] and record["libraries"]["torch"]
    assert record["timings"]["steps_run"] == 2 and record["data_version"] == "undeclared"
    # the time to the selected checkpoint is the one its checkpoint holds, wall and CPU (the trainer's train_times)
    tested = json.loads((Path(record["run_dir"]) / "eval_test.json").read_text())
    assert tested["train_cpu_seconds"] > 0 and record["timings"]["cpu_seconds_to_selected"] == tested["train_cpu_seconds"]
    assert record["timings"]["seconds_to_selected"] == tested["train_seconds"] <= record["timings"]["train_seconds"]
    # the dependent arm got the same seed's run folder of the arm it names
    after = json.loads((records / "needs_plain_seed1.json").read_text())
    assert f"config.data_file={record['run_dir']}/status.json" in after["command"]
    page = (tmp_path / "page.md").read_text()
    assert "contrasuite compare toy --seeds 0 1" in page and "wider seed 1" in page

    capsys.readouterr()
    assert _main(build, tmp_path, "--seeds", "0", "1") == 0  # nothing left to train
    assert "training" not in capsys.readouterr().out
    (tmp_path / "page.md").unlink()
    assert _main(build, tmp_path, "--report-only") == 0
    assert (tmp_path / "page.md").read_text() == page
    assert json.loads((records / "page.json").read_text()) == {"domain": "toy", "args": [], "quick": False}


def test_a_changed_config_makes_its_records_stale_and_retrains_them(toy_comparison, tmp_path, capsys):
    build, plain = toy_comparison
    assert _main(build, tmp_path, "--seeds", "0", "--arms", "plain") == 0
    old = json.loads((tmp_path / "records" / "plain_seed0.json").read_text())
    plain.write_text(plain.read_text().replace("config: {}", "config: {lr: 0.05}"))
    capsys.readouterr()
    assert _main(build, tmp_path, "--report-only") == 0
    err = capsys.readouterr().err
    assert "made under another config or data, left out of the page: plain seed 0" in err
    assert "plain seed 0" not in (tmp_path / "page.md").read_text()
    assert _main(build, tmp_path, "--seeds", "0", "--arms", "plain") == 0
    new = json.loads((tmp_path / "records" / "plain_seed0.json").read_text())
    assert new["config_sha256"] != old["config_sha256"] and "plain seed 0" in (tmp_path / "page.md").read_text()


def test_a_failed_run_is_named_and_the_others_are_kept(toy_comparison, tmp_path, capsys):
    build, _ = toy_comparison

    def broken(args):
        good = build(args)
        return Comparison("toy", "toy_page", (good.arms[0], Arm("bad", good.arms[0].config, ("config.data_file=missing.bin",))),
                          _render)

    assert _main(broken, tmp_path, "--seeds", "0") == 1
    err = capsys.readouterr().err
    assert "FAILED bad seed 0: contrasuite train" in err
    assert (tmp_path / "records" / "plain_seed0.json").is_file() and not (tmp_path / "records" / "bad_seed0.json").exists()


def test_quick_runs_are_keyed_by_the_shortened_config(toy_comparison, tmp_path):
    build, _ = toy_comparison
    assert compare.main("toy", build, ["--quick", "--seeds", "0", "--arms", "plain", "--cache", str(tmp_path / "c")], "toy") == 0
    record = json.loads((tmp_path / "c" / "records" / "plain_seed0.json").read_text())
    assert record["timings"]["steps_run"] == 1 and (tmp_path / "c" / "toy_page.md").is_file()
    assert json.loads((tmp_path / "c" / "records" / "page.json").read_text())["quick"] is True


def test_unknown_arms_are_refused(toy_comparison, tmp_path):
    build, _ = toy_comparison
    with pytest.raises(SystemExit) as err:
        _main(build, tmp_path, "--arms", "nope")
    assert err.value.code == 2


def test_page_args_keep_only_the_domain_flags():
    assert page_args(["--protocol", "paper", "--seeds", "0", "1", "--jobs", "2", "--report-only", "--full"]) == [
        "--protocol", "paper", "--full"]


def test_effects_verdicts_follow_the_difference_and_its_standard_error(tmp_path):
    def records(arm, values):
        return [{"arm": arm, "seed": s, "metrics": {"acc": v}} for s, v in enumerate(values)]

    e = effects.Effect("M", "claim", "p", "m", "b", "acc", "accuracy", "ours")
    assert effects.measured(e, records("m", [3, 3.1, 2.9]) + records("b", [1, 1.1, 0.9]))[2] == "shown"
    assert effects.measured(e, records("m", [1, 1.1, 0.9]) + records("b", [3, 3.1, 2.9]))[2] == "opposite"
    assert effects.measured(e, records("m", [1, 2, 3]) + records("b", [1.5, 2.5, 2]))[2] == "not shown"
    assert effects.measured(e, records("m", [1]) + records("b", [1, 2]))[1:] == ("1 / 2", "not measured")
    lower = effects.Effect("M", "claim", "p", "m", "b", "acc", "error", "ours", higher_is_better=False)
    assert effects.measured(lower, records("m", [1, 1.1, 0.9]) + records("b", [3, 3.1, 2.9]))[2] == "shown"
    diff = effects.measured(e, records("m", [3, 4]) + records("b", [1, 2]))[0]
    assert diff == "+2.00 ± 0.71"
    (tmp_path / "records" / "p").mkdir(parents=True)
    for r in records("m", [3, 3.1, 2.9]) + records("b", [1, 1.1, 0.9]):
        (tmp_path / "records" / "p" / f"{r['arm']}_seed{r['seed']}.json").write_text(json.dumps(r))
    table = effects.render([e], tmp_path)
    assert "| M | claim | accuracy: `m` - `b` | ours | +2.00 ± 0.08 | 3 / 3 | shown | effect shown | - | p (not published) |" in table


def test_the_official_cell_adds_the_official_runs_beside_ours():
    ours = [{"arm": "m", "group": "g", "seed": s, "metrics": {"acc": v}} for s, v in enumerate([3, 3.1, 2.9])]
    official = [{"arm": "official_m", "group": "g", "seed": s, "metrics": {"acc": v}} for s, v in enumerate([1, 2])]
    other_group = [{**r, "group": "h"} for r in official]
    plain = effects.Effect("M", "claim", "p", "m", "b", "acc", "accuracy", "ours", official="the official code")
    linked = effects.Effect("M", "claim", "p", "m", "b", "acc", "accuracy", "ours", official="the official code",
                            official_arm=("official_m", "g"))
    assert effects.official_cell(plain, ours + official) == "the official code"
    assert effects.official_cell(linked, ours + other_group) == "the official code"  # another dataset's runs
    assert effects.official_cell(linked, ours + official) == (
        "the official code: official 1.50 over 2 seeds, official minus `m` -1.50 ± 0.50 (beyond 2 standard errors)")


def test_every_declared_effect_says_what_the_official_code_showed_or_why_none_ran():
    """Issue 39: each row of the effects table names the official code's result on our protocol or why it is absent,
    and each effect ours does not show says what that settled (bug or budget)."""
    declared = effects.declared()
    silent = [e.method for e in declared if not e.official.strip()]
    assert not silent, f"effects without an official-code cell: {silent}"
    for e, records in effects.with_records(declared):
        verdict = effects.measured(e, records)[2]
        assert verdict == "shown" or e.settled in effects.SETTLED, f"{e.method} ({verdict}): settled {e.settled!r}"


def test_every_seed_can_start_from_one_run_of_an_arm_that_runs_at_one_seed(toy_comparison, tmp_path):
    """PCL-SR's protocol: one converged model (seed 0) that every seed's fine-tuning starts from."""
    _, plain = toy_comparison

    def build(args):
        return Comparison("toy", "toy_page", (
            Arm("pretrain", str(plain), seeds=(0,)),
            Arm("finetune", str(plain), ("config.data_file={after}/status.json",), after="pretrain", after_seed=0)),
            _render)

    assert _main(build, tmp_path, "--seeds", "0", "1") == 0
    records = tmp_path / "records"
    assert not (records / "pretrain_seed1.json").exists()
    pretrain = json.loads((records / "pretrain_seed0.json").read_text())["run_dir"]
    for seed in (0, 1):
        assert f"config.data_file={pretrain}/status.json" in json.loads((records / f"finetune_seed{seed}.json").read_text())["command"]
    assert _main(build, tmp_path, "--seeds", "1", "--report-only") == 0
    assert "finetune seed 1" in (tmp_path / "page.md").read_text()
    assert compare.keys(build(None), build(None).arms[1], 1) != compare.keys(
        build(None), Arm("finetune", str(plain), ("config.data_file={after}/status.json",), after="pretrain"), 1)


def test_a_record_under_a_migrated_digest_is_current_and_is_rewritten(toy_comparison, tmp_path, monkeypatch):
    """A key move changes a config's digest but no run: config_migrations.json maps the old digest to the new one,
    so its records stay current, and migrate_records rewrites them, keeping the old digest."""
    build, plain = toy_comparison
    assert _main(build, tmp_path, "--seeds", "0", "--arms", "plain") == 0
    path = tmp_path / "records" / "plain_seed0.json"
    made = json.loads(path.read_text())
    made["config_sha256"] = "before-the-move"
    path.write_text(json.dumps(made))
    comparison = build(None)
    assert not compare.current_records(comparison, tmp_path / "records")[0]
    table = tmp_path / "migrations.json"
    table.write_text(json.dumps({"digests": {"before-the-move": {"to": compare.keys(comparison, comparison.arms[0], 0)[0],
                                                                 "commit": "the move"}}}))
    monkeypatch.setattr(compare, "MIGRATIONS", table)
    compare._migrations.cache_clear()
    try:
        assert [r["arm"] for r in compare.current_records(comparison, tmp_path / "records")[0]] == ["plain"]
        assert compare.migrate_records(tmp_path / "records") == ["plain_seed0.json"]
        record = json.loads(path.read_text())
        assert record["config_sha256"] == compare.keys(comparison, comparison.arms[0], 0)[0]
        assert record["config_migrated"] == {"from": "before-the-move", "commit": "the move"}
        assert list(record)[list(record).index("config_sha256") + 1] == "config_migrated"
        assert compare.migrate_records(tmp_path / "records") == []
    finally:
        compare._migrations.cache_clear()
