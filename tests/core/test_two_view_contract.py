"""The core contract's call forms, for every registered objective: SimCLR's two-view batch
``objective(z, labels=labels)`` (the objectives defined on pairs split it into the two views and average
both directions), paired rows, extra negative columns, ``pos_mask`` and ``neg_weight``."""

import inspect

import pytest
import torch
import torch.nn.functional as F

from contrasuite.core.objectives import OBJECTIVES
from contrasuite.core.objectives.base import ContrastiveObjective
from contrasuite.core.pairs import two_view


@pytest.mark.parametrize("name", sorted(OBJECTIVES))
def test_every_objective_takes_the_two_view_labels_batch(name):
    torch.manual_seed(0)
    anchors, labels = two_view(*F.normalize(torch.randn(2, 6, 4), dim=2))
    anchors.requires_grad_(True)
    loss = OBJECTIVES[name]()(anchors, labels=labels)
    loss.backward()
    assert loss.dim() == 0 and torch.isfinite(loss) and anchors.grad.abs().sum() > 0


@pytest.mark.parametrize("name", [n for n in sorted(OBJECTIVES) if OBJECTIVES[n].paired_views])
def test_paired_objectives_average_both_directions_of_the_views(name):
    torch.manual_seed(1)
    a, b = F.normalize(torch.randn(2, 5, 4), dim=2)
    objective = OBJECTIVES[name]()
    anchors, labels = two_view(a, b)
    torch.testing.assert_close(objective(anchors, labels=labels), 0.5 * (objective(a, b) + objective(b, a)))
    order = torch.randperm(5)  # pairs in another order: the same loss (the first row of a label is view 1)
    anchors, labels = two_view(a[order], b[order])
    torch.testing.assert_close(objective(anchors, labels=labels + 7), 0.5 * (objective(a, b) + objective(b, a)))
    assert {"clip", "dhel", "kcl", "siglip"} <= {n for n in OBJECTIVES if OBJECTIVES[n].paired_views}


def _finite_with_gradient(loss: torch.Tensor, *inputs: torch.Tensor) -> None:
    loss.backward()
    assert loss.dim() == 0 and torch.isfinite(loss)
    assert all(x.grad is not None and torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0 for x in inputs)


@pytest.mark.parametrize("name", sorted(OBJECTIVES))
def test_every_objective_takes_every_form_of_the_contract(name):
    """Paired rows, extra negative columns, ``pos_mask`` in place of the diagonal, and ``neg_weight``: the
    same call shapes for every registered objective, or a one-line refusal that names the input (KCL is
    defined on pairs only; circle, multi-similarity and KCL weight their pairs themselves). A fresh
    instance per call: WEINCE-repro keeps an EMA across calls."""
    torch.manual_seed(2)
    make = lambda n: F.normalize(torch.randn(n, 4), dim=1).requires_grad_(True)  # noqa: E731
    new = OBJECTIVES[name]

    def call_or_refusal(word: str, *args: torch.Tensor, **kwargs: torch.Tensor) -> torch.Tensor | None:
        try:
            return new()(*args, **kwargs)
        except ValueError as err:
            assert word in str(err), err
            return None

    a, b = make(5), make(5)
    _finite_with_gradient(new()(a, b), a, b)
    a, b = make(5), make(8)  # 5 positives on the diagonal, 3 extra negative columns
    loss = call_or_refusal("candidate", a, b)
    if loss is None:
        assert name == "kcl"
        return
    _finite_with_gradient(loss, a, b)
    mask = torch.zeros(5, 8, dtype=torch.bool)
    mask[torch.arange(5), torch.arange(5)] = True
    torch.testing.assert_close(new()(a, b, pos_mask=mask), new()(a, b))  # the diagonal, said as a mask
    loss = call_or_refusal("neg_weight", a, b, neg_weight=torch.rand(5, 8) + 0.5)
    if loss is not None:
        _finite_with_gradient(loss, a, b)


@pytest.mark.parametrize("name", sorted(OBJECTIVES))
def test_declarations_match_what_the_objective_does(name):
    """Routing reads class declarations, never signatures: they must say what the class does."""
    cls = OBJECTIVES[name]
    assert cls.chooses_similarity == ("similarity" in inspect.signature(cls).parameters)
    assert cls.takes_prior == ("prior" in inspect.signature(cls.forward).parameters)
    if cls.per_anchor_mean:
        assert cls.forward is ContrastiveObjective.forward


def test_overriding_forward_without_declaring_how_it_reduces_is_refused():
    with pytest.raises(TypeError, match="Mine overrides forward: declare per_anchor_mean"):
        class Mine(ContrastiveObjective):
            def forward(self, anchors, candidates=None, **kwargs):
                return anchors.sum()
