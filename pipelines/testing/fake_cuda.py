"""A CUDA device without a GPU: tensors that report ``cuda:0``, compute on the CPU, and refuse to meet CPU tensors.

Inside ``with fake_cuda():`` the device ``cuda`` exists. ``x.to("cuda")``, ``module.to("cuda")``,
``torch.zeros(..., device=x.device)``, ``torch.load(..., map_location="cuda")`` and every op on such a
tensor give a :class:`FakeCudaTensor`: a wrapper that says ``device == cuda:0`` and holds the real values
as a CPU tensor, so ``.item()``, ``float(loss)`` and control flow on values work as on a GPU. A factory
without ``device=`` still makes a CPU tensor, and an op that mixes a fake CUDA tensor with a CPU tensor
that is not 0-dim raises :class:`DeviceMismatch` naming the op and the CPU argument, as CUDA would (0-dim
CPU tensors pass as scalars, CPU index tensors in indexing, and ``copy_`` copies across devices, as on
CUDA). Autograd runs above the wrappers, so the backward pass and the optimizer's update are checked
the same way; gradients of fake CUDA parameters are fake CUDA tensors. The ``torch.cuda`` calls of the
engine are answered as by one GPU (:data:`CUDA_API`) and ``torch.Generator(device="cuda")`` is a CPU
generator that reports ``cuda:0``.

Use it to check your own task or training loop for device bugs on a machine without a GPU::

    from contrasuite.pipelines.testing.fake_cuda import fake_cuda

    with fake_cuda():
        model = MyModel().to("cuda")
        loss = model(batch.to("cuda")).mean()
        loss.backward()                      # raises DeviceMismatch on a CPU tensor met on the way

What it cannot show: CUDA kernels and their numerics, cuDNN, autocast on CUDA (``torch.autocast("cuda")``
is entered but changes no dtype: on the C++ side the wrappers are ``meta`` tensors, which CUDA's autocast
does not see), CUDA RNG streams (random ops draw from the CPU generator), pinned memory (off without an
accelerator), NCCL, memory and speed. Sparse tensors cannot be fake CUDA tensors. Dispatch modes are
thread-local: factories called from other threads make CPU tensors unchecked. Without a GPU, entering
it once makes the process's CUDA device guard a no-op (as ``FakeTensorMode`` does).
"""

from __future__ import annotations

import copy
import importlib
from contextlib import ExitStack, contextmanager
from types import SimpleNamespace
from typing import Any, Callable, Iterator
from unittest import mock

import torch
import torch.utils._pytree as pytree
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode, return_and_correct_aliasing

CUDA = torch.device("cuda", 0)
HOST = torch.device("cpu")
aten = torch.ops.aten
CROSS_DEVICE = {aten.copy_.default, aten._to_copy.default}
"""Ops that take a CPU tensor of any shape beside a CUDA one."""
CPU_INDICES = {aten.index.Tensor, aten.index_put.default, aten.index_put_.default, aten._index_put_impl_.default}
"""Indexing ops whose ``indices`` may live on the CPU (CUDA moves them)."""


class DeviceMismatch(RuntimeError):
    """An op met a fake CUDA tensor and a CPU tensor that CUDA would refuse."""


