"""The training loop on the toy task: run folder, logging, precision, non-finite handling, eval, resume."""

import csv
import json

import pytest
import torch

from contrasuite.pipelines import trainer
from contrasuite.pipelines.checkpoint import CheckpointError, load
from contrasuite.pipelines.cli import main
from contrasuite.pipelines.config import load_config
from contrasuite.pipelines.moved_keys import MOVED
from contrasuite.pipelines.precision import cpu_has_native_bf16
from contrasuite.pipelines.step import NonFiniteStepError


def _metrics(run_dir):
    with open(run_dir / "metrics.csv", newline="") as handle:
        return list(csv.DictReader(handle))


def _params(run_dir, name="last"):
    return load(run_dir / "checkpoints" / f"{name}.pt")["modules"]["model"]


def test_run_folder_contents(toy_yaml):
    run_dir = trainer.train(load_config(toy_yaml(run={"epochs": 2}), ["config.objective.terms.0.temperature=0.2"]))
    assert run_dir.parent.name.startswith("toy-") and run_dir.parent.parent.name == "ToyTask"  # toy + the override's digest
    for name in ("config.yaml", "environment.json", "metrics.csv", "eval_val.json", "status.json",
                 "checkpoints/last.pt", "checkpoints/best.pt"):
        assert (run_dir / name).is_file(), name
    assert "temperature: 0.2" in (run_dir / "config.yaml").read_text()
    env = json.loads((run_dir / "environment.json").read_text())
    assert "torch" in env["packages"] and env["device"] == "cpu"
    assert json.loads((run_dir / "status.json").read_text())["state"] == "finished"
    names = {row["name"] for row in _metrics(run_dir)}
    assert {"train/loss", "lr/model", "grad_norm/model", "health/alignment", "health/uniformity",
            "health/similarity_gap", "health/effective_rank", "val/top1"} <= names
    plots = sorted((run_dir / "plots").glob("similarity_step*.png"))
    assert len(plots) == 2 and plots[0].read_bytes()[:4] == b"\x89PNG"  # one per evaluation
    state = load(run_dir / "checkpoints" / "last.pt")
    assert state["position"] == {"epoch": 2, "step_in_epoch": 0, "global_step": 8}
    assert set(state["rng"]) == {"python", "numpy", "torch", "cuda"} and state["optimizers"]["model"]["state"]
    assert state["schedulers"]["model"]["last_epoch"] == 8  # stepped once per optimisation step
    assert not list(run_dir.rglob(".*.tmp"))


@pytest.mark.parametrize("eval_every", [1, 0])
def test_last_pt_is_written_again_only_when_the_final_validation_changed_it(toy_yaml, monkeypatch, eval_every):
    """Validating every epoch, the last epoch's ``last.pt`` is the run's final state: no second write of it. Validating
    only at the end, the last epoch is saved before that validation (kept whatever it does), then again after it
    (its best value)."""
    saved = []
    real = trainer.checkpoint.atomic_save
    monkeypatch.setattr(trainer.checkpoint, "atomic_save", lambda state, path: (saved.append(path.name), real(state, path)))
    run_dir = trainer.train(load_config(toy_yaml(run={"epochs": 2, "eval_every_epochs": eval_every})))
    assert [name for name in saved if name == "last.pt"] == ["last.pt"] * (2 if eval_every else 3)
    assert saved[-1] == "last.pt" and "best.pt" in saved  # after the final validation's best.pt: it holds the best
    assert load(run_dir / "checkpoints" / "last.pt")["last_eval_step"] == 8


def test_training_reduces_the_loss(toy_yaml):
    run_dir = trainer.train(load_config(toy_yaml(run={"epochs": 6, "health_every_steps": 0}), ["config.augment=0"]))
    losses = [float(r["value"]) for r in _metrics(run_dir) if r["name"] == "train/loss"]
    assert sum(losses[-4:]) < 0.8 * sum(losses[:4])


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_mixed_precision_runs_on_cpu(toy_yaml, precision):
    run_dir = trainer.train(load_config(toy_yaml(run={"precision": precision, "max_steps": 3})))
    state = load(run_dir / "checkpoints" / "last.pt")
    assert state["position"]["global_step"] == 3
    assert (state["scaler"] is not None) == (precision == "fp16")
    assert all(torch.isfinite(v).all() for v in state["modules"]["model"].values())


def test_bf16_on_a_cpu_that_emulates_it_says_so_once(toy_yaml, capsys, monkeypatch):
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")  # oneDNN capped below its bf16 levels: emulated bf16
    assert not cpu_has_native_bf16()
    trainer.train(load_config(toy_yaml(run={"precision": "bf16", "max_steps": 1})))
    assert capsys.readouterr().err.count("run.precision=bf16 on a CPU without AVX512-BF16 or AMX") == 1
    trainer.train(load_config(toy_yaml(run={"precision": "fp32", "max_steps": 1})))
    assert "AVX512-BF16" not in capsys.readouterr().err
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_AMX")
    assert cpu_has_native_bf16() == (torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())


