"""No silent failure: each way a run could end "finished" with untrustworthy results is refused or fails.

One test per case of the reliability review (issue 24): diverging runs under ``non_finite=skip``,
resume under another config, two processes on one run folder, ranges in the schema, non-checkpoint
torch files, failed resumes in ``status.json``, options after overrides, the objective term named.
"""

import json
import subprocess
import sys

import pytest
import torch
import yaml

from contrasuite.pipelines import trainer
from contrasuite.pipelines.checkpoint import load
from contrasuite.pipelines.cli import main
from contrasuite.pipelines.config import ConfigError, load_config
from contrasuite.pipelines.run_lock import RunLock, RunLockedError
from contrasuite.pipelines.step import NonFiniteStepError


def _status(run_dir):
    return json.loads((run_dir / "status.json").read_text())


def _only_run(root):
    (run_dir,) = [p.parent for p in root.rglob("config.yaml")]
    return run_dir


def test_diverging_run_under_skip_fails_instead_of_finishing(toy_yaml, capsys):
    path = toy_yaml(run={"non_finite": "skip"}, config={"lr": 1e30})
    assert main(["train", str(path)]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "step 0 (epoch 0), optimizer 'model': the update made the weights" in err and "model.0.weight" in err
    status = _status(_only_run(path.parent / "runs"))
    assert status["state"] == "failed" and "not skippable" in status["error"]


def test_consecutive_skips_are_bounded_and_name_the_term(toy_yaml):
    path = toy_yaml(run={"non_finite": "skip", "max_consecutive_skips": 2}, config={"nan_at_step": 1, "nan_steps": 3})
    with pytest.raises(NonFiniteStepError, match=r"3 consecutive steps skipped \(run.max_consecutive_skips=2\); "
                                                  r"the last: step 3 \(epoch 0\), optimizer 'model': non-finite loss "
                                                  r".* from terms \['objective'\]"):
        trainer.train(load_config(path))
    assert _status(_only_run(path.parent / "runs"))["state"] == "failed"
    # two skips in a row are within the bound: the run finishes and its weights are finite
    ok = trainer.train(load_config(path, ["run.output_root=" + str(path.parent / "ok"), "config.nan_steps=2"]))
    assert _status(ok)["state"] == "finished"
    assert all(torch.isfinite(v).all() for v in load(ok / "checkpoints" / "last.pt")["modules"]["model"].values())


def test_resume_refuses_a_checkpoint_from_another_config(toy_yaml, capsys):
    path = toy_yaml(run={"epochs": 2, "checkpoint_every_steps": 2})
    run_dir = trainer.train(load_config(path, ["run.max_steps=3"]))
    other = trainer.train(load_config(path, ["run.max_steps=3", "run.output_root=" + str(path.parent / "other"),
                                             "config.objective.terms.0.name=dcl"]))
    (run_dir / "checkpoints" / "last.pt").write_bytes((other / "checkpoints" / "last.pt").read_bytes())
    (run_dir / "checkpoints" / "last.pt.json").write_bytes((other / "checkpoints" / "last.pt.json").read_bytes())
    assert main(["resume", str(run_dir), "run.max_steps=null"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "was written under another config: config.objective.terms.0.name ('dcl' -> 'infonce')" in err
    # a deliberate change, said on the command line, is accepted and recorded in config.yaml
    (run_dir / "checkpoints" / "last.pt").write_bytes((other / "checkpoints" / "last.pt").read_bytes())
    assert main(["resume", str(run_dir), "run.max_steps=null", "config.objective.terms.0.name=dcl"]) == 0
    assert _status(run_dir)["state"] == "finished"
    assert "name: dcl" in (run_dir / "config.yaml").read_text()


def test_result_neutral_settings_and_max_steps_rules():
    saved = {"run": {"progress": False, "max_steps": 3, "data_root": "/a"}, "config": {"lr": 0.1}}
    moved = {"run": {"progress": True, "max_steps": 3, "data_root": "/b"}, "config": {"lr": 0.1}}
    assert trainer.config_changes(saved, moved) == []
    longer = {"run": {"progress": False, "max_steps": None, "data_root": "/a"}, "config": {"lr": 0.1}}
    assert trainer.config_changes(saved, longer) == ["run.max_steps"]
    assert trainer.config_changes(saved, longer, ["run.max_steps"]) == []
    assert trainer.config_changes(saved, {**saved, "config": {"lr": 0.1, "extra": 1}}) == ["config.extra"]


def test_a_second_process_on_a_run_folder_is_refused(toy_yaml, cli_env):
    path = toy_yaml(run={"epochs": 2, "checkpoint_every_steps": 1})
    run_dir = trainer.train(load_config(path, ["run.max_steps=2"]))
    holder = RunLock(run_dir)
    code = ("import sys, time; sys.path.insert(0, sys.argv[2]); from contrasuite.pipelines.run_lock import RunLock; "
            "lock = RunLock(sys.argv[1]); lock.acquire(); print('locked', flush=True); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", code, str(run_dir), str(path.parent)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "locked"
        with pytest.raises(RunLockedError, match=rf"in use by process {proc.pid} "):
            holder.acquire()
        out = subprocess.run([sys.executable, "-m", "contrasuite.pipelines.cli", "resume", str(run_dir), "run.max_steps=null"],
                             env=cli_env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1
        assert f"is in use by process {proc.pid}" in out.stderr
    finally:
        proc.kill()
        proc.wait()
    assert _status(run_dir)["state"] == "finished"  # the refused resume wrote nothing
    holder.acquire()  # the kernel dropped the dead holder's lock
    holder.release()


def test_the_lock_is_held_while_training_and_released_after(toy_yaml):
    run_dir = trainer.train(load_config(toy_yaml(run={"max_steps": 1})))
    assert not (run_dir / ".lock").exists()  # a finished run leaves no lock file behind
    lock = RunLock(run_dir)
    lock.acquire()
    try:
        with pytest.raises(RunLockedError):
            trainer.resume(run_dir, ["run.max_steps=2"])
        assert trainer.evaluate(run_dir)["metrics"]  # evaluation only reads: it needs no lock
    finally:
        lock.release()


def test_a_lock_file_removed_by_its_holder_is_not_locked_twice(tmp_path):
    """The holder unlinks .lock while holding it; a process that opened the old file must not count as holding."""
    first, second = RunLock(tmp_path), RunLock(tmp_path)
    first.acquire()
    stale = open(tmp_path / ".lock", "a+")  # opened before the holder let go, as a racing process would
    first.release()
    assert not (tmp_path / ".lock").exists()
    second.acquire()  # locks a new file at the path
    try:
        assert second._still_linked(second._handle) and not second._still_linked(stale)
        with pytest.raises(RunLockedError):
            RunLock(tmp_path).acquire()
    finally:
        stale.close()
        second.release()


@pytest.mark.parametrize("override, key", [
    ("run.max_steps=-3", "run.max_steps: must be >= 1, got -3"),
    ("run.epochs=-1", "run.epochs: must be >= 0"),
    ("run.max_consecutive_skips=-1", "run.max_consecutive_skips: must be >= 0"),
    ("run.precision=fp8", "run.precision: 'fp8' is not one of"),
])
def test_engine_ranges_fail_at_load_naming_the_key(toy_yaml, override, key):
    with pytest.raises(ConfigError, match=key.replace("(", r"\(").replace(")", r"\)")):
        load_config(toy_yaml(), [override])


@pytest.mark.parametrize("config, override, message", [
    ("image_ssl/reduced_infonce.yaml", "config.batch_size=0", "config.batch_size: must be > 0, got 0"),
    ("image_ssl/reduced_infonce.yaml", "config.optim.lr=-0.1", "config.optim.lr: must be > 0, got -0.1"),
    ("image_ssl/reduced_infonce.yaml", "config.optim.name=lamb", "config.optim.name: 'lamb' is not one of"),
    ("image_ssl/reduced_infonce.yaml", "config.model.encoder=vit", "config.model.encoder: 'vit' is not one of"),
    ("code_search/reduced_infonce.yaml", "config.batch_size=0", "config.batch_size: must be > 0"),
    ("code_search/reduced_infonce.yaml", "config.optim.lr=-1", "config.optim.lr: must be > 0"),
    ("graph/reduced/meow_acm.yaml", "config.optim.lr=-1", "config.optim.lr: must be > 0"),
    ("metric_learning/emoji_multi_similarity.yaml", "config.batch_size=0", "config.batch_size: must be > 0"),
    ("image_text/reduced_align.yaml", "config.batch_size=0", "config.batch_size: must be > 0"),
    ("super_resolution/reduced_x2_l1.yaml", "config.batch_size=0", "config.batch_size: must be > 0"),
    ("translation/reduced_cut_emoji.yaml", "config.batch_size=0", "config.batch_size: must be > 0"),
])
def test_domain_ranges_and_choices_fail_in_validate_configs(tmp_path, capsys, config, override, message):
    from pathlib import Path

    shipped = Path(__file__).resolve().parents[2] / "configs" / config
    with pytest.raises(ConfigError, match=message):
        load_config(shipped, [override])
    # and validate-configs reports it for a file that sets it
    key, _, value = override.partition("=")
    *parents, last = key.split(".")[1:]
    section: dict = {}
    node = section
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = yaml.safe_load(value)
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump({"extends": str(shipped), "config": section}))
    assert main(["validate-configs", "--root", str(tmp_path)]) == 1
    assert message.split(":")[0] in capsys.readouterr().err


def test_a_torch_file_that_is_not_a_checkpoint_is_refused_and_the_run_left_as_it_was(toy_yaml, capsys):
    run_dir = trainer.train(load_config(toy_yaml(run={"epochs": 2}), ["run.max_steps=2"]))
    (run_dir / "checkpoints" / "last.pt.json").unlink()
    torch.save({"weights": torch.ones(2)}, run_dir / "checkpoints" / "last.pt")
    before = {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()}
    assert main(["resume", str(run_dir), "run.max_steps=null"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "last.pt is a torch file but not a contrasuite checkpoint (no 'modules'" in err
    assert {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()} == before
    assert _status(run_dir)["state"] == "finished"


def test_options_may_follow_the_overrides(toy_yaml, tmp_path, capsys):
    path = toy_yaml()
    assert main(["train", str(path), "--data-root", str(tmp_path / "root"), "run.max_steps=1"]) == 0
    run_dir = _only_run(tmp_path / "runs")
    resolved = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert resolved["run"]["data_root"] == str(tmp_path / "root") and resolved["run"]["max_steps"] == 1
    with pytest.raises(SystemExit):
        main(["train", str(path), "--bogus", "run.max_steps=1"])
    assert "unrecognized arguments: --bogus" in capsys.readouterr().err


def test_image_ssl_names_the_non_finite_objective_term(tmp_path):
    """image_ssl passes its terms: the message says which one (``0:infonce``) went non-finite."""
    import os
    from pathlib import Path

    if not (Path(os.environ["CONTRASUITE_DATA"]) / "cifar10").is_dir():
        pytest.skip("needs the CIFAR-10 JPEG copy under $CONTRASUITE_DATA/cifar10")
    path = Path(__file__).resolve().parents[2] / "configs" / "image_ssl" / "reduced_infonce.yaml"
    overrides = ["run.max_steps=1", "run.progress=false", f"run.output_root={tmp_path}", "config.data.train_subset=256",
                 "config.data.test_subset=128", f"config.data.cache_dir={tmp_path / 'cache'}", "config.batch_size=32",
                 "config.objective.terms.0.temperature=1.0e-40", "config.objective.terms.1={name: dcl, weight: 0.5}"]
    with pytest.raises(NonFiniteStepError, match=r"step 0 \(epoch 0\), optimizer 'model': non-finite loss .* "
                                                  r"from terms \['0:infonce'\]"):
        trainer.train(load_config(path, overrides))
