"""The trained translation generator outside contrasuite: ONNX, TorchScript or safetensors.

ONNX and TorchScript map ``image [B, 3, H, W]``, RGB in [-1, 1] (``uint8 / 127.5 - 1``), to ``translated``
of the same shape in (-1, 1), the generator as ``contrasuite translate`` applies it: the reflection pad to a
multiple of 4 and the crop back (:func:`~contrasuite.domains.translation.networks.translate_any_size`) are
in the graph, so batch, height and width are free (H, W >= 5). The weights are the run's average when it
kept one (``config.ema``). ``config.json`` beside the file holds what rebuilds the generator;
``contrasuite translate`` takes the export folder (or its model file) in place of a run folder.
"""

from __future__ import annotations

from typing import Any, Mapping

import torch
from torch import Tensor, nn

from contrasuite.domains.exporting import ExportRequest, Exported, write_network
from contrasuite.domains.translation.networks import ResnetGenerator, translate_any_size
from contrasuite.domains.translation.task import TranslationConfig, build_generator

FORMATS = {
    "onnx": "the generator, image [B, 3, H, W] -> translated [B, 3, H, W] in [-1, 1], batch/height/width free",
    "torchscript": "the generator, traced (the same interface)",
    "safetensors": "the generator's weights and config.json (rebuild ResnetGenerator from it)",
}
MIN_SIZE = 5
"""The smallest height and width: below it the generator's deepest feature map is a single pixel."""


class AnySizeGenerator(nn.Module):
    """``translate_any_size(G, image)``: the generator on any ``H, W >= 5``, output the input's size."""

    def __init__(self, generator: nn.Module) -> None:
        super().__init__()
        self.generator = generator

    def forward(self, image: Tensor) -> Tensor:
        return translate_any_size(self.generator, image)


def trained_generator(cfg: TranslationConfig, modules: Mapping[str, Mapping[str, Tensor]]) -> tuple[ResnetGenerator, str]:
    """The run's generator with its checkpointed weights (fp32, eval mode, CPU), and which module they are:
    ``generator_ema`` (the average) when the run kept one, else ``generator``."""
    name = "generator_ema" if "generator_ema" in modules else "generator"
    generator = build_generator(cfg)
    generator.load_state_dict(modules[name])
    return generator.eval(), name


def generator_from_config(config: Mapping[str, Any]) -> ResnetGenerator:
    """An untrained :class:`ResnetGenerator` shaped as an export's ``config.json`` says."""
    return ResnetGenerator(config["ngf"], config["n_blocks"], config["antialias"], config["residual"])


def direction(data: Any) -> str:
    """What the generator translates from and to."""
    if data.kind == "emoji":
        return f"{data.source_style} emoji -> {data.target_style} emoji"
    return f"{data.path}: trainA -> trainB"


def architecture(cfg: TranslationConfig, weights: str) -> dict[str, Any]:
    """``config.json``: what rebuilds the generator, which weights these are, and the value range."""
    g = cfg.generator
    return {"architecture": "ResnetGenerator", "ngf": g.ngf, "n_blocks": g.n_blocks, "antialias": g.antialias,
            "residual": g.residual, "weights": weights, "translates": direction(cfg.data),
            "input": f"RGB float in [-1, 1] (uint8 / 127.5 - 1), [B, 3, H, W], H, W >= {MIN_SIZE}",
            "output": "[B, 3, H, W] in (-1, 1) (tanh); uint8 = round((y + 1) * 127.5)",
            "size_multiple": 4, "size_note": "ONNX and TorchScript pad and crop themselves; the bare generator "
                                             "(safetensors) needs H, W multiples of 4: use translate_any_size"}


USAGE = {
    "onnx": 'import onnxruntime, numpy as np\nsession = onnxruntime.InferenceSession("model.onnx")\n'
            'x = rgb_uint8.transpose(2, 0, 1)[None].astype(np.float32) / 127.5 - 1   # [1, 3, H, W] in [-1, 1]\n'
            'y = session.run(["translated"], {"image": x})[0]\n'
            'out = np.round((np.clip(y, -1, 1) + 1) * 127.5).astype(np.uint8)[0].transpose(1, 2, 0)',
    "torchscript": 'import torch\nmodel = torch.jit.load("model.torchscript.pt")\n'
                   'y = model(x)   # x: float32 [B, 3, H, W] in [-1, 1], any H, W >= 5; y: the same shape',
    "safetensors": 'import json, safetensors.torch\n'
                   'from contrasuite.domains.translation.export import generator_from_config\n'
                   'from contrasuite.domains.translation.networks import translate_any_size\n'
                   'g = generator_from_config(json.load(open("config.json"))).eval()\n'
                   'g.load_state_dict(safetensors.torch.load_file("model.safetensors"))\n'
                   'y = translate_any_size(g, x)   # x: float32 [B, 3, H, W] in [-1, 1]',
}


def export(request: ExportRequest) -> Exported:
    cfg, out, fmt = request.config, request.out, request.format
    generator, weights = trained_generator(cfg, request.modules)
    net = AnySizeGenerator(generator)
    torch.manual_seed(0)
    example = {"image": torch.rand(2, 3, 30, 22) * 2 - 1}  # not multiples of 4: the traced path pads
    checks = [{"image": torch.rand(1, 3, 32, 24) * 2 - 1}, {"image": torch.rand(3, 3, MIN_SIZE, 41) * 2 - 1}]
    file, diffs = write_network(fmt, out, net, generator.state_dict(), architecture(cfg, weights), example, ["translated"],
                                {"image": {0: "batch", 2: "height", 3: "width"}}, checks,
                                min_sizes={"height": MIN_SIZE, "width": MIN_SIZE})
    which = "the weight average (config.ema)" if weights == "generator_ema" else "the generator's (no average kept)"
    inputs = (f"`image`: float32 [B, 3, H, W], RGB in [-1, 1] (`uint8 / 127.5 - 1`); any batch, any H, W >= {MIN_SIZE}"
              if fmt != "safetensors" else
              "the generator's `x`: float32 [B, 3, H, W], RGB in [-1, 1], H and W multiples of 4 "
              "(`translate_any_size` pads any other size and crops back)")
    return Exported(
        files=[file, "config.json"], inputs=inputs,
        outputs="`translated`: float32, the input's shape, RGB in (-1, 1) (tanh); `round((y + 1) * 127.5)` gives uint8",
        usage=USAGE[fmt],
        training_data=f"Unpaired image-to-image translation, {direction(cfg.data)}; the exported weights are {which}.",
        max_abs_diff=diffs,
    )