def test_non_finite_loss_stops_naming_step_and_optimizer(toy_yaml, capsys):
    path = toy_yaml(config={"nan_at_step": 2})
    with pytest.raises(NonFiniteStepError, match=r"step 2 \(epoch 0\), optimizer 'model': non-finite loss .* from terms \['objective'\]"):
        trainer.train(load_config(path))
    run_dir = next((path.parent / "runs").rglob("status.json")).parent
    status = json.loads((run_dir / "status.json").read_text())
    assert status["state"] == "failed" and "non-finite" in status["error"]
    assert main(["train", str(path)]) == 1 and "non-finite loss" in capsys.readouterr().err


def test_non_finite_loss_skip_keeps_weights_finite(toy_yaml):
    run_dir = trainer.train(load_config(toy_yaml(run={"non_finite": "skip"}, config={"nan_at_step": 1})))
    assert any(r["name"] == "skipped/model" for r in _metrics(run_dir))
    assert all(torch.isfinite(v).all() for v in _params(run_dir).values())


def test_gradcache_step_matches_plain_step(toy_yaml):
    plain = trainer.train(load_config(toy_yaml("plain", run={"max_steps": 3}), ["config.augment=0"]))
    cached = trainer.train(load_config(toy_yaml("cached", run={"max_steps": 3}), ["config.augment=0", "config.gradcache_chunk=5"]))
    for key, value in _params(plain).items():
        torch.testing.assert_close(_params(cached)[key], value, rtol=1e-5, atol=1e-6)


def test_eval_writes_test_json_from_best(toy_yaml):
    run_dir = trainer.train(load_config(toy_yaml(run={"epochs": 2})))
    assert main(["eval", str(run_dir)]) == 0
    result = json.loads((run_dir / "eval_test.json").read_text())
    assert result["split"] == "test" and result["checkpoint"] == "best" and 0 <= result["metrics"]["top1"] <= 1


