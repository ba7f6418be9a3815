"""Writing a trained network in the formats other libraries load, each file checked by loading it back.

A domain's ``export.py`` declares ``FORMATS`` (``{format: what it holds}``) and ``export(request) ->
Exported``; ``contrasuite export`` (``pipelines/export.py``) finds it, hands it the run's config and
checkpointed weights in an :class:`ExportRequest` and writes the model card from the :class:`Exported`.

The writers here serve every domain. Each one writes a file, loads it again with its real consumer
(onnxruntime, ``torch.jit.load``, ``safetensors``) and compares what that consumer computes with the
PyTorch module on the given inputs; :func:`check_close` refuses a file whose outputs differ by more than
``ATOL + RTOL * max|reference|`` and returns the largest difference, which the model card states.
"""

from __future__ import annotations

import json
import warnings
from importlib import metadata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch
from torch import Tensor, nn

ONNX_OPSET = 20
"""The ONNX opset every export is written in (torch.export-based exporter; onnxruntime >= 1.17 reads it)."""
ATOL, RTOL = 1e-5, 1e-5
"""An exported output may differ from the PyTorch module's by ``ATOL + RTOL * max|reference|`` (fp32)."""

Inputs = Mapping[str, Tensor]
"""Named example inputs, in the order the module's ``forward`` takes them."""


class ExportError(ValueError):
    """A format the run's model cannot be written in, or a written file that does not reproduce the model."""


@dataclass(frozen=True)
class ExportRequest:
    """What a domain's ``export`` receives: the run, its task config, its checkpoint's module weights."""

    run_dir: Path
    config: Any
    """The task's config section as the run resolved it."""
    modules: Mapping[str, Mapping[str, Tensor]]
    """The checkpoint's ``modules``: name -> state dict."""
    format: str
    out: Path
    """The folder to write into (created, empty)."""
    task: Callable[[], Any]
    """The task set up on the CPU with these weights loaded, for exports that need its data (graph)."""


@dataclass
class Exported:
    """What a domain wrote, for the model card: files (relative to the folder), interface, checks."""

    files: list[str]
    """The model file first (what :func:`load_exported` opens), then what goes with it."""
    inputs: str
    """What the exported model takes (names, shapes, dtype, value range)."""
    outputs: str
    usage: str
    """Python that loads the export in its consumer library and runs it."""
    training_data: str = ""
    """A sentence on the data (the card adds the run's ``config.data`` section)."""
    licences: list[str] = field(default_factory=list)
    """The pretrained parts' weights and their licences (empty: trained from scratch)."""
    max_abs_diff: dict[str, float] = field(default_factory=dict)
    """Per checked output: the largest difference from the run's own model on the check inputs."""


def check_close(name: str, got: np.ndarray | Tensor, want: Tensor) -> float:
    """The largest ``|got - want|``; :class:`ExportError` beyond ``ATOL + RTOL * max|want|``."""
    got_t = torch.as_tensor(np.asarray(got) if not isinstance(got, Tensor) else got).float()
    want = want.detach().float()
    if tuple(got_t.shape) != tuple(want.shape):
        raise ExportError(f"{name}: the exported model returns shape {tuple(got_t.shape)}, the run's model {tuple(want.shape)}")
    diff = float((got_t - want).abs().max()) if want.numel() else 0.0
    bound = ATOL + RTOL * (float(want.abs().max()) if want.numel() else 0.0)
    if not diff <= bound:
        raise ExportError(f"{name}: the exported model differs from the run's by {diff:.3g} (allowed {bound:.3g})")
    return diff


def _as_tuple(out: Tensor | Sequence[Tensor]) -> tuple[Tensor, ...]:
    return (out,) if isinstance(out, Tensor) else tuple(out)


def reference(module: nn.Module, inputs: Inputs) -> tuple[Tensor, ...]:
    """The module's outputs on ``inputs`` (eval mode, no gradient)."""
    with torch.no_grad():
        return _as_tuple(module.eval()(*inputs.values()))


