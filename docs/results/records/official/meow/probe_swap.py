"""Probe swap (issue 39): each side's embedding scored by each side's evaluation, on the same split.

Separates "the probe differs" from "the embedding differs" when official MEOW and ours disagree:

- ours: ``GraphTask.embeddings()`` of a run's ``best.pt`` (what our evaluation probes);
- official: the embedding ``code_meow/main.py`` saves (``embeds/<dataset>/0.pkl``, a pickled float32
  numpy array; read with an unpickler that admits numpy's array reconstruction only);
- each scored by our ``heco_probe`` (50 runs, the config's probe settings) and by the official
  ``utils/evaluate.py`` ``evaluate`` (its 50 runs; ``isTest=False`` returns the mean validation and test
  Macro-F1 and writes no file), both on our split files (the official ones are the same files).

usage: python probe_swap.py RUN_DIR OFFICIAL_EMB.pkl OFFICIAL_CODE_DIR OUT.json [--note TEXT]
(``OFFICIAL_CODE_DIR``: the exported and patched ``code_meow``; CONTRASUITE_DATA set as for training)
"""

from __future__ import annotations

import argparse
import io
import json
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

from contrasuite.domains.graph.evaluate import heco_probe
from contrasuite.pipelines.python_api import load_run

_NUMPY_ARRAY_PICKLE = {
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
}


class _ArrayOnly(pickle.Unpickler):
    """Unpickles a plain numpy array and refuses any other global."""

    def find_class(self, module: str, name: str):  # noqa: ANN201 - pickle's signature
        if (module, name) not in _NUMPY_ARRAY_PICKLE:
            raise pickle.UnpicklingError(f"refusing {module}.{name}: only a numpy array is expected")
        return super().find_class(module, name)


def read_official_embedding(path: Path) -> np.ndarray:
    array = _ArrayOnly(io.BytesIO(path.read_bytes())).load()
    if not isinstance(array, np.ndarray) or array.ndim != 2:
        raise ValueError(f"{path}: expected a 2-d numpy array")
    return array.astype(np.float32)


def official_evaluate(code_dir: Path):
    """The official ``evaluate`` function, imported from the exported code folder."""
    sys.path.insert(0, str(code_dir))
    from utils.evaluate import evaluate  # the folder's own package (it imports its logreg relatively)

    return evaluate


def scores(embedding: torch.Tensor, task, evaluate, seed: int) -> dict[str, dict[str, float]]:
    """Macro-F1 (percent, mean over the probe runs) per label ratio, by our probe and the official one."""
    target = task.data[task.cfg.dataset.target]
    classes = int(target.y.max()) + 1
    onehot = torch.nn.functional.one_hot(target.y, classes).float()
    out: dict[str, dict[str, float]] = {"ours_probe": {}, "official_probe": {}}
    for r in task.cfg.eval_ratios:
        train, val, test = target[f"train_{r}"], target[f"val_{r}"], target[f"test_{r}"]
        ours = heco_probe(embedding, target.y, train, val, test, task.cfg.probe, seed=seed)
        out["ours_probe"][f"macro_f1_{r}"] = ours["macro_f1"]
        out["ours_probe"][f"val_macro_f1_{r}"] = ours["val_macro_f1"]
        torch.manual_seed(seed)
        val_mean, test_mean = evaluate(embedding, r, train, val, test, onehot, classes, "cpu", task.cfg.dataset.name,
                                       task.cfg.probe.lr, task.cfg.probe.weight_decay, None, isTest=False)
        out["official_probe"][f"macro_f1_{r}"] = float(test_mean) * 100
        out["official_probe"][f"val_macro_f1_{r}"] = float(val_mean) * 100
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("official_embedding", type=Path)
    parser.add_argument("official_code", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--note", default="")
    args = parser.parse_args()
    torch.set_num_threads(1)
    run = load_run(args.run_dir)
    task = run.task()
    ours = task.embeddings()
    official = torch.from_numpy(read_official_embedding(args.official_embedding))
    if official.shape[0] != ours.shape[0]:
        raise ValueError(f"{args.official_embedding}: {official.shape[0]} rows, the dataset has {ours.shape[0]}")
    evaluate = official_evaluate(args.official_code.resolve())
    repo = Path(__file__).resolve().parents[5]
    record = {
        "what": "probe swap: each side's embedding scored by each side's probe (Macro-F1, %, 50 runs)",
        "command": " ".join(["python", "docs/results/records/official/meow/probe_swap.py", *sys.argv[1:]]),
        "commit": subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip(),
        "run_dir": str(args.run_dir),
        "run_seed": task.seed,
        "official_embedding": str(args.official_embedding),
        "note": args.note,
        "ours_embedding": scores(ours, task, evaluate, seed=0),
        "official_embedding_scores": scores(official, task, evaluate, seed=0),
    }
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
