"""Cross-rank helpers in one process (the multi-process checks are in test_distributed.py)."""

import pytest
import torch

from contrasuite.core.distributed import (
    all_gather_with_grad,
    distributed_objective,
    gather_labels,
    offset_diagonal_mask,
    world,
)
from contrasuite.core.objectives import InfoNCE


def test_single_process_is_identity():
    assert world() == (0, 1)
    x = torch.randn(3, 2, requires_grad=True)
    assert all_gather_with_grad(x) is x
    labels = torch.arange(3)
    assert gather_labels(labels) is labels


def test_single_process_objective_is_plain_call():
    torch.manual_seed(0)
    a, c = torch.randn(5, 4), torch.randn(5, 4)
    assert torch.equal(distributed_objective(InfoNCE(0.3), a, c), InfoNCE(0.3)(a, c))


def test_offset_diagonal_mask():
    mask = offset_diagonal_mask(2, 6, 3)
    assert mask.nonzero().tolist() == [[0, 3], [1, 4]]
    with pytest.raises(ValueError, match="exceeds"):
        offset_diagonal_mask(3, 4, 2)


def test_docs_negatives_snippets_run():
    """The python blocks of docs/negatives.md, run in order in one namespace."""
    import re
    from pathlib import Path

    from contrasuite.core.negatives import NEGATIVE_SOURCES

    text = (Path(__file__).resolve().parents[2] / "docs" / "negatives.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert len(blocks) >= 5
    namespace: dict = {}
    registered = dict(NEGATIVE_SOURCES)  # the page registers an example source: leave the registry as found
    try:
        for block in blocks:
            exec(compile(block, "docs/negatives.md", "exec"), namespace)
    finally:
        NEGATIVE_SOURCES.clear()
        NEGATIVE_SOURCES.update(registered)
    assert torch.isfinite(namespace["loss"])