def write_onnx(module: nn.Module, inputs: Inputs, outputs: Sequence[str], path: Path,
               dynamic: Mapping[str, Mapping[int, str]], checks: Sequence[Inputs] = (),
               min_sizes: Mapping[str, int] | None = None) -> dict[str, float]:
    """``module`` as ONNX (:data:`ONNX_OPSET`), with the axes in ``dynamic`` (input name -> {axis: name})
    left free; checked in onnxruntime on ``inputs`` and each of ``checks`` (other shapes).

    ``min_sizes`` (axis name -> smallest size) bounds an axis the model cannot take at every size (an image
    network that down-samples needs a few pixels); torch.export refuses a free axis the model constrains.

    Returns ``{output name: max abs difference}`` over every check. Trace with a batch of at least 2: an
    axis of size 1 is fixed by the exporter."""
    import onnxruntime
    from onnx_ir.passes.common import NameFixPass

    smallest = min_sizes or {}
    dims = {label: torch.export.Dim(label, min=smallest.get(label)) for axes in dynamic.values() for label in axes.values()}
    shapes = tuple({axis: dims[label] for axis, label in dynamic.get(name, {}).items()} or None for name in inputs)
    module.eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the exporter's notes on its own internals, not the user's model
        try:
            program = torch.onnx.export(module, tuple(inputs.values()), input_names=list(inputs), output_names=list(outputs),
                                        dynamic_shapes=shapes, dynamo=True, opset_version=ONNX_OPSET, verbose=False)
        except Exception as err:  # noqa: BLE001 - torch.export's failures have no common base class
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise ExportError(f"ONNX: torch.export could not capture the model: {first}") from err
    # The exporter names values after their op, so an output called like one (`embedding`) is defined twice,
    # which onnxruntime refuses (pytorch/pytorch#158094); the pass keeps the outputs' names, renames the rest.
    NameFixPass()(program.model)
    program.save(str(path))
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    worst = {name: 0.0 for name in outputs}
    for feed in (inputs, *checks):
        got = session.run(list(outputs), {k: v.numpy() for k, v in feed.items()})
        for name, g, w in zip(outputs, got, reference(module, feed)):
            worst[name] = max(worst[name], check_close(f"ONNX output {name!r}", g, w))
    return worst


def write_torchscript(module: nn.Module, inputs: Inputs, outputs: Sequence[str], path: Path,
                      checks: Sequence[Inputs] = ()) -> dict[str, float]:
    """``module`` traced to TorchScript, saved, loaded back with ``torch.jit.load`` and checked like
    :func:`write_onnx` (the trace follows ``inputs``' code path; shapes stay free)."""
    module.eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch 2.10+ marks TorchScript deprecated; its users still load it
        with torch.no_grad():
            traced = torch.jit.trace(module, tuple(inputs.values()), check_trace=False)
        traced.save(str(path))
        loaded = torch.jit.load(str(path), map_location="cpu")
    worst = {name: 0.0 for name in outputs}
    for feed in (inputs, *checks):
        with torch.no_grad():
            got = _as_tuple(loaded(*feed.values()))
        for name, g, w in zip(outputs, got, reference(module, feed)):
            worst[name] = max(worst[name], check_close(f"TorchScript output {name!r}", g, w))
    return worst


def write_safetensors(tensors: Mapping[str, Tensor], path: Path, config: Mapping[str, Any]) -> None:
    """``tensors`` as safetensors (contiguous CPU copies) and ``config`` beside it as ``config.json``;
    the file is read back and must hold exactly the tensors."""
    from safetensors.torch import load_file, save_file

    plain = {k: v.detach().cpu().contiguous() for k, v in tensors.items()}
    save_file(plain, str(path), metadata={"format": "pt"})
    back = load_file(str(path))
    if back.keys() != plain.keys() or any(not torch.equal(back[k], plain[k]) for k in plain):
        raise ExportError(f"{path}: safetensors read back other tensors than were written")
    write_config(config, path.parent / "config.json")


NETWORK_FILES = {"onnx": "model.onnx", "torchscript": "model.torchscript.pt", "safetensors": "model.safetensors"}
"""The model file of each format that :func:`write_network` writes."""


