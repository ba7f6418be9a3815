"""Every ```python block of every docs/objectives/*.md page runs (each page's usage snippet is tested)."""

import re
from pathlib import Path

import pytest
import torch

DOCS = Path(__file__).resolve().parents[2] / "docs" / "objectives"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def snippets():
    for page in sorted(DOCS.glob("*.md")):
        for k, code in enumerate(BLOCK.findall(page.read_text())):
            yield pytest.param(page.name, code, id=f"{page.stem}-{k}")


def test_every_objective_page_has_a_snippet():
    pages = sorted(DOCS.glob("*.md"))
    assert pages, f"no pages under {DOCS}"
    missing = [p.name for p in pages if not BLOCK.search(p.read_text())]
    assert not missing, f"pages without a ```python usage snippet: {missing}"


@pytest.mark.parametrize("page,code", list(snippets()))
def test_snippet_runs(page, code):
    torch.manual_seed(0)
    exec(compile(code, f"docs/objectives/{page}", "exec"), {"__name__": f"doc_{page}"})
