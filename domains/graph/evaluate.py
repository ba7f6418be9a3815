"""The HeCo/MEOW evaluation protocol on frozen node embeddings.

Node classification: a linear classifier (logistic regression) trained with Adam for ``iterations``
steps on the labelled training nodes of a split (20, 40 or 60 per class). For each metric the
iteration with the best *validation* score is chosen and the test value at that iteration recorded
(Macro-F1 at the best validation Macro-F1, Micro-F1 at the best validation Micro-F1; ROC-AUC,
one-vs-rest on softmax probabilities, at the iteration chosen for Micro-F1, as in HeCo's code).
Repeated ``runs`` times (50 in the papers), reported as mean and std in percent. The runs are
independent classifiers trained together as one batched model (Adam is element-wise, so this equals
separate runs).

Clustering: k-means with k = number of classes on all target embeddings, ``runs`` (10) seeds, each
the best of 10 k-means++ starts (scikit-learn 1.1's default, which MEOW's ``run_kmeans`` uses); mean
NMI (arithmetic normalisation) and ARI. Nothing is ever selected on test.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from sklearn.cluster import KMeans
from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score, roc_auc_score
from torch import Tensor


@dataclass
class ProbeSettings:
    """Linear-probe settings (the papers: 50 runs of 200 Adam iterations)."""

    lr: float = 0.01
    weight_decay: float = 0.0
    iterations: int = 200
    runs: int = 50
    cluster_runs: int = 10


def f1_scores(pred: Tensor, truth: Tensor, num_classes: int) -> tuple[Tensor, Tensor]:
    """Macro- and Micro-F1 for batched predictions ``pred [R, n]`` against ``truth [n]``: ``([R], [R])``."""
    p = torch.nn.functional.one_hot(pred, num_classes).float()
    t = torch.nn.functional.one_hot(truth, num_classes).float()[None]
    tp = (p * t).sum(1)
    fp = (p * (1 - t)).sum(1)
    fn = ((1 - p) * t).sum(1)
    per_class = 2 * tp / (2 * tp + fp + fn).clamp_min(1)
    micro = tp.sum(1) / pred.shape[1]  # single-label: micro-F1 = accuracy
    return per_class.mean(1), micro


def heco_probe(
    embeddings: Tensor,
    labels: Tensor,
    train: Tensor,
    val: Tensor,
    test: Tensor,
    settings: ProbeSettings,
    seed: int = 0,
) -> dict[str, float]:
    """HeCo's and MEOW's probe: validation-selected test scores (module docstring) over ``settings.runs``
    runs, in percent (not :func:`contrasuite.core.metrics.probe.linear_probe`, the frozen-feature one).

    Returns ``{macro_f1, macro_f1_std, micro_f1, micro_f1_std, auc, auc_std}`` for test and the
    same keys prefixed ``val_`` for the best validation scores (what checkpoint selection may use).
    """
    x = embeddings.detach().float()
    num_classes = int(labels.max()) + 1
    gen = torch.Generator().manual_seed(seed)
    runs, dim = settings.runs, x.shape[1]
    weight = torch.empty(runs, dim, num_classes)
    for r in range(runs):  # xavier-uniform per run, as HeCo's LogReg
        bound = (6.0 / (dim + num_classes)) ** 0.5
        weight[r].uniform_(-bound, bound, generator=gen)
    weight.requires_grad_(True)
    bias = torch.zeros(runs, 1, num_classes, requires_grad=True)
    opt = torch.optim.Adam([weight, bias], lr=settings.lr, weight_decay=settings.weight_decay)
    xt, yt = x[train], labels[train]
    best_val_macro = torch.full((runs,), -1.0)
    best_val_micro = torch.full((runs,), -1.0)
    test_macro = torch.zeros(runs)
    test_micro = torch.zeros(runs)
    test_logits = torch.zeros(runs, len(test), num_classes)
    for _ in range(settings.iterations):
        logits = torch.matmul(xt, weight) + bias
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, num_classes), yt.repeat(runs), reduction="sum") / len(train)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        with torch.no_grad():
            val_logits = torch.matmul(x[val], weight) + bias
            tst_logits = torch.matmul(x[test], weight) + bias
            v_macro, v_micro = f1_scores(val_logits.argmax(-1), labels[val], num_classes)
            t_macro, t_micro = f1_scores(tst_logits.argmax(-1), labels[test], num_classes)
            better_macro = v_macro > best_val_macro
            better_micro = v_micro > best_val_micro
            best_val_macro = torch.where(better_macro, v_macro, best_val_macro)
            best_val_micro = torch.where(better_micro, v_micro, best_val_micro)
            test_macro = torch.where(better_macro, t_macro, test_macro)
            test_micro = torch.where(better_micro, t_micro, test_micro)
            test_logits[better_micro] = tst_logits[better_micro]
    probs = torch.softmax(test_logits, -1).numpy()
    truth = labels[test].numpy()
    auc = np.array([roc_auc_score(truth, p, multi_class="ovr") if num_classes > 2 else roc_auc_score(truth, p[:, 1]) for p in probs])

    def stats(name: str, values: np.ndarray) -> dict[str, float]:
        return {name: float(values.mean() * 100), f"{name}_std": float(values.std() * 100)}

    return {
        **stats("macro_f1", test_macro.numpy()),
        **stats("micro_f1", test_micro.numpy()),
        **stats("auc", auc),
        **stats("val_macro_f1", best_val_macro.numpy()),
        **stats("val_micro_f1", best_val_micro.numpy()),
    }


def clustering_scores(embeddings: Tensor, labels: Tensor, runs: int = 10) -> dict[str, float]:
    """Mean NMI and ARI (percent) of ``runs`` k-means clusterings with k = number of classes."""
    x = embeddings.detach().float().numpy()
    y = labels.numpy()
    k = int(y.max()) + 1
    nmi, ari = [], []
    for seed in range(runs):
        pred = KMeans(n_clusters=k, n_init=10, random_state=seed).fit_predict(x)
        nmi.append(normalized_mutual_info_score(y, pred, average_method="arithmetic"))
        ari.append(adjusted_rand_score(y, pred))
    return {"nmi": float(np.mean(nmi) * 100), "ari": float(np.mean(ari) * 100)}
