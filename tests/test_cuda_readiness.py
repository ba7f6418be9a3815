"""CUDA readiness without a GPU: no tensor on the wrong device, no wrong dtype, in the code that runs per step.

What this proves and what it cannot (docs/engine.md, "CUDA without a GPU"):

* static: ``core/`` and ``domains/`` never call ``.cuda()``, touch ``torch.cuda`` only where listed
  below (with the reason), and create no tensor without ``device=`` inside the functions that run
  every step (``forward``, ``train_step``, losses) or in the functions of their module they call;
* dynamic: every registered objective runs forward and backward on the ``meta`` device, which keeps
  CUDA's rule that tensors of two devices never meet in one op (a CPU factory inside a loss fails
  there as it would on a GPU); objectives with host-synchronising fast paths (``.item()``, ``bool()``
  on a tensor) cannot run on ``meta`` and are listed;
* dtypes: under bf16 autocast (the default precision; CPU here, the same rules on CUDA) every
  objective returns a float32 loss and float32 gradients for float32 inputs;
* tasks: ``tests/pipelines/test_fake_cuda.py`` runs every task's setup, steps and evaluation on a fake
  CUDA device that raises on any op mixing CUDA and CPU tensors, forward and backward.
"""

import ast
from pathlib import Path

import pytest
import torch

from contrasuite.core.objectives import OBJECTIVES

ROOT = Path(__file__).resolve().parents[1]
FACTORIES = {"zeros", "ones", "empty", "full", "arange", "rand", "randn", "randint", "randperm", "eye", "tensor",
             "linspace", "as_tensor"}
PER_STEP = ("forward", "train_step", "loss", "parts", "__call__", "_terms", "_paired")
CUDA_ALLOWED = {
    ("core/gradcache.py", "get_rng_state_all"): "GradCache replays each chunk's CUDA RNG so dropout matches",
    ("core/gradcache.py", "set_rng_state_all"): "the same replay",
    ("core/gradcache.py", "is_initialized"): "no CUDA RNG state to save before CUDA is initialised",
    ("domains/image_text/image_negatives.py", "is_available"): "the diffusers inpainting pipeline's device=auto",
}
FACTORY_ALLOWED = {
    ("domains/translation/task.py", "train_step", "rand"): "a CPU coin flip from the step's CPU generator (flip equivariance)",
}
HOST_SYNC = {"dhel", "kcl", "weince", "weince_repro", "hyperbolic_pairwise_ce"}
"""Objectives whose fast paths read a tensor on the host (checked branches): not runnable on ``meta``."""


def _sources():
    for folder in ("core", "domains"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            yield str(path.relative_to(ROOT)), ast.parse(path.read_text())


def _torch_cuda_attr(node: ast.AST) -> str | None:
    """``torch.cuda.X`` -> ``X``."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) and node.value.attr == "cuda" \
            and isinstance(node.value.value, ast.Name) and node.value.value.id == "torch":
        return node.attr
    return None


def test_no_cuda_calls_outside_the_listed_places():
    found = []
    for rel, tree in _sources():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "cuda":
                found.append(f"{rel}:{node.lineno} .cuda()")
            attr = _torch_cuda_attr(node)
            if attr and (rel, attr) not in CUDA_ALLOWED and not rel.endswith("/bench.py"):  # benches time the device
                found.append(f"{rel}:{node.lineno} torch.cuda.{attr}")
    assert not found, "device placement belongs to the engine (ctx.device): " + ", ".join(found)


def _reachable_per_step(tree: ast.Module) -> list[ast.FunctionDef]:
    """The module's per-step functions and every function of the same module they call, transitively."""
    funcs = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    seen: set[str] = set()
    todo = [name for name in funcs if name.startswith(PER_STEP)]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for node in ast.walk(funcs[name]):
            if isinstance(node, ast.Call):
                fn = node.func
                callee = (fn.attr if isinstance(fn, ast.Attribute) and isinstance(fn.value, ast.Name) and fn.value.id == "self"
                          else fn.id if isinstance(fn, ast.Name) else None)
                if callee in funcs:
                    todo.append(callee)
    return [funcs[name] for name in sorted(seen)]


def test_per_step_code_creates_tensors_on_a_given_device():
    """Factories without ``device=`` in per-step functions and in what they call within their module."""
    found = []
    for rel, tree in _sources():
        for fn in _reachable_per_step(tree):
            for node in ast.walk(fn):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in FACTORIES
                        and isinstance(node.func.value, ast.Name) and node.func.value.id == "torch"
                        and not any(k.arg == "device" for k in node.keywords)
                        and (rel, fn.name, node.func.attr) not in FACTORY_ALLOWED):
                    found.append(f"{rel}:{node.lineno} {fn.name}: torch.{node.func.attr}(...) without device=")
    assert not found, "; ".join(found)


def _inputs(device: str, requires_grad: bool = True):
    torch.manual_seed(0)
    return [torch.randn(8, 16, device=device, requires_grad=requires_grad) for _ in range(2)]


@pytest.mark.parametrize("name", sorted(set(OBJECTIVES) - HOST_SYNC))
def test_objective_forward_and_backward_stay_on_the_inputs_device(name):
    objective = OBJECTIVES[name]().to("meta")
    a, b = _inputs("meta")
    loss = objective(a, b)
    loss.backward()
    assert loss.device.type == a.grad.device.type == b.grad.device.type == "meta"


def test_host_sync_objectives_are_listed_because_they_read_values():
    for name in sorted(HOST_SYNC):
        with pytest.raises(RuntimeError, match="cannot be called on meta tensors|meta"):
            OBJECTIVES[name]().to("meta")(*_inputs("meta"))


@pytest.mark.parametrize("name", sorted(OBJECTIVES))
def test_objectives_give_float32_losses_and_gradients_under_bf16_autocast(name):
    objective = OBJECTIVES[name]()
    a, b = _inputs("cpu")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = objective(a, b)
    loss.backward()
    assert loss.dtype == torch.float32 and a.grad.dtype == b.grad.dtype == torch.float32
    assert torch.isfinite(loss) and torch.isfinite(a.grad).all()