class FakeCudaTensor(Tensor):
    """Reports ``cuda:0``; holds its values in ``inner``, a CPU tensor. Autograd sees a ``meta`` tensor.

    The C++ side is ``meta`` so that autograd's engine never asks a CUDA driver for streams.
    """

    inner: Tensor

    @staticmethod
    def __new__(cls, inner: Tensor) -> FakeCudaTensor:
        if inner.layout != torch.strided:
            raise NotImplementedError(f"fake CUDA tensors are strided: a {inner.layout} tensor cannot be one "
                                      "(PyTorch's wrapper subclasses cannot be sparse)")
        out = Tensor._make_wrapper_subclass(
            cls, inner.shape, strides=inner.stride(), storage_offset=inner.storage_offset(), dtype=inner.dtype,
            device="meta", requires_grad=inner.requires_grad)
        out.inner = inner
        return out

    device = property(lambda self: CUDA)
    is_cuda = property(lambda self: True)
    is_meta = property(lambda self: False)

    def get_device(self) -> int:
        return CUDA.index

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        return _run(func, args, kwargs or {})

    def __tensor_flatten__(self) -> tuple[list[str], None]:
        return ["inner"], None

    @staticmethod
    def __tensor_unflatten__(inner: dict[str, Tensor], meta: None, size: Any, stride: Any) -> FakeCudaTensor:
        return FakeCudaTensor(inner["inner"])

    def __deepcopy__(self, memo: dict) -> FakeCudaTensor:
        out = FakeCudaTensor(copy.deepcopy(self.inner.detach(), memo)).requires_grad_(self.requires_grad)
        out.__dict__.update(copy.deepcopy({k: v for k, v in self.__dict__.items() if k != "inner"}, memo))
        if self.grad is not None:
            out.grad = copy.deepcopy(self.grad, memo)
        memo[id(self)] = out
        return out

    def __reduce_ex__(self, protocol: Any) -> Any:
        """Pickled (``torch.save``) as its CPU values."""
        return self.inner.detach().__reduce_ex__(protocol)

    def __getitem__(self, index: Any) -> Tensor:
        return super().__getitem__(_index_tensors(index))

    def __setitem__(self, index: Any, value: Any) -> None:
        value = torch.tensor(value, dtype=self.dtype, device=CUDA) if isinstance(value, (list, tuple)) else value
        super().__setitem__(_index_tensors(index), value)

    def new_tensor(self, data: Any, dtype: torch.dtype | None = None, device: Any = None,
                   requires_grad: bool = False) -> Tensor:
        return torch.tensor(data, dtype=dtype or self.dtype, device=device or CUDA, requires_grad=requires_grad)

    def tolist(self) -> Any:
        return self.inner.tolist()

    def numpy(self, *, force: bool = False) -> Any:
        if not force:
            raise TypeError("can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the tensor "
                            "to host memory first.")
        return self.inner.numpy(force=True)

    def __format__(self, spec: str) -> str:
        return self.inner.__format__(spec)

    def __repr__(self) -> str:
        return f"FakeCudaTensor({self.inner!r})"


def _index_tensors(index: Any) -> Any:
    """Python lists in an index as CPU tensors: C++ would build them with the wrapper's ``meta`` options, dropping the values."""
    if isinstance(index, list) and not any(isinstance(i, (list, tuple, slice, Tensor)) or i is None or i is Ellipsis
                                           for i in index):
        return torch.tensor(index)
    if isinstance(index, (list, tuple)):
        return tuple(_index_tensors(i) for i in index)
    return index


def _unwrap(tree: Any) -> Any:
    return pytree.tree_map_only(FakeCudaTensor, lambda t: t.inner, tree)


def _is_cuda(device: Any) -> bool:
    """``cuda`` asked for by name, or ``meta``: what C++ code reads off a fake CUDA tensor."""
    return device is not None and torch.device(device).type in ("cuda", "meta")


def _check(func: Any, args: tuple, kwargs: dict) -> None:
    """Raise when a fake CUDA tensor meets a CPU tensor CUDA would refuse."""
    scanned = (args[0], *args[2:]) if func in CPU_INDICES else args
    plain = [t for t in pytree.arg_tree_leaves(*args, **kwargs) if isinstance(t, Tensor) and not isinstance(t, FakeCudaTensor)]
    if any(t.is_meta for t in plain):
        raise NotImplementedError(f"{func}: a meta tensor beside a fake CUDA tensor: C++ made it from Python data with "
                                  "the wrapper's options, so its values are lost (pipelines/testing/fake_cuda.py)")
    cpu = [t for t in pytree.arg_tree_leaves(*scanned, **kwargs)
           if isinstance(t, Tensor) and not isinstance(t, FakeCudaTensor) and t.dim() > 0]
    if cpu:
        raise DeviceMismatch(
            f"{func}: expected all tensors on cuda:0, found a cpu tensor of shape {list(cpu[0].shape)} "
            f"({cpu[0].dtype}) among its arguments")


def _run(func: Any, args: tuple, kwargs: dict) -> Any:
    """Run ``func`` on the CPU values; wrap its tensor outputs when it ran "on CUDA"."""
    fakes = [t for t in pytree.arg_tree_leaves(*args, **kwargs) if isinstance(t, FakeCudaTensor)]
    device = kwargs.get("device")
    on_cuda = _is_cuda(device) or (device is None and bool(fakes))
    if fakes and func not in CROSS_DEVICE:
        _check(func, args, kwargs)
    inner_kwargs = _unwrap(kwargs) | ({"device": HOST} if _is_cuda(device) else {})
    out = func(*_unwrap(args), **inner_kwargs)
    if on_cuda:
        out = pytree.tree_map_only(Tensor, FakeCudaTensor, out)
    return return_and_correct_aliasing(func, args, kwargs, out) if fakes else out


