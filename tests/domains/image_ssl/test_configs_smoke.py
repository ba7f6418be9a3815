"""CI smoke: a few engine steps of EVERY shipped image_ssl config on a tiny CIFAR-10 subset."""

import json
import os
from pathlib import Path

import pytest
import torch

from contrasuite.pipelines import trainer
from contrasuite.pipelines.config import load_config
from contrasuite.pipelines.precision import cpu_has_native_bf16
from contrasuite.domains.image_ssl.report import CONFIGS

ROOT = Path(__file__).resolve().parents[3]
CONFIG_DIR = ROOT / "configs" / "image_ssl"
DATA = Path(os.environ["CONTRASUITE_DATA"])
SHIPPED = sorted(CONFIG_DIR.rglob("*.yaml"))
TINY = [
    "run.max_steps=2", "run.epochs=1", "run.log_every_steps=1", "run.health_every_steps=1", "run.progress=false",
    "run.checkpoint_every_steps=0", "config.batch_size=16", "config.data.train_subset=100", "config.data.test_subset=50",
    "config.model.proj_hidden=16", "config.model.proj_dim=8", "config.eval.linear_epochs=1", "config.eval.batch_size=64",
]


def needs_data():
    if not (DATA / "cifar10").is_dir():
        pytest.skip(f"CIFAR-10 not found under {DATA} (set CONTRASUITE_DATA)")


def tiny_overrides(path: Path, tmp_path: Path) -> list[str]:
    """TINY, plus fp32 on a CPU that emulates bf16 (there a bf16 ResNet-18 step is ~8x slower)."""
    raw = path.read_text()
    out = [*TINY, f"run.output_root={tmp_path / 'runs'}", *([] if cpu_has_native_bf16() else ["run.precision=fp32"])]
    if "small_conv" in raw or "reduced" in path.name:
        out.append("config.model.width=4")
    if "mochi" in path.name:
        out.append("config.negatives.warmup_epochs=0")  # mix from the first step
    if "queue" in raw or "mochi" in raw or "feature_transformation" in raw:
        out.append("config.negatives.size=64")
    return out


def test_every_objective_has_full_and_reduced_configs():
    names = {p.stem for p in SHIPPED}
    for name in CONFIGS:
        assert name in names and f"reduced_{name}" in names, name


@pytest.mark.slow
@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.relative_to(CONFIG_DIR)))
def test_config_trains_and_evaluates(path, tmp_path):
    needs_data()
    torch.set_num_threads(1)
    run_dir = trainer.train(load_config(path, tiny_overrides(path, tmp_path), data_root=str(DATA)))
    status = json.loads((run_dir / "status.json").read_text())
    assert status["state"] == "finished" and status["global_step"] == 2
    metrics = (run_dir / "metrics.csv").read_text()
    assert "train/loss" in metrics and "health/" in metrics and "val/knn_acc" in metrics
    result = trainer.evaluate(run_dir, "last")["metrics"]
    assert 0.0 <= result["knn_acc"] <= 100.0 and 0.0 <= result["linear_acc"] <= 100.0
    assert list((run_dir / "plots").glob("similarity_*.png"))
