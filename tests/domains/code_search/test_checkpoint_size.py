"""What code_search's checkpoints hold (issue 42: ``last.pt`` of a MiniLM run is 259 MiB): ``last.pt`` the
encoder and AdamW's two moments of each of its tensors for an exact resume, nothing else of any size;
``best.pt`` the weights alone."""

from pathlib import Path

import torch

from contrasuite.pipelines import trainer
from contrasuite.pipelines.config import load_config

CONFIG = Path(__file__).resolve().parents[3] / "configs" / "code_search" / "reduced_infonce.yaml"


def tensor_bytes(value) -> int:
    """Bytes of every tensor in a nested checkpoint value."""
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, dict):
        return sum(tensor_bytes(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(tensor_bytes(v) for v in value)
    return 0


def test_last_holds_weights_and_adam_moments_best_the_weights_alone(run_overrides, tmp_path):
    run_dir = trainer.train(load_config(CONFIG, run_overrides(tmp_path)))
    last, best = (torch.load(run_dir / "checkpoints" / f, weights_only=True) for f in ("last.pt", "best.pt"))
    weights = tensor_bytes(last["modules"])
    params = tensor_bytes({k: v for k, v in last["modules"]["encoder"].items() if v.is_floating_point()})
    moments = last["optimizers"]["encoder"]["state"]
    assert {key for state in moments.values() for key in state} == {"step", "exp_avg", "exp_avg_sq"}
    assert tensor_bytes(last["optimizers"]) <= 2 * params + 8 * len(moments)  # two moments + a step per tensor
    assert tensor_bytes({k: v for k, v in last.items() if k not in ("modules", "optimizers")}) < 2**20
    assert tensor_bytes(best["modules"]) == weights and tensor_bytes(best) - weights < 2**20  # no optimizer state
