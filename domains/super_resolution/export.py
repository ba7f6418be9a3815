"""The trained EDSR generator outside contrasuite: ONNX, TorchScript or safetensors.

Every format maps ``lr [B, 3, h, w]``, RGB in [0, 1], to ``sr [B, 3, s h, s w]`` clamped to [0, 1] (what
``contrasuite upscale`` writes, before 8-bit rounding); batch, height and width are free in all of them.
``config.json`` beside the file holds the scale and the architecture; ``contrasuite upscale`` takes the
export folder (or its model file) in place of a run folder.
"""

from __future__ import annotations

from typing import Any, Mapping

import torch
from torch import Tensor, nn

from contrasuite.domains.exporting import ExportRequest, Exported, write_network
from contrasuite.domains.super_resolution.networks import EDSR

FORMATS = {
    "onnx": "the generator, lr [B, 3, h, w] -> sr [B, 3, s h, s w] in [0, 1], batch/height/width free",
    "torchscript": "the generator, traced (the same interface)",
    "safetensors": "the generator's weights and config.json (rebuild EDSR from it)",
}


class ClampedSR(nn.Module):
    """``clamp(G(lr), 0, 1)``: the generator as ``upscale`` applies it."""

    def __init__(self, generator: nn.Module) -> None:
        super().__init__()
        self.generator = generator

    def forward(self, lr: Tensor) -> Tensor:
        return self.generator(lr).clamp(0, 1)


def build_generator(config: Any, modules: Mapping[str, Mapping[str, Tensor]]) -> EDSR:
    """The run's EDSR with its checkpointed weights (fp32, eval mode, CPU)."""
    m = config.model
    model = EDSR(config.scale, m.n_resblocks, m.n_feats, m.res_scale)
    model.load_state_dict(modules["generator"])
    return model.eval()


def architecture(config: Any) -> dict[str, Any]:
    """``config.json``: what rebuilds the generator and what it expects."""
    m = config.model
    return {"architecture": "EDSR", "scale": config.scale, "n_resblocks": m.n_resblocks, "n_feats": m.n_feats,
            "res_scale": m.res_scale, "input": "RGB float in [0, 1], [B, 3, h, w]", "output": "[B, 3, scale*h, scale*w], clamped to [0, 1]"}


def export(request: ExportRequest) -> Exported:
    cfg, out, fmt = request.config, request.out, request.format
    generator = build_generator(cfg, request.modules)
    net = ClampedSR(generator)
    torch.manual_seed(0)
    example = {"lr": torch.rand(2, 3, 24, 20)}
    checks = [{"lr": torch.rand(1, 3, 17, 31)}]
    file, diffs = write_network(fmt, out, net, generator.state_dict(), architecture(cfg), example, ["sr"],
                                {"lr": {0: "batch", 2: "height", 3: "width"}}, checks)
    usage = {
        "onnx": 'import onnxruntime, numpy as np\nsession = onnxruntime.InferenceSession("model.onnx")\n'
                'sr = session.run(["sr"], {"lr": lr.astype(np.float32)})[0]   # lr: [B, 3, h, w] in [0, 1]',
        "torchscript": 'import torch\nmodel = torch.jit.load("model.torchscript.pt")\nsr = model(lr)   # lr: [B, 3, h, w] in [0, 1]',
        "safetensors": 'import json, safetensors.torch\nfrom contrasuite.domains.super_resolution.networks import EDSR\n'
                       'c = json.load(open("config.json"))\nmodel = EDSR(c["scale"], c["n_resblocks"], c["n_feats"], c["res_scale"]).eval()\n'
                       'model.load_state_dict(safetensors.torch.load_file("model.safetensors"))\nsr = model(lr).clamp(0, 1)',
    }[fmt]
    return Exported(
        files=[file, "config.json"], inputs="`lr`: float32 [B, 3, h, w], RGB in [0, 1] (any batch, height and width)",
        outputs=f"`sr`: float32 [B, 3, {cfg.scale}h, {cfg.scale}w], RGB clamped to [0, 1]", usage=usage,
        training_data=f"x{cfg.scale} super-resolution: LR made from the HR images by MATLAB-style bicubic downscaling.",
        max_abs_diff=diffs,
    )