def test_corrupt_checkpoint_is_a_clear_error(toy_yaml, capsys):
    run_dir = trainer.train(load_config(toy_yaml(run={"max_steps": 1})))
    (run_dir / "checkpoints" / "best.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="best.pt is incomplete or altered"):
        trainer.evaluate(run_dir)
    (run_dir / "checkpoints" / "best.pt.json").unlink()  # no manifest: torch itself must refuse it
    with pytest.raises(CheckpointError, match="best.pt is not a weights-only checkpoint: it holds something other than tensors and plain values \\(Unsupported operand"):
        trainer.evaluate(run_dir)
    assert main(["eval", str(run_dir / "missing")]) == 2
    assert "config file not found" in capsys.readouterr().err


def test_resume_auto_continues_only_an_unfinished_run_of_the_same_config(toy_yaml, pretend_killed):
    path = toy_yaml(run={"epochs": 3, "checkpoint_every_steps": 2, "max_steps": 6}, config={"sleep": 0.02})
    partial = trainer.train(load_config(path))
    pretend_killed(partial)
    before = load(partial / "checkpoints" / "last.pt")["train_seconds"]
    assert before >= 6 * 0.02
    # another seed or length is another run: never continued in its place, and left unfinished
    for other in (["run.seed=1"], ["run.max_steps=8"]):
        fresh = trainer.train(load_config(path, ["run.resume=auto", *other]))
        assert fresh != partial and json.loads((fresh / "status.json").read_text())["resumed"] is False
        assert json.loads((partial / "status.json").read_text())["state"] == "running"
    resumed = trainer.train(load_config(path, ["run.resume=auto", "run.progress=true"]))  # a result-neutral key may differ
    assert resumed == partial  # continued, not a new folder
    status = json.loads((partial / "status.json").read_text())
    assert status["state"] == "finished" and status["resumed"] is True and status["train_seconds"] >= before
    assert load(partial / "checkpoints" / "last.pt")["position"]["global_step"] == 6
    again = trainer.train(load_config(path, ["run.resume=auto"]))
    assert again not in (partial, resumed)  # nothing unfinished left: a fresh run


def test_resume_auto_passes_over_a_run_whose_config_uses_a_moved_key(toy_yaml, pretend_killed, monkeypatch, capsys):
    """A run folder made before a key moved (its saved config holds the old key) is not continued, and not an error."""
    path = toy_yaml(run={"max_steps": 2})
    partial = trainer.train(load_config(path))
    pretend_killed(partial)
    monkeypatch.setitem(MOVED, "toy_task:ToyTask", {"noise": "config.data.noise"})  # as if noise had moved since
    fresh = trainer.train(load_config(path, ["run.resume=auto"]))
    assert fresh != partial and "config.noise moved: use config.data.noise" in capsys.readouterr().err


def test_in_process_resume_from_mid_epoch_matches(toy_yaml):
    """Stop mid-epoch (checkpoint at step 3 of 4 per epoch), resume, compare with an uninterrupted run."""
    path = toy_yaml(run={"epochs": 2, "checkpoint_every_steps": 3, "deterministic": True},
                    config={"dropout": 0.2})
    full = trainer.train(load_config(path))
    stopped = trainer.train(load_config(path, ["run.max_steps=3"]))
    (stopped / "checkpoints" / "best.pt").unlink()
    last = torch.load(stopped / "checkpoints" / "last.pt", weights_only=True)
    assert last["position"] == {"epoch": 0, "step_in_epoch": 3, "global_step": 3}
    trainer.resume(stopped, ["run.max_steps=null"])  # continue with the uninterrupted run's limits, said aloud
    for key, value in _params(full).items():
        assert torch.equal(_params(stopped)[key], value), key
    steps = [int(r["step"]) for r in _metrics(stopped) if r["name"] == "train/loss"]
    assert steps == sorted(steps) and len(steps) == len(set(steps)) == 8  # no duplicated rows


def test_learnable_temperature_and_tensorboard_are_logged(toy_yaml):
    run_dir = trainer.train(load_config(toy_yaml(run={"max_steps": 2, "tensorboard": True}),
                                        ["config.objective.terms.0={name: clip}"]))
    names = {row["name"] for row in _metrics(run_dir)}
    assert "param/objective.terms.0.logit_scale" in names
    assert list((run_dir / "tensorboard").glob("events.out.tfevents.*"))


def test_what_an_objective_reports_of_its_last_call_is_logged(toy_yaml):
    """ContrastiveObjective.log_values (WEINCE's gate) reaches metrics.csv as ``state/<module path>.<name>``."""
    terms = "[{name: clip}, {name: weince, temperature: 0.5, weight: 0.5}]"
    run_dir = trainer.train(load_config(toy_yaml(run={"max_steps": 2}), [f"config.objective.terms={terms}"]))
    rows = {row["name"]: float(row["value"]) for row in _metrics(run_dir)}
    assert 0.0 <= rows["state/objective.terms.1.lambda_mean"] <= 1.0


def test_cli_train_data_root_flag(toy_yaml, capsys):
    assert main(["train", str(toy_yaml(run={"max_steps": 1})), "--data-root", "/flag/root"]) == 0
    run_dir = capsys.readouterr().out.strip().split("run folder: ")[-1]
    assert "data_root: /flag/root" in (__import__("pathlib").Path(run_dir) / "config.yaml").read_text()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_cuda_precisions(toy_yaml, precision):
    run_dir = trainer.train(load_config(toy_yaml(run={"device": "auto", "precision": precision, "max_steps": 4})))
    assert json.loads((run_dir / "environment.json").read_text())["device"].startswith("cuda")
    assert all(torch.isfinite(v).all() for v in _params(run_dir).values())


def test_missing_data_file_is_a_clear_error(toy_yaml, tmp_path, capsys):
    path = toy_yaml(config={"data_file": "toy.bin"})
    assert main(["train", str(path), "--data-root", str(tmp_path / "data")]) == 2
    assert f"toy data file not found: {tmp_path / 'data' / 'toy.bin'}" in capsys.readouterr().err
    (run_dir,) = [p.parent for p in (tmp_path / "runs").rglob("config.yaml")]
    status = json.loads((run_dir / "status.json").read_text())
    assert status["state"] == "failed" and "toy.bin" in status["error"]
    assert not (run_dir / "checkpoints").exists()


def test_early_stop_after_patience_validations_without_gain_and_resume_with_more(toy_yaml, capsys):
    # lr 0: the weights never move, so only the first validation improves on the (empty) best
    loaded = load_config(toy_yaml(run={"epochs": 10, "early_stop_patience": 2, "health_every_steps": 0}),
                         ["config.lr=0.0"])
    run_dir = trainer.train(loaded)
    status = json.loads((run_dir / "status.json").read_text())
    assert status["state"] == "finished" and status["epoch"] == 3  # validations at epochs 1 (best), 2, 3
    assert "2 validations without a better top1" in status["stopped_early"]  # the first key validation returns
    assert "early stop after epoch 3" in capsys.readouterr().err
    assert load(run_dir / "checkpoints" / "last.pt")["evals_since_best"] == 2
    assert load(run_dir / "checkpoints" / "best.pt")["position"]["epoch"] == 1
    trainer.resume(run_dir, ["run.early_stop_patience=4"])  # a larger patience trains on from where it stopped
    status = json.loads((run_dir / "status.json").read_text())
    assert status["epoch"] == 5 and "4 validations" in status["stopped_early"]


def test_early_stop_off_by_default_and_needs_validations(toy_yaml):
    improving = trainer.train(load_config(toy_yaml(run={"epochs": 3, "health_every_steps": 0})))
    assert "stopped_early" not in json.loads((improving / "status.json").read_text())
    with pytest.raises(trainer.ConfigError, match="run.early_stop_patience=3 needs validations.*run.eval_every_epochs"):
        load_config(toy_yaml(run={"early_stop_patience": 3, "eval_every_epochs": 0}))


def test_early_stop_patience_is_in_the_config_digest_only_when_set(toy_yaml):
    from contrasuite.pipelines.cli_runs import config_digest

    path = toy_yaml()
    plain = config_digest(path, [])
    assert config_digest(path, ["run.early_stop_patience=0"]) == plain  # records made before the key stay current
    assert config_digest(path, ["run.early_stop_patience=5"]) != plain
