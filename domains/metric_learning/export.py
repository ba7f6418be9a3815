"""The trained embedding net outside contrasuite: ONNX, TorchScript or safetensors.

ONNX and TorchScript map float ``images [B, 3, S, S]``, RGB in [0, 1] at the run's ``data.image_size``,
to ``embeddings [B, D]``, EfficientNet-Lite's input normalisation ``(x - 127/255) / (128/255)`` inside
and BatchNorm in eval mode; the batch is free (the "SAME" padding is computed from the image size, so
the size is fixed). ``config.json`` says how to score the embeddings: ``cosine``, or ``poincare`` with
``c`` and ``clip_r`` for a run with a hyperbolic term (``-d_c`` between ``to_ball(x, c, clip_r)`` points,
:mod:`contrasuite.core.similarity.poincare`). ``safetensors`` holds the ``EmbeddingNet`` state dict.
``contrasuite retrieve`` takes the export folder (or its model file) in place of a run folder.
"""

from __future__ import annotations


import torch

from contrasuite.domains.efficientnet_lite0 import FEATURE_DIM, INPUT_MEAN, INPUT_STD, NETWORK, imagenet_weights
from contrasuite.domains.exporting import ExportRequest, Exported, write_network
from contrasuite.domains.metric_learning.inference import Embedder

FORMATS = {
    "onnx": "the normalised embedding net, images [B, 3, S, S] in [0, 1] -> embeddings [B, D], batch free; config.json: the score",
    "torchscript": "the embedding net with its normalisation, traced (the same interface)",
    "safetensors": "the embedding net's weights and config.json (rebuild NormalizedEmbeddingNet from it; the score)",
}


def pretrained_licence(freeze_blocks: int) -> str:
    """The model card's line on the ImageNet EfficientNet-Lite0 weights the run started from."""
    kept = f"; the stem and the first {freeze_blocks} blocks kept frozen" if freeze_blocks else ""
    return f"{imagenet_weights()}; fine-tuned by this run{kept}"


def export(request: ExportRequest) -> Exported:
    cfg, out, fmt = request.config, request.out, request.format
    embedder = Embedder.from_run(cfg, request.modules)
    net, size, scoring = embedder.model, cfg.data.image_size, embedder.scoring
    dim = cfg.model.embedding_dim or FEATURE_DIM
    score = ("cosine similarity" if scoring["score"] == "cosine" else
             f"negative Poincare distance -d_c(to_ball(x, c, clip_r), ...) (c = {scoring['c']}, clip_r = {scoring['clip_r']})")
    config = {"architecture": "NormalizedEmbeddingNet", "network": NETWORK, "embedding_dim": cfg.model.embedding_dim,
              "output_dim": dim, "freeze_blocks": cfg.model.freeze_blocks, "image_size": size,
              "mean": list(INPUT_MEAN), "std": list(INPUT_STD), "scoring": scoring,
              "input": f"RGB float in [0, 1], [B, 3, {size}, {size}], normalised inside as (x - mean) / std",
              "output": f"[B, {dim}] embeddings; retrieval ranks by {score}"}
    torch.manual_seed(0)
    example = {"images": torch.rand(2, 3, size, size)}
    checks = [{"images": torch.rand(3, 3, size, size)}]
    file, diffs = write_network(fmt, out, net, net.state_dict(), config, example, ["embeddings"], {"images": {0: "batch"}},
                                checks)
    shape = f"# images: float32 [B, 3, {size}, {size}] RGB in [0, 1]"
    usage = {
        "onnx": 'import onnxruntime, numpy as np\nsession = onnxruntime.InferenceSession("model.onnx")\n'
                f'emb = session.run(["embeddings"], {{"images": images.astype(np.float32)}})[0]   {shape}',
        "torchscript": f'import torch\nmodel = torch.jit.load("model.torchscript.pt")\nemb = model(images)   {shape}',
        "safetensors": 'import json, safetensors.torch\n'
                       'from contrasuite.domains.metric_learning.model import NormalizedEmbeddingNet\n'
                       'c = json.load(open("config.json"))\n'
                       'model = NormalizedEmbeddingNet(c["embedding_dim"], pretrained=False, freeze_blocks=c["freeze_blocks"])\n'
                       'model.eval()\n'
                       f'model.load_state_dict(safetensors.torch.load_file("model.safetensors"))\nemb = model(images)   {shape}',
    }[fmt]
    usage += (f"\n# retrieval ranks a gallery by {score} (config.json `scoring`):\n"
              "import json, torch\nfrom contrasuite.domains.metric_learning.evaluate import scorer\n"
              'score = scorer(json.load(open("config.json"))["scoring"])\n'
              "scores = score(torch.as_tensor(query_emb), torch.as_tensor(gallery_emb))   # emb of Q queries, G images: [Q, G]")
    return Exported(
        files=[file, "config.json"],
        inputs=f"`images`: float32 [B, 3, {size}, {size}], RGB in [0, 1] (transparent pixels on white; any batch)",
        outputs=f"`embeddings`: float32 [B, {dim}]; retrieval ranks by {score}",
        usage=usage,
        training_data=f"Deep metric learning on `{cfg.data.name}`: m-per-class batches of the training classes; "
                      "the reported retrieval is on classes never seen in training.",
        licences=[pretrained_licence(cfg.model.freeze_blocks)] if cfg.model.pretrained else [],
        max_abs_diff=diffs,
    )
