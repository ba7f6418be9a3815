"""The fake CUDA device (pipelines/testing/fake_cuda.py): it catches device bugs without a GPU, and every
task's step passes it.

The tool's tests show it raises on a CPU tensor met in the forward pass, in the backward pass and from a
per-step factory without ``device=``, and raises nothing where CUDA raises nothing (0-dim CPU scalars,
CPU indices, copies). The task test runs each registered task's shipped config the way ``contrasuite
smoke`` does (its ``SmokeSettings``: real model, a subset of the real data, two steps and the tiny
evaluation) with ``run.device=cuda`` on the fake device (docs/engine.md, "CUDA without a GPU").
"""

import importlib
from pathlib import Path

import pytest
import torch
from torch import nn

from contrasuite.pipelines import smoke
from contrasuite.pipelines.config import find_config
from contrasuite.pipelines.testing.fake_cuda import DeviceMismatch, FakeCudaTensor, fake_cuda
from contrasuite.pipelines.registry import TASKS

CONFIGS = {
    "image_ssl": "image_ssl/infonce",
    "super_resolution": "super_resolution/edsr_baseline_x2_pcl",
    "graph": "graph/meow_acm",
    "image_text": "image_text/full_text_image_negatives",
    "code_search": "code_search/infonce",
    "metric_learning": "metric_learning/emoji_full",
    "translation": "translation/cut_emoji",
}
"""One shipped full-scale config per registered task."""
NOT_RUNNABLE = {
    "graph": "its propagation matrices are sparse CSR tensors, and PyTorch's wrapper subclasses (the fake device's "
             "tensors) cannot be sparse; the graph task is covered by the static scan and its CPU runs only",
}


def _step(model: nn.Module, x: torch.Tensor, optimizer: torch.optim.Optimizer) -> float:
    loss = model(x).square().mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    return float(loss.detach())


class CpuBias(nn.Module):
    """Wrong: a CPU tensor made at construction and never registered, so ``.to("cuda")`` leaves it behind."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 3)
        self.bias = torch.zeros(3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x) + self.bias


class CpuGradient(torch.autograd.Function):
    """Wrong in backward only: the gradient is scaled by a CPU tensor."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        return 2 * x

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        return grad * torch.full(grad.shape, 2.0)


class CpuNoise(nn.Module):
    """Wrong per step: noise from a factory without ``device=`` (the bug the static scan looks for)."""

    def __init__(self, device_of_noise: bool) -> None:
        super().__init__()
        self.linear, self.device_of_noise = nn.Linear(4, 3), device_of_noise

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear(x)
        return y + torch.randn(y.shape, device=y.device if self.device_of_noise else None)


def test_a_model_on_the_fake_device_trains_and_stays_there():
    torch.manual_seed(0)
    with fake_cuda():
        model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3)).to("cuda")
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
        x = torch.randn(6, 4).to("cuda")
        losses = [_step(model, x, optimizer) for _ in range(3)]
        assert torch.cuda.is_available() and x.device == torch.device("cuda", 0) and x.is_cuda
        assert all(isinstance(p, FakeCudaTensor) and isinstance(p, nn.Parameter) for p in model.parameters())
        assert all(isinstance(t, FakeCudaTensor) for s in optimizer.state.values() for t in s.values() if t.dim())
        assert isinstance(model[1].running_mean, FakeCudaTensor)
        assert type(x.cpu()) is torch.Tensor and x.cpu().device.type == "cpu"
        assert torch.tensor([1, 2], device="cuda").device.type == torch.zeros(2, device=x.device).device.type == "cuda"
        assert torch.zeros(2).device.type == "cpu"
        assert torch.Generator(device=x.device).device.type == "cuda"
    assert losses[2] < losses[0]
    assert not torch.cuda.is_available() and torch.Generator is torch._C.Generator


def test_the_fake_device_computes_what_the_cpu_computes():
    def train(device: str) -> tuple[list[float], torch.Tensor]:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(64, 2)).to(device)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        x = torch.randn(5, 3, 6, 6).to(device)
        return [_step(model, x, optimizer) for _ in range(3)], model[0].weight.detach().cpu()

    cpu_losses, cpu_weight = train("cpu")
    with fake_cuda():
        fake_losses, fake_weight = train("cuda")
    assert fake_losses == cpu_losses and torch.equal(fake_weight, cpu_weight)


def test_fp16_loss_scaling_runs_on_the_fake_device():
    """``run.precision=fp16`` on CUDA: the engine's GradScaler("cuda") is enabled, as on a GPU."""
    torch.manual_seed(0)
    with fake_cuda():
        model = nn.Linear(4, 2).to("cuda")
        optimizer, scaler = torch.optim.Adam(model.parameters()), torch.amp.GradScaler("cuda")
        for _ in range(2):
            scaler.scale(model(torch.randn(3, 4, device="cuda")).square().mean()).backward()
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
        assert scaler.is_enabled() and scaler.get_scale() == 65536.0 and isinstance(model.weight, FakeCudaTensor)