class _FakeCudaMode(TorchDispatchMode):
    """Factories and copies asked for ``cuda`` make fake CUDA tensors; everything else as :func:`_run`."""

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        return _run(func, args, kwargs or {})


_TorchGenerator = torch.Generator


class _AnyGenerator(type(torch.Generator)):
    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, _TorchGenerator)


class _Generator(_TorchGenerator, metaclass=_AnyGenerator):
    """``torch.Generator`` inside :func:`fake_cuda`: ``device="cuda"`` gives a CPU generator that reports ``cuda:0``."""

    def __new__(cls, device: Any = "cpu") -> _Generator:
        fake = torch.device(device).type == "cuda"
        gen = super().__new__(cls, HOST if fake else device)
        gen.fake = fake
        return gen

    device = property(lambda self: CUDA if self.fake else _TorchGenerator.device.__get__(self))


_torch_load = torch.load


def _load(f: Any, map_location: Any = None, **kwargs: Any) -> Any:
    """``torch.load`` inside :func:`fake_cuda`: ``map_location="cuda"`` gives fake CUDA tensors."""
    if isinstance(map_location, (str, torch.device)) and torch.device(map_location).type == "cuda":
        return pytree.tree_map_only(Tensor, lambda t: t.to(CUDA), _torch_load(f, map_location=HOST, **kwargs))
    return _torch_load(f, map_location=map_location, **kwargs)


PROPERTIES = SimpleNamespace(name="fake CUDA (CPU)", major=8, minor=0, total_memory=80 * 2**30, multi_processor_count=108)
"""What ``torch.cuda.get_device_properties`` answers: an Ampere-class GPU (libraries such as transformers ask for
the compute capability before choosing a kernel; without an answer they raise ``NameError`` inside torch)."""

CUDA_API: dict[str, Callable[..., Any]] = {
    "_lazy_init": lambda: None,
    "is_available": lambda: True,
    "device_count": lambda: 1,
    "current_device": lambda: 0,
    "set_device": lambda device: None,
    "is_bf16_supported": lambda *a, **k: True,
    "get_device_name": lambda device=None: PROPERTIES.name,
    "get_device_properties": lambda device=None: PROPERTIES,
    "get_device_capability": lambda device=None: (PROPERTIES.major, PROPERTIES.minor),
    "synchronize": lambda device=None: None,
    "memory_allocated": lambda device=None: 0,
    "max_memory_allocated": lambda device=None: 0,
    "reset_peak_memory_stats": lambda device=None: None,
    "get_rng_state": lambda device="cuda": torch.get_rng_state(),
    "set_rng_state": lambda state, device="cuda": None,
    "get_rng_state_all": lambda: [torch.get_rng_state()],
    "set_rng_state_all": lambda states: None,
}
"""The ``torch.cuda`` calls the engine makes (device choice, RNG state, memory meter) answered as by one GPU.

The RNG state is the CPU's, since random ops on fake CUDA tensors draw from the CPU generator."""


@contextmanager
def fake_cuda() -> Iterator[None]:
    """Make ``cuda`` a device of fake CUDA tensors for the calling thread (module docstring)."""
    torch._C._ensureCUDADeviceGuardSet()  # without a GPU: a no-op CUDA device guard, as FakeTensorMode uses
    only_lift_cpu = torch._C._only_lift_cpu_tensors()
    torch._C._set_only_lift_cpu_tensors(True)  # torch.tensor(data, device="cuda") copies through the mode
    try:
        with ExitStack() as stack:
            for name, fn in CUDA_API.items():
                stack.enter_context(mock.patch.object(torch.cuda, name, fn))
            stack.enter_context(mock.patch.object(torch, "Generator", _Generator))
            stack.enter_context(mock.patch.object(torch, "load", _load))
            optim = importlib.import_module("torch.optim.optimizer")  # its foreach path, as on CUDA
            stack.enter_context(mock.patch.object(optim, "_foreach_supported_types",
                                                  [*optim._foreach_supported_types, FakeCudaTensor]))
            stack.enter_context(_FakeCudaMode())
            yield
    finally:
        torch._C._set_only_lift_cpu_tensors(only_lift_cpu)
