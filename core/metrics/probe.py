"""Frozen-feature evaluation shared by the domains: feature extraction, weighted kNN, linear probe.

* :func:`extract_features` runs an encoder with BatchNorm (and dropout) in eval mode under
  ``no_grad`` and restores the previous mode afterwards.
* :func:`knn_predict`: the weighted kNN of InstDisc (Wu et al. 2018, arXiv:1805.01978), used for
  SimCLR-style CIFAR evaluation: cosine similarity to the training bank, the ``k`` nearest
  neighbours vote with weight ``exp(s / T)``; defaults ``k = 200, T = 0.1``.
* :func:`linear_probe`: multinomial logistic regression on frozen features (standardised with
  statistics of the fitting split). A validation split is carved from the training features
  (stratified); the L2 weight and the epoch are chosen on it; the chosen model is scored on test.
  Test data never influences a choice.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn


@torch.no_grad()
def extract_features(
    model: nn.Module | Callable[[Tensor], Tensor],
    batches: Iterable[Tensor],
    *,
    device: torch.device | str | None = None,
    preprocess: Callable[[Tensor], Tensor] | None = None,
) -> Tensor:
    """Concatenate ``model(preprocess(batch))`` over ``batches`` as fp32 on the CPU, in eval mode.

    Every submodule is put in eval mode (BatchNorm uses running statistics, as the evaluation
    protocols require) and its previous training flag is restored afterwards.
    """
    modules = list(model.modules()) if isinstance(model, nn.Module) else []
    previous = [m.training for m in modules]
    for m in modules:
        m.training = False
    try:
        out = []
        for batch in batches:
            if device is not None:
                batch = batch.to(device, non_blocking=True)
            if preprocess is not None:
                batch = preprocess(batch)
            out.append(model(batch).float().cpu())
        if not out:
            raise ValueError("extract_features: no batches")
        return torch.cat(out)
    finally:
        for m, flag in zip(modules, previous):
            m.training = flag


def _check_features(name: str, feats: Tensor, labels: Tensor | None = None) -> None:
    if feats.dim() != 2:
        raise ValueError(f"{name} must be [N, D], got {tuple(feats.shape)}")
    if labels is not None and labels.shape != (feats.shape[0],):
        raise ValueError(f"{name} labels must be [{feats.shape[0]}], got {tuple(labels.shape)}")


@torch.no_grad()
def knn_predict(
    train_feats: Tensor,
    train_labels: Tensor,
    query_feats: Tensor,
    *,
    k: int = 200,
    temperature: float = 0.1,
    num_classes: int | None = None,
    chunk_size: int = 1024,
) -> Tensor:
    """Weighted kNN labels ``[Q]``: ``score_c(q) = sum_{j in topk(q)} [y_j = c] exp(s_qj / T)``, cosine ``s``."""
    _check_features("train_feats", train_feats, train_labels)
    _check_features("query_feats", query_feats)
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    k = min(k, train_feats.shape[0])
    num_classes = int(train_labels.max()) + 1 if num_classes is None else num_classes
    bank = F.normalize(train_feats.float(), dim=1)
    labels = train_labels.long().to(bank.device)
    preds = []
    for start in range(0, query_feats.shape[0], chunk_size):
        q = F.normalize(query_feats[start : start + chunk_size].float().to(bank.device), dim=1)
        sims, idx = (q @ bank.T).topk(k, dim=1)
        weights = torch.exp((sims - 1.0) / temperature)  # shifting by the max cosine (1) leaves argmax unchanged
        scores = torch.zeros(q.shape[0], num_classes, device=bank.device)
        scores.scatter_add_(1, labels[idx], weights)
        preds.append(scores.argmax(dim=1))
    return torch.cat(preds)


def knn_accuracy(
    train_feats: Tensor, train_labels: Tensor, test_feats: Tensor, test_labels: Tensor, **kwargs: object
) -> float:
    """Top-1 accuracy (in [0, 1]) of :func:`knn_predict` on ``test_feats``."""
    preds = knn_predict(train_feats, train_labels, test_feats, **kwargs)
    return float((preds.cpu() == test_labels.cpu()).float().mean())


def stratified_split(labels: Tensor, val_fraction: float, seed: int) -> tuple[Tensor, Tensor]:
    """Indices ``(fit, val)``: ``val_fraction`` of every class (at least one) goes to validation."""
    if not 0 < val_fraction < 1:
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction}")
    gen = torch.Generator().manual_seed(seed)
    fit, val = [], []
    for c in labels.unique():
        idx = (labels == c).nonzero().flatten()
        idx = idx[torch.randperm(len(idx), generator=gen)]
        n_val = max(1, round(len(idx) * val_fraction)) if len(idx) > 1 else 0
        val.append(idx[:n_val])
        fit.append(idx[n_val:])
    return torch.cat(fit).sort().values, torch.cat(val).sort().values


@dataclass(frozen=True)
class ProbeResult:
    """Linear-probe outcome; accuracies in [0, 1]."""

    test_accuracy: float
    val_accuracy: float
    weight_decay: float
    epoch: int
    """1-based epoch of the selected model."""


def _accuracy(model: nn.Module, x: Tensor, y: Tensor) -> float:
    with torch.no_grad():
        return float((model(x).argmax(dim=1) == y).float().mean())


def linear_probe(
    train_feats: Tensor,
    train_labels: Tensor,
    test_feats: Tensor,
    test_labels: Tensor,
    *,
    weight_decays: Sequence[float] = (0.0, 1e-5, 1e-4, 1e-3),
    epochs: int = 100,
    lr: float = 1e-2,
    batch_size: int = 0,
    val_fraction: float = 0.1,
    seed: int = 0,
    device: torch.device | str = "cpu",
    progress: Callable[[Iterable[float]], Iterable[float]] = iter,
) -> ProbeResult:
    """Logistic regression on frozen features; L2 weight and epoch selected on a validation split.

    Adam (``lr``) with weight decay ``wd`` added as the L2 penalty ``wd/2 * |W|^2`` on the loss;
    ``batch_size = 0`` means full-batch steps. For each ``wd`` the model is trained ``epochs`` epochs on
    the fitting split and scored on the validation split after every epoch; the (``wd``, epoch) with the
    best validation accuracy (ties: earlier in the grid) is scored once on ``test``. ``progress`` wraps the
    loop over weight decays (e.g. a progress bar).
    """
    _check_features("train_feats", train_feats, train_labels)
    _check_features("test_feats", test_feats, test_labels)
    if train_feats.shape[1] != test_feats.shape[1]:
        raise ValueError(f"train and test features differ in width: {train_feats.shape[1]} vs {test_feats.shape[1]}")
    if epochs < 1:
        raise ValueError(f"epochs must be >= 1, got {epochs}")
    if not weight_decays:
        raise ValueError("weight_decays is empty: give at least one L2 weight to select from")
    labels = train_labels.long().cpu()
    fit_idx, val_idx = stratified_split(labels, val_fraction, seed)
    x_fit = train_feats[fit_idx].float().to(device)
    mean, std = x_fit.mean(0, keepdim=True), x_fit.std(0, keepdim=True).clamp_min(1e-6)

    def norm(x: Tensor) -> Tensor:
        return (x.float().to(device) - mean) / std

    x_fit, x_val, x_test = norm(x_fit), norm(train_feats[val_idx]), norm(test_feats)
    y_fit, y_val = labels[fit_idx].to(device), labels[val_idx].to(device)
    y_test = test_labels.long().to(device)
    num_classes = int(max(labels.max(), test_labels.max())) + 1
    step_size = batch_size if batch_size > 0 else len(x_fit)

    best: tuple[float, float, int, nn.Module] = (-1.0, 0.0, 0, nn.Identity())
    for wd in progress(weight_decays):
        torch.manual_seed(seed)
        gen = torch.Generator().manual_seed(seed)
        model = nn.Linear(x_fit.shape[1], num_classes).to(device)
        opt = torch.optim.Adam(model.parameters(), lr=lr)
        for epoch in range(1, epochs + 1):
            order = torch.randperm(len(x_fit), generator=gen).to(device) if step_size < len(x_fit) else None
            for start in range(0, len(x_fit), step_size):
                idx = order[start : start + step_size] if order is not None else slice(None)
                loss = F.cross_entropy(model(x_fit[idx]), y_fit[idx]) + 0.5 * wd * model.weight.square().sum()
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
            acc = _accuracy(model, x_val, y_val)
            if acc > best[0]:
                best = (acc, wd, epoch, copy.deepcopy(model))
    val_acc, wd, epoch, model = best
    return ProbeResult(test_accuracy=_accuracy(model, x_test, y_test), val_accuracy=val_acc, weight_decay=wd, epoch=epoch)
