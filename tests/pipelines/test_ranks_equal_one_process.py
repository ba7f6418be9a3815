"""Every domain's reduced config trains to the same parameters on 2 gloo processes as on 1 (issue 20).

Each domain trains 3 steps of its reduced config on a tiny subset in fp32, once in one process and
once under ``torchrun --nproc_per_node 2`` with the same global batch, through the real trainer
(``rank_equality_worker.py``: one process per world size for all domains, the gradients of every
optimizer step recorded). An epoch holds an odd number of batches (3, or 1 for metric_learning's tiny
CUB over 3 epochs). Graph refuses several processes (``test_rank_share.py``).

Two kinds of layer differ by rank by design and are fixed in both runs: BatchNorm uses its running
statistics (a rank's batch statistics are its shard's without SyncBatchNorm, which needs CUDA) and
dropout is off (each rank draws its own masks). Everything else must agree: the gradient of every
step to 1e-3 of its largest entry (float32 rounding of sums taken in another order; measured gaps are
1e-7 to 1e-4), and the parameters to :data:`ADAM_NOISE`.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("rank_equality_worker.py")
DATA = Path(os.environ.get("CONTRASUITE_DATA", ROOT.parent / "shared" / "data"))


def _specs(tmp: Path) -> dict[str, list[str]]:
    from tests.domains.code_search.conftest import write_tree
    from tests.domains.image_text.conftest import TINY_OPEN_CLIP
    from tests.domains.metric_learning.conftest import make_tiny_cub
    from tests.domains.translation.conftest import TINY
    from contrasuite.domains.code_search.mine import MineConfig, mine

    mined = tmp / "mined"
    mine([write_tree(tmp / "src")], mined, MineConfig(split_fractions=(0.5, 0.25, 0.25)), log=lambda m: None)
    clip = tmp / "tiny-clip-test.json"
    clip.write_text(__import__("json").dumps(TINY_OPEN_CLIP))
    cub = make_tiny_cub(tmp / "cub")
    return {
        "code_search": ["code_search/reduced_infonce", f"config.data.folder={mined}", "config.data.train_limit=12",
                        "config.batch_size=4",
                        "config.data.val_limit=4", "config.data.test_limit=4", "config.eval.cosqa=false"],
        # a queue of past code embeddings (core.negatives.paired): every rank holds the same queue, rank r's share
        # queue[r::2] joins its candidates, so the gathered candidates hold each queued key once
        "code_search_queue": ["code_search/reduced_infonce", f"config.data.folder={mined}", "config.data.train_limit=12",
                              "config.batch_size=4", "config.negatives={name: queue, size: 8}",
                              "config.data.val_limit=4", "config.data.test_limit=4", "config.eval.cosqa=false"],
        "image_ssl": ["image_ssl/reduced_infonce", "config.batch_size=8", "config.data.train_subset=30",
                      "config.data.test_subset=10", "config.model.width=8", "config.model.proj_hidden=16"],
        "image_text": ["image_text/reduced_text_image_negatives", "config.data.limit=40", "config.batch_size=8",
                       f"config.cache_dir={tmp / 'clip_cache'}", "config.model.architecture=tiny-clip-test",
                       f"config.model.model_config={clip}", "config.model.image_size=32"],
        "metric_learning": ["metric_learning/cub200_multi_similarity", f"run.data_root={cub}",
                            "config.model.pretrained=false", "config.data.image_size=32", "config.data.val_fraction=0.25",
                            "config.sampler.m_per_class=3", "config.batch_size=6"],
        "super_resolution": ["super_resolution/reduced_x2_pcl", "config.batch_size=4", "config.data.steps_per_epoch=3",
                             "config.data.max_train_images=12", "config.model.n_resblocks=1", "config.model.n_feats=8",
                             "config.test_sets=[Set5]"],
        "translation": ["translation/reduced_cut_emoji", *TINY, "config.batch_size=2", "config.data.steps_per_epoch=3",
                        f"config.data.cache_dir={tmp / 'emoji_cache'}"],
    }


def _run(args: list[str], env: dict, cwd: Path, timeout: int = 400) -> None:
    out = subprocess.run(args, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stderr[-4000:]


def _train(tmp: Path) -> Path:
    """Every domain's 3 steps in one process, then in two, into ``tmp``."""
    common = ["run.epochs=3", "run.max_steps=3", "run.precision=fp32", f"run.data_root={DATA}"]  # a domain's own run.data_root wins
    specs = [f"{name}={'|'.join([args[0], *common, *args[1:]])}" for name, args in _specs(tmp).items()]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    _run([sys.executable, str(WORKER), str(tmp), "--rank-invariant-layers", *specs], env, ROOT)
    _run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(WORKER), str(tmp),
          "--rank-invariant-layers", *specs], env, ROOT)
    return tmp


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The runs, made once per test run: under pytest-xdist the first worker to need them trains them into the run's
    shared temporary folder while the others wait on its lock, then all read them (each worker would otherwise
    train them all again, two minutes of both cores)."""
    if "PYTEST_XDIST_WORKER" not in os.environ:  # one process runs the tests
        return _train(tmp_path_factory.mktemp("ranks"))
    from filelock import FileLock

    tmp = tmp_path_factory.getbasetemp().parent / "ranks"
    with FileLock(f"{tmp}.lock"):
        if not (tmp / "done").is_file():
            shutil.rmtree(tmp, ignore_errors=True)  # a worker that failed here left a part
            tmp.mkdir()
            _train(tmp)
            (tmp / "done").touch()
    return tmp


ADAM_NOISE = 1e-3
"""Absolute parameter tolerance: Adam's first steps move every element by about ``lr`` whatever its
gradient's size (``m / sqrt(v)`` is ``sign(g)``), so an element whose gradient is rounding noise moves
``+-lr`` at random; 2 x lr x 3 steps at the largest learning rate here (2e-4) is 1.2e-3."""

NOISE_AMPLIFIED = {"super_resolution": "discriminator"}
"""Domains whose optimizer's gradients are compared at its first step only: PCL-SR's D loss is
invariant to a shift of all logits, so D's head bias has a gradient of rounding noise, which Adam turns
into a step of +-lr (see ``ADAM_NOISE``); later D gradients then differ by the effect of that step."""


def _gap(a: dict, b: dict) -> tuple[float, float]:
    """(max |a - b|, max |a|) over all entries."""
    return (max(float((v - b[k]).abs().max()) for k, v in a.items()), max(float(v.abs().max()) for v in a.values()))


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.parametrize("domain", ["code_search", "code_search_queue", "image_ssl", "image_text", "metric_learning", "super_resolution", "translation"])
def test_two_processes_end_with_the_one_process_parameters(trained, domain):
    one, two = (torch.load(trained / w / domain / "checkpoints" / "last.pt", weights_only=True) for w in ("w1", "w2"))
    assert one["position"]["global_step"] == two["position"]["global_step"] == 3
    g1, g2 = (torch.load(trained / w / domain / "gradients.pt", weights_only=True) for w in ("w1", "w2"))
    assert len(g1) == len(g2) >= 3  # every optimizer step of the 3 training steps
    seen: set[str] = set()
    for a, b in zip(g1, g2):
        assert a.keys() == b.keys()
        optimizer = next(iter(a)).split(":")[0]
        if optimizer == NOISE_AMPLIFIED.get(domain) and optimizer in seen:
            continue
        seen.add(optimizer)
        gap, scale = _gap(a, b)
        assert scale > 0 and gap <= 1e-3 * scale, (optimizer, gap, scale)  # the same gradient, up to rounding
    for module, state in one["modules"].items():
        floats = {k: v for k, v in state.items() if v.is_floating_point()}
        if floats:
            gap, _ = _gap(floats, {k: two["modules"][module][k] for k in floats})
            assert gap <= ADAM_NOISE, (module, gap)
