"""The similarity-distribution plot saved at each evaluation (Zhu et al., ICCV 2021, Fig. 1 view).

Histograms of positive-pair and negative-pair cosine similarities: training pushes the two apart;
overlapping mass means hard negatives (or false negatives) the objective must handle.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor


def similarity_histogram(pos: Tensor, neg: Tensor, path: Path, title: str) -> Path:
    """Write a PNG of the two distributions to ``path`` (atomically) and return it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.2), dpi=100)
    bins = torch.linspace(-1, 1, 81).tolist()
    ax.hist(neg.detach().float().cpu().numpy(), bins=bins, density=True, alpha=0.6, label=f"negative (n={neg.numel()})")
    ax.hist(pos.detach().float().cpu().numpy(), bins=bins, density=True, alpha=0.6, label=f"positive (n={pos.numel()})")
    ax.set_xlabel("cosine similarity")
    ax.set_ylabel("density")
    ax.set_title(title)
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.tmp.png")
    fig.savefig(tmp)
    plt.close(fig)
    tmp.replace(path)
    return path
