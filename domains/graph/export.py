"""A graph run outside contrasuite: its node embeddings as ``.npy``, or its encoder's weights as safetensors.

``npy`` writes what the evaluation probes and clusters (:meth:`GraphTask.embeddings`: the fused fine-grained
view before the projection head, dropout off): ``embeddings.npy`` (float32 ``[N, dim]``, row ``i`` the
dataset's target node ``i``, not L2-normalised) and ``labels.npy`` (int64 ``[N]``, 0-based). Both need the
data: the task is set up on the CPU with the checkpoint's weights (``--data-root`` where it lives).
``safetensors`` writes the encoder (``MEOWModel``) parameters; ``config.json`` beside either says what
they are.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from contrasuite.domains.exporting import Exported, ExportError, ExportRequest, write_config, write_safetensors
from contrasuite.domains.graph.task import GraphTask

FORMATS = {
    "npy": "the target nodes' evaluated embeddings (embeddings.npy [N, dim]), labels.npy and config.json",
    "safetensors": "the encoder's (MEOWModel's) weights and config.json",
}
USAGE = {
    "npy": 'import numpy as np\nembeddings = np.load("embeddings.npy")   # [N, dim] float32\n'
           'labels = np.load("labels.npy")           # [N] int64, the evaluation\'s classes',
    "safetensors": 'import torch\nfrom safetensors.torch import load_file\nfrom contrasuite.pipelines.api import load_config, setup_task\n'
                   'run = load_config("RUN_DIR/config.yaml")   # the run folder export.json names\n'
                   'task = setup_task(run.task_class(), run.config, device=torch.device("cpu"), data_root="DATA_ROOT",\n'
                   '                  seed=run.run.seed)\n'
                   'task.model.load_state_dict(load_file("model.safetensors"))\n'
                   'embeddings = task.embeddings()   # [N, dim], what the evaluation probes',
}


def describe(task: GraphTask) -> dict[str, Any]:
    """``config.json``: the dataset, the embedded nodes and the embedding."""
    cfg, target = task.cfg, task.data[task.cfg.dataset.target]
    return {"dataset": cfg.dataset.name or cfg.dataset.root, "target": cfg.dataset.target, "num_nodes": target.num_nodes,
            "num_classes": int(target.y.max()) + 1, "dim": cfg.model.dim, "l2_normalised": False,
            "metapaths": [m.name for m in cfg.dataset.metapaths], "eval_views": cfg.model.eval_views, "seed": task.seed,
            "embedding": "fused fine-grained view before the projection head, dropout off (GraphTask.embeddings); "
                         "row i is target node i of the dataset"}


def write_npy(array: np.ndarray, path: Path) -> None:
    """``array`` as ``.npy``, read back with ``np.load`` and required to be the same bit for bit."""
    np.save(path, array)
    back = np.load(path)
    if back.dtype != array.dtype or not np.array_equal(back, array):
        raise ExportError(f"{path}: np.load reads back another array than was written")


def export(request: ExportRequest) -> Exported:
    task: GraphTask = request.task()
    out, config = request.out, describe(task)
    n = config["num_nodes"]
    spec = f"{n} {config['target']!r} nodes of {config['dataset']!r}"
    training_data = (f"Self-supervised on the {config['dataset']} heterogeneous graph (target {config['target']!r}, "
                     f"meta-paths {', '.join(config['metapaths'])}; no labels in training).")
    if request.format == "npy":
        write_npy(task.embeddings().numpy(), out / "embeddings.npy")
        write_npy(task.data[config["target"]].y.numpy(), out / "labels.npy")
        write_config(config, out / "config.json")
        return Exported(
            files=["embeddings.npy", "labels.npy", "config.json"],
            inputs=f"none: the embeddings of the {spec}, computed once",
            outputs=f"`embeddings.npy`: float32 [{n}, {config['dim']}], row i = node i, not L2-normalised; "
                    f"`labels.npy`: int64 [{n}], classes 0..{config['num_classes'] - 1}",
            usage=USAGE["npy"],
            training_data=training_data, max_abs_diff={"embeddings": 0.0},
        )
    write_safetensors(request.modules["model"], out / "model.safetensors",
                      {**config, "architecture": "MEOWModel", "model": asdict(task.cfg.model)})
    return Exported(
        files=["model.safetensors", "config.json"],
        inputs=f"the graph: the encoder's per-type features and meta-path graphs of the {spec}",
        outputs=f"MEOWModel's parameters (name -> tensor); its fine view gives [N, {config['dim']}] embeddings",
        usage=USAGE["safetensors"],
        training_data=training_data,
    )
