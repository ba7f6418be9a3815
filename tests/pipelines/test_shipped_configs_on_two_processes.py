"""Every shipped config on 2 processes, as CI runs them (issue 36): ``torchrun --standalone --nproc_per_node 2
-m contrasuite.pipelines.cli smoke`` on gloo, the configs of a part in one process group, as shipped but
for two steps, the data subsets of the task's smoke settings and the output folder.

* full-scale configs at the task's smoke batch (their own batches are GPU-sized);
* reduced protocols at their own batch (``--as-shipped``), each subset raised to hold a batch;
* fp32 where the CPU emulates bf16 (translation's configs ask for bf16: 17x slower emulated, docs/engine.md,
  Precision).

Every config must end ``ok``: its run finished, and the engine's final ``last.pt`` save compared the two
ranks' parameters and found them equal (it fails the run otherwise: ``test_smoke.py``'s diverged run).
Graph configs must end ``one-process``: graph trains full-batch in one process and refuses ``torchrun``
by design; each graph method's full-scale config on one dataset is run on one process here instead.
``skip`` (data not on this machine) is allowed only for the configs of :data:`NOT_IN_SHARED_DATA`, and
only while that data is absent.

Found by it: the metric-learning configs that cache the frozen stem trained ``net.from_stem`` outside
the DDP wrapper (each rank kept its own gradient: ``the ranks' parameters differ in ['model']``); the
code_search configs mined their named set on first use on both ranks, for minutes (now a ``smoke`` set of
a few stdlib modules, mined by rank 0 while the other waits); image_ssl read its whole CIFAR-10 archive
on every load despite the decoded cache; super_resolution's small-image line came from both ranks;
numpy's 0/0 warning in the similarity plot of a batch of one pair per rank.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from contrasuite.pipelines.config import config_root
from contrasuite.pipelines.precision import cpu_has_native_bf16
from contrasuite.pipelines.smoke import is_reduced, runnable_configs

DATA = Path(os.environ.get("CONTRASUITE_DATA", Path(__file__).resolve().parents[3] / "shared" / "data"))
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
SMOKE = ["-m", "contrasuite.pipelines.cli", "smoke", "--threads", "1"]
NOT_IN_SHARED_DATA = {"metric_learning/cub200_multi_similarity": "CUB_200_2011",
                      "translation/cut_horse2zebra": "translation/horse2zebra",
                      "translation/fastcut_horse2zebra": "translation/horse2zebra"}
"""Configs whose dataset the shared data folder does not hold (a manual download), and the folder it would be."""


def _name(path: Path) -> str:
    return str(path.relative_to(config_root()).with_suffix(""))


def _configs(kind: str) -> list[str]:
    graph = [_name(p) for p in runnable_configs() if _name(p).startswith("graph/")]
    if kind == "graph":
        return graph
    return [_name(p) for p in runnable_configs() if _name(p) not in graph and is_reduced(p) == (kind == "reduced")]


PARTS = {"full": 3, "reduced": 2}
"""Parts per kind (graph aside): each part is one torchrun; the test workers share them out."""


@pytest.fixture(scope="module")
def teachers(tmp_path_factory) -> Path:
    """A folder holding the teacher runs the model-prior code_search configs read (``config.prior.checkpoint``,
    relative to the working folder): the pretrained MiniLM bi-encoder, saved as a code_search run's checkpoint."""
    import torch

    from contrasuite.domains.code_search.encoder import BiEncoder, EncoderConfig

    root = tmp_path_factory.mktemp("teachers")
    last = root / "runs" / "code_search" / "infonce" / "checkpoints" / "last.pt"
    last.parent.mkdir(parents=True)
    torch.save({"modules": {"encoder": BiEncoder(EncoderConfig()).state_dict()}}, last)
    (root / "runs" / "code_search" / "reduced_infonce").symlink_to(last.parents[1])
    return root


def _smoke(command: list[str], configs: list[str], out: Path, *flags: str, cwd: Path | None = None) -> list[dict]:
    precision = [] if cpu_has_native_bf16() else ["--precision", "fp32"]
    proc = subprocess.run([*command, *SMOKE, *configs, "--json", str(out), *precision, *flags], cwd=cwd,
                          env=dict(os.environ, OMP_NUM_THREADS="1"), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=1200)
    assert out.is_file(), proc.stdout[-3000:]
    rows = json.loads(out.read_text())
    assert [r["config"] for r in rows] == configs, proc.stdout[-3000:]
    slowest = sorted(rows, key=lambda r: -r["seconds"])[:3]
    print("slowest:", ", ".join(f"{r['config']} {r['seconds']:.0f} s" for r in slowest))
    return rows


def _allowed_skip(row: dict) -> bool:
    folder = NOT_IN_SHARED_DATA.get(row["config"])
    return row["state"] == "skip" and folder is not None and not (DATA / folder).exists()


@pytest.mark.slow
@pytest.mark.distributed
def test_graph_configs_refuse_two_processes(tmp_path):
    refused = _smoke(TORCHRUN, _configs("graph"), tmp_path / "two.json")
    assert {r["state"] for r in refused} == {"one-process"}
    assert all("graph trains full-batch in one process, not 2" in r["note"] for r in refused)


@pytest.mark.slow
def test_graph_methods_start_on_one_process(tmp_path):
    """Each graph method's full-scale config on IMDB (the quickest of the three datasets), and InfoNCE at AdaMEOW's
    settings, on one process. Every
    graph config runs on a tiny graph in ``tests/domains/graph/test_graph_task.py``, and each real dataset's
    loading is tested in ``test_graph_data.py``."""
    configs = [c for c in _configs("graph") if "/reduced/" not in c and c.endswith("_imdb")]
    rows = _smoke([sys.executable], configs, tmp_path / "one.json")
    bad = [f"{r['state']} {r['config']}: {r['note']}" for r in rows if r["state"] != "ok"]
    assert len(configs) == 5 and not bad, bad


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.parametrize("kind,part", [(k, i) for k, n in PARTS.items() for i in range(n)])
def test_shipped_configs_finish_in_sync_on_two_processes(kind, part, tmp_path, teachers):
    configs = _configs(kind)[part :: PARTS[kind]]
    rows = _smoke(TORCHRUN, configs, tmp_path / "smoke.json", *(["--as-shipped"] if kind == "reduced" else []),
                  cwd=teachers)
    bad = [f"{r['state']} {r['config']}: {r['note']}" for r in rows if r["state"] != "ok" and not _allowed_skip(r)]
    assert not bad, bad
    assert all(r["processes"] == 2 and r["params"] > 0 and r["estimate_bytes"] > 0 for r in rows if r["state"] == "ok")
