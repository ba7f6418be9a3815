"""``contrasuite export`` of a trained graph run on ACM: the evaluated embeddings as .npy, the encoder as safetensors."""

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from contrasuite.domains.graph.evaluate import clustering_scores
from contrasuite.pipelines import checkpoint
from contrasuite.pipelines.cli import main
from contrasuite.pipelines.api import load_config, setup_task
from contrasuite.pipelines.trainer import evaluate, train
from tests.domains.exports import assert_export_refused

DATA_ROOT = Path(os.environ["CONTRASUITE_DATA"])
CONFIG = Path(__file__).resolve().parents[3] / "configs" / "graph" / "reduced" / "infonce_acm.yaml"
TINY = ["run.epochs=1", "run.eval_every_epochs=1", "run.progress=false", "run.health_every_steps=0",
        "config.model.dim=16", "config.eval_ratios=[20]", "config.probe.runs=2", "config.val_probe_runs=1",
        "config.probe.iterations=10", "config.probe.cluster_runs=2"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny evaluated run of the shipped reduced InfoNCE config on ACM, and the same task set up apart
    (no weights loaded: each test loads the ones it checks)."""
    if not (DATA_ROOT / "graph" / "acm" / "labels.npy").is_file():
        pytest.skip(f"ACM not found under {DATA_ROOT}/graph (set CONTRASUITE_DATA)")
    loaded = load_config(CONFIG, [*TINY, f"run.output_root={tmp_path_factory.mktemp('graph_export')}"],
                         data_root=str(DATA_ROOT))
    run_dir = train(loaded)
    evaluate(run_dir)
    run = load_config(run_dir / "config.yaml")  # as the safetensors usage sets the task up
    task = setup_task(run.task_class(), run.config, device=torch.device("cpu"), data_root=DATA_ROOT, seed=run.run.seed)
    return run_dir, task


def test_npy_holds_the_embeddings_the_evaluation_used(trained, tmp_path):
    run_dir, task = trained
    out = tmp_path / "npy"
    assert main(["export", str(run_dir), "--format", "npy", "--out", str(out), "--data-root", str(DATA_ROOT)]) == 0
    record = json.loads((out / "export.json").read_text())
    assert record["model_file"] == "embeddings.npy" and set(record["files"]) == {"embeddings.npy", "labels.npy", "config.json"}
    assert "infonce_acm" in (out / "README.md").read_text()
    task.model.load_state_dict(checkpoint.load(run_dir / "checkpoints" / "best.pt")["modules"]["model"])
    want = task.embeddings().numpy()
    got, labels = np.load(out / "embeddings.npy"), np.load(out / "labels.npy")
    assert got.dtype == np.float32 and got.shape == (4019, 16) and np.array_equal(got, want)
    assert labels.dtype == np.int64 and np.array_equal(labels, task.data["paper"].y.numpy())
    config = json.loads((out / "config.json").read_text())
    assert config | {"embedding": ""} == {"dataset": "acm", "target": "paper", "num_nodes": 4019, "num_classes": 3, "dim": 16,
                                         "l2_normalised": False, "metapaths": ["pap", "psp"], "eval_views": "all",
                                         "seed": 0, "embedding": ""}
    tested = json.loads((run_dir / "eval_test.json").read_text())["metrics"]
    clusters = clustering_scores(torch.from_numpy(got), torch.from_numpy(labels), runs=2)
    assert clusters["nmi"] == pytest.approx(tested["nmi"], abs=1e-9) and clusters["ari"] == pytest.approx(tested["ari"], abs=1e-9)


def test_safetensors_round_trips_the_encoder(trained, tmp_path):
    from safetensors.torch import load_file

    run_dir, task = trained
    out = tmp_path / "st"
    assert main(["export", str(run_dir), "--format", "safetensors", "--out", str(out), "--checkpoint", "last"]) == 0
    saved = checkpoint.load(run_dir / "checkpoints" / "last.pt")["modules"]["model"]
    state = load_file(str(out / "model.safetensors"))
    assert state.keys() == saved.keys() and all(torch.equal(state[k], v) for k, v in saved.items())
    config = json.loads((out / "config.json").read_text())
    assert config["architecture"] == "MEOWModel" and config["model"]["dim"] == 16 and config["dataset"] == "acm"
    task.model.load_state_dict(state)  # the usage the model card gives
    assert task.embeddings().shape == (4019, 16)


def test_refusals_say_one_line(trained, tmp_path, capsys):
    run_dir, _ = trained
    assert_export_refused(capsys, run_dir, "onnx", tmp_path / "x", "npy, safetensors")