def write_network(fmt: str, out: Path, module: nn.Module, weights: Mapping[str, Tensor], config: Mapping[str, Any],
                  inputs: Inputs, outputs: Sequence[str], dynamic: Mapping[str, Mapping[int, str]],
                  checks: Sequence[Inputs] = (), min_sizes: Mapping[str, int] | None = None) -> tuple[str, dict[str, float]]:
    """One network as ``fmt`` in ``out`` (:data:`NETWORK_FILES`) with ``config`` as ``config.json``: ``module`` (the
    interface users call: normalisation inside) as ONNX or TorchScript, or ``weights`` (the bare network's state)
    as safetensors. Returns the model file's name and the checks' differences (:func:`write_onnx`)."""
    file = out / NETWORK_FILES[fmt]
    diffs: dict[str, float] = {}
    if fmt == "onnx":
        diffs = write_onnx(module, inputs, outputs, file, dynamic, checks, min_sizes)
    elif fmt == "torchscript":
        diffs = write_torchscript(module, inputs, outputs, file, checks)
    elif fmt == "safetensors":
        write_safetensors(weights, file, config)
    else:
        raise ExportError(f"--format {fmt}: a network exports as {', '.join(NETWORK_FILES)}")
    if fmt != "safetensors":
        write_config(config, out / "config.json")
    return file.name, diffs


def write_config(config: Mapping[str, Any], path: Path) -> None:
    """A small JSON description of an export (architecture, input normalisation, scoring)."""
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def require_format(fmt: str, formats: Mapping[str, str], what: str) -> None:
    """:class:`ExportError` naming the formats ``what`` can be written in, when ``fmt`` is not one."""
    if fmt not in formats:
        raise ExportError(f"--format {fmt}: {what} exports as {', '.join(formats)}")


class OnnxModule(nn.Module):
    """An ONNX file run by onnxruntime on the CPU behind a module's call: ``forward(*tensors)`` -> its
    first output (one output) or a tuple of them."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        import onnxruntime

        self.session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        self.input_names = [i.name for i in self.session.get_inputs()]

    def forward(self, *inputs: Tensor) -> Tensor | tuple[Tensor, ...]:
        feeds = {name: x.detach().cpu().numpy() for name, x in zip(self.input_names, inputs)}
        device = inputs[0].device if inputs else torch.device("cpu")
        out = tuple(torch.from_numpy(o).to(device) for o in self.session.run(None, feeds))
        return out[0] if len(out) == 1 else out


def export_folder(path: Path) -> Path | None:
    """The export folder ``path`` is, or holds the model file of (it has ``export.json``); None otherwise."""
    folder = path if path.is_dir() else path.parent
    return folder if (folder / "export.json").is_file() else None


def load_exported(path: Path, task: str, build: Callable[[dict[str, Any]], nn.Module]) -> tuple[nn.Module, dict[str, Any]]:
    """An exported model (its folder or model file) as a module in eval mode, and its ``config.json``.

    ONNX runs in onnxruntime (:class:`OnnxModule`), TorchScript through ``torch.jit.load``; safetensors
    weights are loaded into ``build(config)``. :class:`ExportError` when it is another task's export."""
    folder = export_folder(path)
    if folder is None:
        raise ExportError(f"{path} is neither a run folder nor an export folder (no export.json)")
    try:
        record = json.loads((folder / "export.json").read_text())
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError) as err:
        raise ExportError(f"{folder}: unreadable export.json or config.json ({err})") from None
    if record.get("task") != task:
        raise ExportError(f"{folder} is an export of a {record.get('task')!r} run, not of a {task!r} run")
    file = folder / record["model_file"]
    if record["format"] == "onnx":
        return OnnxModule(file), config
    if record["format"] == "torchscript":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch.jit.load(str(file), map_location="cpu").eval(), config
    if record["format"] == "safetensors":
        from safetensors.torch import load_file

        model = build(config)
        model.load_state_dict(load_file(str(file)))
        return model.eval(), config
    raise ExportError(f"{folder}: a {record['format']} export cannot be run here (onnx, torchscript, safetensors can)")


def package_licence(dist: str) -> str:
    """The licence the installed package ``dist`` declares: its METADATA's, else its LICENSE file's first line."""
    meta = metadata.metadata(dist)
    declared = (meta.get("License-Expression") or meta.get("License") or "").strip().splitlines()
    if declared and declared[0] != "UNKNOWN":
        return f"{declared[0]} (its METADATA)"
    files = [f for f in metadata.files(dist) or [] if f.name.upper().startswith(("LICENSE", "LICENCE"))]
    lines = [line.strip() for line in files[0].read_text().splitlines() if line.strip()] if files else []
    return f"{lines[0]} (its LICENSE file; METADATA: UNKNOWN)" if lines else "not declared (see the package's source)"
