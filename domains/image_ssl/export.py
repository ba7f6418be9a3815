"""The trained encoder outside contrasuite: ONNX, TorchScript or safetensors.

ONNX and TorchScript map float ``images [B, 3, H, W]``, RGB in [0, 1], to two outputs, with the
run's input normalisation (the CIFAR-10 mean/std of :class:`~contrasuite.domains.image_ssl.augment.Normalize`)
inside and BatchNorm in eval mode (running statistics):

* ``features [B, feature_dim]``: the encoder's ``h``, what the kNN and linear evaluation use (the
  representation to build on);
* ``projection [B, proj_dim]``: ``z = head(h)``, the space the contrastive objective compared
  (L2-normalise it for cosine similarity, as the loss does).

Both come out of one file because ``contrasuite export`` has no per-domain options: the head is a
small MLP, and ONNX consumers ask for the output they want by name. Both encoders pool adaptively,
so batch, height and width are free. ``safetensors`` holds the ``SSLModel`` state dict (``encoder.*``,
``head.*``); ``config.json`` holds what rebuilds it and the normalisation.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from contrasuite.domains.exporting import ExportRequest, Exported, write_network
from contrasuite.domains.image_ssl.augment import CIFAR10_MEAN, CIFAR10_STD, Normalize
from contrasuite.domains.image_ssl.encoders import SSLModel, build_encoder

FORMATS = {
    "onnx": "the normalised encoder, images [B, 3, H, W] in [0, 1] -> features h, projection z; batch/height/width free",
    "torchscript": "the encoder with its normalisation, traced (the same interface; returns (features, projection))",
    "safetensors": "the encoder's and head's weights and config.json (rebuild SSLModel from it; normalise with its mean/std)",
}
OUTPUTS = ("features", "projection")


class NormalizedEncoder(nn.Module):
    """``images`` in [0, 1] -> ``(h, z)``: the run's normalisation, then encoder and projection head."""

    def __init__(self, model: SSLModel) -> None:
        super().__init__()
        self.normalize = Normalize()
        self.model = model

    def forward(self, images: Tensor) -> tuple[Tensor, Tensor]:
        return self.model(self.normalize(images))


def build_model(encoder: str, width: int, proj_hidden: int, proj_dim: int) -> SSLModel:
    """An untrained ``SSLModel`` (encoder and projection head), in training mode like any new module."""
    net, feature_dim = build_encoder(encoder, width)
    return SSLModel(net, feature_dim, proj_hidden, proj_dim)


def architecture(config: Any, feature_dim: int) -> dict[str, Any]:
    """``config.json``: what rebuilds the model (:func:`build_model`) and what it expects."""
    m = config.model
    return {"architecture": "SSLModel", "encoder": m.encoder, "width": m.width, "feature_dim": feature_dim,
            "proj_hidden": m.proj_hidden, "proj_dim": m.proj_dim, "image_size": config.data.image_size,
            "mean": list(CIFAR10_MEAN), "std": list(CIFAR10_STD),
            "input": "RGB float in [0, 1], [B, 3, H, W], normalised inside as (x - mean) / std (not in the safetensors model)",
            "outputs": {"features": "[B, feature_dim], the encoder's h (kNN / linear evaluation)",
                        "projection": "[B, proj_dim], z = head(h) (the objective's space, before L2 normalisation)"}}


def export(request: ExportRequest) -> Exported:
    cfg, out, fmt = request.config, request.out, request.format
    m = cfg.model
    model = build_model(m.encoder, m.width, m.proj_hidden, m.proj_dim)
    arch = architecture(cfg, model.feature_dim)
    model.load_state_dict(request.modules["model"])
    net = NormalizedEncoder(model).eval()
    size = cfg.data.image_size
    torch.manual_seed(0)
    example = {"images": torch.rand(2, 3, size, size)}
    checks = [{"images": torch.rand(1, 3, size + 8, size - 4)}]
    file, diffs = write_network(fmt, out, net, model.state_dict(), arch, example, OUTPUTS,
                                {"images": {0: "batch", 2: "height", 3: "width"}}, checks)
    usage = {
        "onnx": 'import onnxruntime, numpy as np\nsession = onnxruntime.InferenceSession("model.onnx")\n'
                'h, z = session.run(["features", "projection"], {"images": images.astype(np.float32)})'
                '   # images: [B, 3, H, W] RGB in [0, 1]',
        "torchscript": 'import torch\nmodel = torch.jit.load("model.torchscript.pt")\n'
                       'h, z = model(images)   # images: float [B, 3, H, W] RGB in [0, 1]',
        "safetensors": 'import json, safetensors.torch, torch\nfrom contrasuite.domains.image_ssl.export import build_model\n'
                       'c = json.load(open("config.json"))\n'
                       'model = build_model(c["encoder"], c["width"], c["proj_hidden"], c["proj_dim"]).eval()\n'
                       'model.load_state_dict(safetensors.torch.load_file("model.safetensors"))\n'
                       'mean, std = (torch.tensor(c[k]).view(1, 3, 1, 1) for k in ("mean", "std"))\n'
                       'h, z = model((images - mean) / std)   # images: float [B, 3, H, W] RGB in [0, 1]',
    }[fmt]
    return Exported(
        files=[file, "config.json"],
        inputs=f"`images`: float32 [B, 3, H, W], RGB in [0, 1] (trained at {size} x {size}; any batch, height and width)",
        outputs=f"`features`: float32 [B, {arch['feature_dim']}], the encoder's h (what kNN / linear evaluation use); "
                f"`projection`: float32 [B, {cfg.model.proj_dim}], z = head(h) (the objective's space; L2-normalise for cosine)",
        usage=usage,
        training_data="Self-supervised (no labels in training): two augmented views of each training image "
                      "(random resized crop, flip, colour jitter, grayscale); labels only for the kNN / linear evaluation.",
        max_abs_diff=diffs,
    )
