"""The compare reports' command runner: a real ``contrasuite train`` / ``eval`` of the toy task in a child process."""

import json

import pytest

from contrasuite.pipelines import checkpoint
from contrasuite.pipelines.cli_runs import data_root_args, run_cli, run_folder, thread_env, train_and_test


def test_train_then_eval_through_the_runner(toy_yaml, cli_env, tmp_path):
    config = toy_yaml(run={"max_steps": 2})
    env = thread_env(1, {"PYTHONPATH": cli_env["PYTHONPATH"]})
    log = tmp_path / "logs" / "toy.log"
    train = run_cli(["train", str(config)], log, env)
    run_dir = run_folder(train.stdout)
    assert run_dir.is_dir() and (run_dir / "checkpoints").is_dir()
    assert train.cpu_seconds > 0
    evaluation = run_cli(["eval", str(run_dir)], log, env)
    assert json.loads(evaluation.stdout)["split"] == "test"
    text = log.read_text()
    assert f"$ contrasuite train {config}" in text and f"$ contrasuite eval {run_dir}" in text
    assert f"run folder: {run_dir}" in text


def test_train_and_test_returns_the_tested_checkpoint_and_the_command(toy_yaml, cli_env, tmp_path):
    config = toy_yaml(run={"max_steps": 2})
    env = thread_env(1, {"PYTHONPATH": cli_env["PYTHONPATH"]})
    run = train_and_test(config, ["run.seed=3"], tmp_path / "toy.log", env, checkpoint="last")
    assert run.test == json.loads((run.run_dir / "eval_test.json").read_text())
    assert run.test["checkpoint"] == "last" and run.test["split"] == "test" and "metrics" in run.test
    assert run.command == f"contrasuite train {config} run.resume=auto run.seed=3"
    assert run.train_seconds > 0 and run.eval_seconds > 0 and run.cpu_seconds > 0
    assert "best" in run.val()


def test_a_failed_command_names_the_command_and_the_log(tmp_path):
    log = tmp_path / "fail.log"
    missing = tmp_path / "missing.yaml"
    with pytest.raises(RuntimeError, match=rf"contrasuite train {missing} failed with exit status 2; see {log}"):
        run_cli(["train", str(missing)], log, thread_env(1))
    assert "missing.yaml" in log.read_text()  # the child's error message is kept


def test_thread_env_sets_threads_and_extras():
    env = thread_env(3, {"HF_HUB_OFFLINE": "1"})
    assert (env["OMP_NUM_THREADS"], env["MKL_NUM_THREADS"], env["HF_HUB_OFFLINE"]) == ("3", "3", "1")


def test_run_folder_takes_the_last_line_and_rejects_output_without_one(tmp_path):
    assert run_folder("epoch 1\nrun folder: /a\nrun folder: /b\n").as_posix() == "/b"
    with pytest.raises(RuntimeError, match="no 'run folder:' line"):
        run_folder("epoch 1\n")


def test_data_root_args_are_absolute_for_children_that_run_in_the_repository_root(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert data_root_args("data") == ["--data-root", str(tmp_path / "data")]
    assert data_root_args(None) == []


def test_train_and_test_continues_an_interrupted_run_and_sums_its_training_time(toy_yaml, cli_env, tmp_path, pretend_killed):
    config = toy_yaml(run={"max_steps": 4, "checkpoint_every_steps": 2}, config={"sleep": 0.05})
    env = thread_env(1, {"PYTHONPATH": cli_env["PYTHONPATH"]})
    first = train_and_test(config, [], tmp_path / "toy.log", env)
    status = json.loads((first.run_dir / "status.json").read_text())
    assert status["resumed"] is False and status["train_seconds"] >= 4 * 0.05
    assert "earlier_train_cpu_seconds" not in status
    # the CPU time the checkpoint resumed from holds: last.pt's, saved a moment before the finished status's
    # (its 0.1 s rounding may differ from the status's by one step)
    first_cpu = checkpoint.load(first.run_dir / "checkpoints" / "last.pt")["train_cpu_seconds"]
    assert first_cpu <= status["train_cpu_seconds"]
    pretend_killed(first.run_dir)
    again = train_and_test(config, [], tmp_path / "toy.log", env)
    assert again.run_dir == first.run_dir  # continued in its folder, not trained again
    status = json.loads((again.run_dir / "status.json").read_text())
    assert status["resumed"] is True and again.train_seconds == status["train_seconds"] >= 4 * 0.05
    # the first process's training CPU (to the last.pt resumed from) is counted in the run's CPU time
    assert status["earlier_train_cpu_seconds"] == first_cpu and again.cpu_seconds > first_cpu
    seed_1 = train_and_test(config, ["run.seed=1"], tmp_path / "toy.log", env)
    assert seed_1.run_dir != first.run_dir  # another config is another run
