"""Checks of the domains' ``contrasuite export``: an exported network's output, and a refused export."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor, nn

from contrasuite.pipelines.cli import main


def exported_output(fmt: str, out: Path, x: Tensor, names: tuple[str, str], net: nn.Module) -> Tensor:
    """The exported network in ``out`` run on ``x``: ``model.onnx`` in onnxruntime (input and output ``names``),
    ``model.torchscript.pt`` under ``torch.jit``, or ``model.safetensors`` loaded into ``net`` (eval mode, no grad)."""
    if fmt == "onnx":
        import onnxruntime

        session = onnxruntime.InferenceSession(str(out / "model.onnx"))
        return torch.from_numpy(session.run([names[1]], {names[0]: x.numpy()})[0])
    if fmt == "torchscript":
        return torch.jit.load(str(out / "model.torchscript.pt"))(x)
    from safetensors.torch import load_file

    net.load_state_dict(load_file(str(out / "model.safetensors")))
    with torch.no_grad():
        return net.eval()(x)


def assert_export_refused(capsys, run_dir: Path, fmt: str, out: Path, says: str) -> None:
    """``contrasuite export run_dir --format fmt --out out`` exits 2 with one line on stderr holding ``says``, and
    makes no ``out``."""
    assert main(["export", str(run_dir), "--format", fmt, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and says in err
    assert not out.exists()
