"""Each domain page's "From Python" example (train a reduced config for a few steps, load the run, infer)
runs as written, in a fresh process in an empty folder, on the real data."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs" / "domains"
DOMAINS = ("code_search", "graph", "image_ssl", "image_text", "metric_learning", "super_resolution", "translation")
SECTION = re.compile(r"^## From Python\n(.*?)(?=^## |\Z)", re.S | re.M)
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
DATA = {"code_search": None, "graph": "graph/acm", "image_ssl": "cifar10", "image_text": "emoji",
        "metric_learning": "emoji", "super_resolution": "sr/Set5.tar.gz", "translation": "emoji"}
"""What each example reads under the data root (code_search mines the standard library)."""
PRINTS = {
    "code_search": r"\d\.\d{3}  \w+\.py:\d+  \w",
    "graph": r"embeddings \(4019, 64\); the nearest paper has the same class for \d+\.\d% of papers",
    "image_ssl": r"features \(200, \d+\); 1-NN accuracy on 200 test images \d+\.\d%",
    "image_text": r"\d+ images -> \(\d+, 256\); .* image-to-text top-1 \d+\.\d%",
    "metric_learning": r"query \(1, 128\): top-1 1f6\S*\.png; the Noto twin ranks \d+ of \d+",
    "super_resolution": r"\(3, 128, 128\) -> \(1, 3, 256, 256\): PSNR-Y \d+\.\d\d dB \(bicubic \d+\.\d\d dB\)",
    "translation": r"generator(_ema)?: \(3, 64, 64\) -> \(1, 3, 64, 64\); PSNR to the true Noto drawing \d+\.\d\d dB",
}
"""What each example's output must hold: the shapes it documents and a number."""


def example(domain: str) -> str:
    """The one ```python block of the page's "From Python" section."""
    page = (DOCS / f"{domain}.md").read_text()
    section = SECTION.search(page)
    assert section, f"docs/domains/{domain}.md has no '## From Python' section"
    blocks = BLOCK.findall(section[1])
    assert len(blocks) == 1, f"docs/domains/{domain}.md: {len(blocks)} python blocks under 'From Python', want 1"
    assert "#from-python" in page.split("\n## ", 1)[0], f"docs/domains/{domain}.md: the top does not link #from-python"
    return blocks[0]


@pytest.mark.slow
@pytest.mark.parametrize("domain", DOMAINS)
def test_the_python_example_trains_loads_and_infers(domain, tmp_path):
    code = example(domain)
    root = Path(os.environ["CONTRASUITE_DATA"])
    if DATA[domain] and not (root / DATA[domain]).exists():
        pytest.skip(f"{domain}: no {root / DATA[domain]}")
    (tmp_path / "example.py").write_text(code)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert re.search(PRINTS[domain], done.stdout), f"unexpected output: {done.stdout[-1000:]}"
    assert list((tmp_path / "runs").rglob("checkpoints/last.pt")), "no run folder under the example's cwd"


def test_train_returns_the_run_and_load_run_gives_its_weights_back(toy_yaml, tmp_path):
    import torch

    from contrasuite.pipelines.python_api import load_run, train

    run_dir = train(toy_yaml(run={"max_steps": 3}), "config.lr=0.05", data_root=tmp_path)
    assert (run_dir / "config.yaml").is_file() and run_dir.is_relative_to(tmp_path / "runs")
    run = load_run(run_dir, "last")
    assert run.checkpoint == run_dir / "checkpoints" / "last.pt" and run.config.lr == 0.05
    assert run.data_root == tmp_path and run.state["position"]["global_step"] == 3
    task = run.task()
    for name, value in task.model.state_dict().items():
        assert torch.equal(value, run.modules["model"][name]), name
    with pytest.raises(FileNotFoundError, match="not a run folder"):
        load_run(tmp_path)
