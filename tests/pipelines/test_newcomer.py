"""A newcomer's first hour: what the commands show, where runs go, what a run keeps on disk."""

import subprocess
import sys
from pathlib import Path

import pytest

from contrasuite.pipelines import trainer
from contrasuite.pipelines.catalog import benches, domain_commands, reports
from contrasuite.pipelines.checkpoint import load
from contrasuite.pipelines.cli import main
from contrasuite.pipelines.config import config_root, load_config
from contrasuite.pipelines.registry import TASKS

ROOT = Path(__file__).resolve().parents[2]


def test_list_names_tasks_objectives_with_parameters_configs_reports_and_benches(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "image_ssl          contrasuite.domains.image_ssl.task:ImageSSLTask" in out
    assert "infonce                  temperature=0.1" in out and "weince" in out
    assert "graph/reduced/meow_acm" in out and "image_ssl/infonce" in out
    assert "compare (contrasuite compare NAME --help):" in out and "objectives " in out
    trainable = out.split("shipped configs", 1)[1].split("fragments the configs above extend", 1)
    assert "graph/datasets/acm" not in trainable[0] and "image_ssl/base/full" not in trainable[0]
    assert "graph/datasets/acm" in trainable[1].splitlines()[0]


def test_bench_and_compare_help_list_their_names(capsys):
    for verb, entries in (("bench", benches()), ("compare", reports())):
        out = subprocess.run([sys.executable, "-m", "contrasuite.pipelines.cli", verb, "--help"], capture_output=True,
                             text=True, timeout=120).stdout
        for name, entry in entries.items():
            assert f"  {name:18s} {entry.summary}" in out
    assert set(benches()) >= {"objectives", "gpu", "data_loading", "code_search", "super_resolution", "translation"}
    assert set(reports()) == {"code_search", "graph", "image_ssl", "image_text", "metric_learning", "super_resolution",
                              "translation", "effects"}  # effects: the table across the reports (pipelines/effects.py)


def test_domain_commands_come_from_the_domain_folders():
    """Each domain module that declares ``COMMAND`` is a subcommand; the engine names no domain."""
    found = {name: entry.module for name, entry in domain_commands().items()}
    assert found == {"code-search": "contrasuite.domains.code_search.commands",
                     "generate-negatives": "contrasuite.domains.image_text.generate_negatives",
                     "retrieve": "contrasuite.domains.metric_learning.retrieve",
                     "translate": "contrasuite.domains.translation.translate",
                     "upscale": "contrasuite.domains.super_resolution.upscale"}
    domains = [folder.name for folder in (ROOT / "domains").iterdir() if (folder / "task.py").is_file()]
    assert len(domains) == 7 and set(domains) == set(TASKS)  # every domain folder is a task, found by its folder
    for path in (ROOT / "pipelines").rglob("*.py"):
        text = path.read_text()
        assert not any(f"domains.{d}" in text for d in domains), f"{path.relative_to(ROOT)} names a domain"


def test_reduced_and_full_configs_write_to_different_run_folders():
    reduced = load_config(config_root() / "graph" / "reduced" / "meow_acm.yaml")
    full = load_config(config_root() / "graph" / "meow_acm.yaml")
    assert (reduced.name, full.name) == ("reduced/meow_acm", "meow_acm")
    assert load_config("image_ssl/reduced_infonce").name == "reduced_infonce"


def test_a_resumed_run_keeps_its_name_and_best_pt_holds_no_optimizer_state(toy_yaml, capsys):
    path = toy_yaml(run={"epochs": 2, "progress": True})
    run_dir = trainer.train(load_config(path, ["run.max_steps=3"]))
    assert run_dir.parent.name == "toy"
    trainer.resume(run_dir, ["run.max_steps=null"])
    err = capsys.readouterr().err
    assert "ToyTask/toy" in err and "ToyTask/config" not in err  # the progress label after resume
    best, last = load(run_dir / "checkpoints" / "best.pt"), load(run_dir / "checkpoints" / "last.pt")
    assert best["optimizers"] == {} and best["schedulers"] == {} and last["optimizers"]["model"]["state"]
    assert main(["eval", str(run_dir)]) == 0  # evaluation needs only the modules


def test_a_run_shorter_than_the_log_interval_still_logs_its_last_step(toy_yaml):
    """max_steps below log_every_steps used to leave metrics.csv without a loss and curves.png empty."""
    import csv

    run_dir = trainer.train(load_config(toy_yaml(run={"log_every_steps": 50, "max_steps": 3})))
    with open(run_dir / "metrics.csv") as handle:
        steps = [int(row["step"]) for row in csv.DictReader(handle) if row["name"] == "train/loss"]
    assert steps == [3]


def test_training_writes_a_curve_of_the_loss_and_the_selection_metric(toy_yaml):
    run_dir = trainer.train(load_config(toy_yaml(run={"epochs": 2})))
    curves = run_dir / "plots" / "curves.png"
    assert curves.is_file() and curves.stat().st_size > 5000


def test_the_reduced_image_ssl_config_shows_progress(tmp_path):
    data = Path(__import__("os").environ["CONTRASUITE_DATA"])
    if not (data / "cifar10").is_dir():
        pytest.skip("needs CIFAR-10 under $CONTRASUITE_DATA")
    out = subprocess.run([sys.executable, "-m", "contrasuite.pipelines.cli", "train", "image_ssl/reduced_infonce",
                          "run.max_steps=2", f"run.output_root={tmp_path}", "config.data.train_subset=200",
                          "config.data.test_subset=100", "config.batch_size=32", f"config.data.cache_dir={tmp_path / 'c'}"],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "image_ssl/reduced_infonce" in out.stderr and "2/2" in out.stderr  # the tqdm bar of training
    assert "embedding" in out.stderr  # an evaluation stage


def _readme_commands() -> list[list[str]]:
    """The ``contrasuite ...`` lines of the README's "Running a domain pipeline" block, comments removed."""
    import re
    import shlex

    text = (ROOT / "README.md").read_text()
    block = text.split("## Running a domain pipeline", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    return [shlex.split(re.sub(r"\s+#.*$", "", line)) for line in block.splitlines() if line.startswith("contrasuite ")]


@pytest.mark.slow
def test_the_readme_quick_start_finishes_on_a_cpu(tmp_path):
    """The README's first training command, then its eval and export lines on the run it made, exactly as
    written (``<timestamp>`` filled in), from a fresh folder: each must finish, the training within 5 minutes
    of CPU (about 30 s on the CPUs here; the full-scale command it used to show made no step in 10 minutes)."""
    import os
    import time

    if not (Path(os.environ["CONTRASUITE_DATA"]) / "cifar10").is_dir():
        pytest.skip("needs CIFAR-10 under $CONTRASUITE_DATA")
    commands = _readme_commands()
    train = next(c for c in commands if c[1] == "train")
    assert "reduced" in train[2], train  # the first command a user copies is a CPU one
    program = Path(sys.executable).with_name("contrasuite")
    env = dict(os.environ, CONTRASUITE_CACHE=str(tmp_path / "cache"))
    started = time.monotonic()
    out = subprocess.run([str(program), *train[1:]], capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    assert time.monotonic() - started < 300
    (run_dir,) = [p.parent for p in (tmp_path / "runs").rglob("config.yaml")]
    for verb in ("eval", "export"):
        line = next(c for c in commands if c[1] == verb and "<timestamp>" in " ".join(c))
        args = [a.replace("runs/image_ssl/reduced_infonce/<timestamp>", str(run_dir.relative_to(tmp_path))) for a in line]
        done = subprocess.run([str(program), *args[1:]], capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
        assert done.returncode == 0, (verb, done.stderr[-3000:])
    assert (run_dir / "eval_test.json").is_file() and (tmp_path / "exported" / "model.onnx").is_file()
