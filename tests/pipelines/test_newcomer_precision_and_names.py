"""What a newcomer meets first: ``run.precision=auto`` (bf16 only where it is native) and run folders named
by config, overrides and ``run.name`` (issue 42, points 2 and 7)."""

import json

import pytest
import torch
import yaml

from contrasuite.pipelines import precision, trainer
from contrasuite.pipelines.checkpoint import load
from contrasuite.pipelines.cli import main
from contrasuite.pipelines.config import load_config, read_raw, shipped_configs
from contrasuite.pipelines.testing.fake_cuda import fake_cuda

CHOSE = "run.precision=auto chose"


def _train(toy_yaml, capsys, run, overrides=()):
    """Train the toy task; (run folder, stderr)."""
    capsys.readouterr()
    run_dir = trainer.train(load_config(toy_yaml(run={"max_steps": 2, **run}), list(overrides)))
    return run_dir, capsys.readouterr().err


def _recorded_precision(run_dir):
    """The precision in config.yaml, environment.json and last.pt's config."""
    return {yaml.safe_load((run_dir / "config.yaml").read_text())["run"]["precision"],
            json.loads((run_dir / "environment.json").read_text())["precision"],
            load(run_dir / "checkpoints" / "last.pt")["config"]["run"]["precision"]}


@pytest.mark.parametrize("native", [False, True])
def test_auto_is_bf16_only_on_a_cpu_with_native_bf16_and_says_so_once(toy_yaml, capsys, monkeypatch, native):
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: native)
    run_dir, err = _train(toy_yaml, capsys, {"precision": "auto"})
    chosen = "bf16" if native else "fp32"
    assert err.count(CHOSE) == 1 and f"{CHOSE} {chosen}: this CPU has" in err
    assert _recorded_precision(run_dir) == {chosen}
    assert load(run_dir / "checkpoints" / "last.pt")["scaler"] is None


def test_explicit_precisions_stay_as_given(toy_yaml, capsys, monkeypatch):
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: True)
    run_dir, err = _train(toy_yaml, capsys, {"precision": "fp32"})
    assert CHOSE not in err and _recorded_precision(run_dir) == {"fp32"}
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: False)
    run_dir, err = _train(toy_yaml, capsys, {"precision": "bf16"})
    assert CHOSE not in err and "bf16 is emulated here" in err and _recorded_precision(run_dir) == {"bf16"}


def test_auto_on_cuda_follows_the_device(monkeypatch):
    cuda = torch.device("cuda", 0)
    with fake_cuda():
        assert precision.resolve_precision("auto", cuda) == ("bf16", f"{CHOSE} bf16: fake CUDA (CPU) computes bf16 natively")
        assert precision.resolve_precision("fp16", cuda) == ("fp16", None)
        monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: including_emulation)
        assert precision.resolve_precision("auto", cuda)[0] == "fp32"  # emulated bf16 does not count


def test_no_shipped_reduced_config_asks_for_bf16():
    """The reduced (CPU) configs run in fp32 or auto, so a CPU that emulates bf16 never gets it unasked."""
    reduced = [p for p in shipped_configs() if "reduced" in p.stem or "reduced" in p.parent.name]
    assert len(reduced) > 20 and not [p for p in reduced if read_raw(p).get("run", {}).get("precision") == "bf16"]


def test_config_overrides_name_the_run_and_run_overrides_do_not(toy_yaml):
    path = toy_yaml()
    assert load_config(path).name == "toy"
    assert load_config(path, ["run.seed=3", "run.max_steps=5", "run.progress=true"]).name == "toy"
    changed = load_config(path, ["config.augment=0", "config.objective.terms.0.temperature=0.2"]).name
    assert changed.startswith("toy-") and len(changed) == len("toy-") + 8
    assert load_config(path, ["config.objective.terms.0.temperature=0.2", "config.augment=0"]).name == changed
    assert load_config(path, ["config.augment=0"]).name not in ("toy", changed)
    assert load_config(path, ["config.augment=0", "run.name=mine/aug0"]).name == "mine/aug0"


def test_run_name_names_the_folder_and_a_bad_one_is_one_line(toy_yaml, capsys):
    path = toy_yaml(run={"max_steps": 1})
    assert main(["train", str(path), "run.name=aug0"]) == 0
    run_dir = capsys.readouterr().out.strip().split("run folder: ")[-1]
    assert run_dir.split("/")[-2] == "aug0"
    assert json.loads((path.parent / "runs" / "ToyTask" / "aug0" / run_dir.split("/")[-1] / "environment.json")
                      .read_text())["run_name"] == "aug0"
    for bad in ("../escape", "a b", ".hidden", "x//y"):
        assert main(["train", str(path), f"run.name={bad}"]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "run.name" in err and repr(bad) in err
    assert not (path.parent / "escape").exists()


def test_resume_auto_with_overrides_continues_its_own_run(toy_yaml, pretend_killed):
    path = toy_yaml(run={"epochs": 3, "checkpoint_every_steps": 2, "max_steps": 6})
    overrides = ["config.augment=0", "run.resume=auto"]
    partial = trainer.train(load_config(path, overrides))
    pretend_killed(partial)
    plain = trainer.train(load_config(path, ["run.resume=auto"]))  # the config's own name: not this run
    assert plain.parent != partial.parent and plain != partial
    assert trainer.train(load_config(path, list(reversed(overrides)))) == partial
    assert json.loads((partial / "status.json").read_text())["resumed"] is True
