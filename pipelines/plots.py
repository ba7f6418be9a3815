"""The plots a run folder holds, rewritten at each evaluation.

* ``plots/similarity_stepNNNNNNN.png``: histograms of positive-pair and negative-pair cosine
  similarities (Zhu et al., ICCV 2021, Fig. 1 view): training pushes the two apart; overlapping mass
  means hard negatives (or false negatives) the objective must handle.
* ``plots/curves.png``: the training loss and the validation metric that selects ``best.pt``, by step,
  from ``metrics.csv``.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import torch
from torch import Tensor


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: Path) -> Path:
    """Write ``fig`` to ``path`` atomically (a temporary name, then a rename) and close it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.tmp.png")
    fig.savefig(tmp)
    _pyplot().close(fig)
    tmp.replace(path)
    return path


def similarity_histogram(pos: Tensor, neg: Tensor, path: Path, title: str) -> Path:
    """Write a PNG of the two distributions to ``path`` (atomically) and return it; an empty one (a batch of one
    pair has no negatives: one sample per rank on two processes) is left out, not drawn as a 0/0 density."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5, 3.2), dpi=100)
    bins = torch.linspace(-1, 1, 81).tolist()
    for name, values in (("negative", neg), ("positive", pos)):
        if values.numel():
            ax.hist(values.detach().float().cpu().numpy(), bins=bins, density=True, alpha=0.6,
                    label=f"{name} (n={values.numel()})")
    ax.set_xlabel("cosine similarity")
    ax.set_ylabel("density")
    ax.set_title(title)
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    return _save(fig, path)


def training_curves(metrics_csv: Path, path: Path, val_key: str | None, title: str) -> Path | None:
    """``train/loss`` and ``val/<val_key>`` against the step, from the long-format ``metrics.csv``."""
    series: dict[str, list[tuple[int, float]]] = {"train/loss": [], f"val/{val_key}": []}
    with open(metrics_csv, newline="") as handle:
        for row in csv.DictReader(handle):
            if row["name"] in series:
                series[row["name"]].append((int(row["step"]), float(row["value"])))
    loss, val = series["train/loss"], series[f"val/{val_key}"]
    if not loss and not val:
        return None
    plt = _pyplot()
    fig, left = plt.subplots(figsize=(6, 3.2), dpi=100)
    if loss:
        left.plot(*zip(*loss), color="tab:blue", lw=1)
    left.set_xlabel("step")
    left.set_ylabel("training loss", color="tab:blue")
    if val:
        right = left.twinx()
        right.plot(*zip(*val), color="tab:orange", marker="o", ms=3)
        right.set_ylabel(f"validation {val_key}", color="tab:orange")
    left.set_title(title)
    fig.tight_layout()
    return _save(fig, path)