def test_what_cuda_accepts_passes():
    """0-dim CPU tensors as scalars, CPU index tensors, copies in both directions, ``.item()`` and ``tolist``."""
    with fake_cuda():
        x = torch.arange(12.0).reshape(3, 4).to("cuda")
        y = x * torch.tensor(2.0) + torch.tensor(1.0)
        picked = y[torch.tensor([0, 2])]
        assert y[[2, 0], 1].tolist() == [19.0, 3.0]  # a list index keeps its values
        y[torch.tensor([1])] = 0.0
        cpu = torch.empty(3, 4).copy_(y)
        y.copy_(cpu)
        assert isinstance(picked, FakeCudaTensor) and picked.shape == (2, 4)
        assert float(y.sum()) == pytest.approx(float(cpu.sum())) and y[0].tolist() == [1.0, 3.0, 5.0, 7.0]


def test_libraries_asking_for_the_device_properties_get_an_answer():
    """transformers asks for the compute capability when a model moves to CUDA; torch's own function raises without a GPU."""
    with fake_cuda():
        assert torch.cuda.get_device_capability() == (8, 0)
        assert torch.cuda.get_device_properties(torch.cuda.current_device()).major == 8
        assert torch.cuda.get_device_name() == "fake CUDA (CPU)"


def test_a_cpu_tensor_met_in_the_forward_pass_raises():
    with fake_cuda():
        model = CpuBias().to("cuda")
        with pytest.raises(DeviceMismatch, match=r"aten\.add\.Tensor: expected all tensors on cuda:0, found a cpu tensor "
                                                 r"of shape \[3\]"):
            model(torch.randn(2, 4, device="cuda"))


def test_a_cpu_tensor_met_in_the_backward_pass_raises():
    with fake_cuda():
        model = nn.Linear(4, 3).to("cuda")
        loss = CpuGradient.apply(model(torch.randn(2, 4, device="cuda"))).sum()  # the forward is right
        with pytest.raises(DeviceMismatch, match=r"aten\.mul\.Tensor: .* cpu tensor of shape \[2, 3\]"):
            loss.backward()


def test_a_per_step_factory_without_device_raises():
    with fake_cuda():
        x = torch.randn(2, 4, device="cuda")
        with pytest.raises(DeviceMismatch, match=r"cpu tensor of shape \[2, 3\]"):
            CpuNoise(device_of_noise=False).to("cuda")(x)
        assert isinstance(CpuNoise(device_of_noise=True).to("cuda")(x), FakeCudaTensor)


def test_every_registered_task_has_a_config_here():
    assert set(CONFIGS) == set(TASKS)


class RecordingTrainer(smoke.Trainer):
    """The smoke run's trainer, kept so the test can look at the task's weights after the steps."""

    last: "RecordingTrainer | None" = None

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        RecordingTrainer.last = self


def _mined_stdlib(root: Path) -> Path:
    """Code search's data for the shipped config (``runs/code_search/mined`` under a data root): four stdlib
    packages mined into train, val and test, since the real mined dataset is not under the data root."""
    from contrasuite.domains.code_search.mine import MineConfig, mine

    packages = [Path(importlib.import_module(name).__file__).parent for name in ("email", "json", "http", "logging")]
    mine(packages, root / "runs" / "code_search" / "mined", MineConfig(split_fractions=(0.5, 0.25, 0.25)), log=lambda m: None)
    return root


@pytest.mark.slow
@pytest.mark.parametrize("task", sorted(CONFIGS))
def test_the_task_trains_and_evaluates_on_the_fake_device(task, tmp_path, monkeypatch):
    """Two steps and the evaluation with ``run.device=cuda``: no op mixes devices, the weights stay on "cuda"."""
    if task in NOT_RUNNABLE:
        pytest.skip(NOT_RUNNABLE[task])
    data_root = str(_mined_stdlib(tmp_path / "data")) if task == "code_search" else None
    monkeypatch.setattr(smoke, "Trainer", RecordingTrainer)
    torch.manual_seed(0)
    with fake_cuda():
        result = smoke.measure(find_config(CONFIGS[task]).resolve(), tmp_path, data_root=data_root, device="cuda")
    if result.state == "skip":
        pytest.skip(result.note)
    assert result.state == "ok", result.note
    assert result.steps == 2 and result.device == "cuda:0"
    task_obj = RecordingTrainer.last.task
    params = [p for m in task_obj.modules().values() for p in m.parameters()]
    assert params and all(isinstance(p, FakeCudaTensor) for p in params)
    state = [t for o in task_obj.optimizers().values() for s in o.state.values() for t in s.values()
             if isinstance(t, torch.Tensor) and t.dim()]
    assert state and all(isinstance(t, FakeCudaTensor) for t in state)
