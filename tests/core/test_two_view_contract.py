"""Every registered objective takes SimCLR's two-view batch, ``objective(z, labels=labels)``: the
objectives defined on pairs split it into the two views and average both directions."""

import pytest
import torch
import torch.nn.functional as F

from contrasuite.core.objectives import OBJECTIVES
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
