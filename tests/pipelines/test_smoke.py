"""``contrasuite smoke``: a config builds its real model and data and takes two CPU steps; on several processes the
ranks agree on each outcome. The sweep of every shipped config is ``test_shipped_configs_on_two_processes.py``."""

import dataclasses
import io
import json
import os
from pathlib import Path

import pytest

from contrasuite.pipelines.config import config_root
from contrasuite.pipelines.registry import known_tasks, resolve_task
from contrasuite.pipelines.smoke import SmokeResult, agreed, full_scale_configs, main
from tests.two_ranks import spawn_two

DATA = Path(os.environ["CONTRASUITE_DATA"])


def test_full_scale_configs_leave_out_reduced_protocols_and_fragments():
    names = {str(p.relative_to(config_root())) for p in full_scale_configs()}
    assert {"image_ssl/infonce.yaml", "graph/meow_acm.yaml", "super_resolution/edsr_baseline_x2_pcl.yaml",
            "metric_learning/emoji_full.yaml", "image_text/full_text_image_negatives.yaml"} <= names
    assert not any(n.startswith(("image_ssl/reduced", "graph/reduced/", "image_ssl/base/", "graph/datasets/"))
                   for n in names)


def test_every_task_keeps_its_batch_at_config_batch_size_or_says_it_has_none():
    """The smoke run sets config.batch_size of every task but a full-batch one (no key path per task)."""
    for name in known_tasks():
        task = resolve_task(name)
        settings = getattr(task, "smoke", None)
        has_batch = "batch_size" in {f.name for f in dataclasses.fields(task.config_class)}
        assert settings is not None and has_batch != settings.full_batch, name


def test_one_config_reports_its_model_and_an_estimate(tmp_path, capfd):
    if not (DATA / "cifar10").is_dir():
        pytest.skip("needs CIFAR-10 under $CONTRASUITE_DATA")
    out = tmp_path / "smoke.json"
    assert main(["image_ssl/infonce", "--json", str(out)]) == 0
    (row,) = json.loads(out.read_text())
    assert row["state"] == "ok" and row["steps"] == 2 and row["smoke_batch"] == 8 and row["live_batch"] == 512
    assert 11e6 < row["params"] < 12e6  # ResNet-18 (CIFAR stem) + projection head: the real model
    assert row["step_peak_bytes"] > 0 and row["estimate_bytes"] > row["params"] * 4 * 3  # weights, grads, momentum
    out, err = capfd.readouterr()
    assert "ok   image_ssl/infonce: 11.50M params, 2 steps" in out
    assert "USDT" not in err and "Memory block of unknown size" not in err  # the profiler's noise (pipelines/noise.py)


def test_an_outcome_is_agreed_over_the_ranks():
    ok = SmokeResult("image_ssl/moco", "ok", params=5, step_peak_bytes=10, estimate_bytes=30)
    assert agreed([ok, SmokeResult("image_ssl/moco", "ok", step_peak_bytes=20, estimate_bytes=3)]) == SmokeResult(
        "image_ssl/moco", "ok", params=5, step_peak_bytes=20, estimate_bytes=30)
    diverged = agreed([ok, SmokeResult("image_ssl/moco", "FAIL", note="RanksDivergedError: differ in ['model']")])
    assert (diverged.state, diverged.note) == ("FAIL", "rank 1: RanksDivergedError: differ in ['model']")
    skipped = agreed([ok, SmokeResult("image_ssl/moco", "skip", note="data not on this machine: cifar10")])
    assert (skipped.state, skipped.note) == ("FAIL", "rank 1: skip here but ok on rank 0 (data not on this machine: cifar10)")
    assert agreed([SmokeResult("x", "FAIL", note="ValueError: bad")]).note == "ValueError: bad"  # one process: no rank


def test_missing_data_is_a_skip_not_a_failure_but_checking_nothing_is(tmp_path, capsys):
    assert main(["image_ssl/infonce", "--data-root", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "skip image_ssl/infonce: data not on this machine:" in out and "0 failed" in out
    assert out.splitlines()[-1] == "smoke: nothing was checked: no config's data is on this machine (--data-root, $CONTRASUITE_DATA)"


def _emoji_root_with_bad_google_set(root: Path, how: str) -> Path:
    """A copy of the emoji data root whose Noto (google) archive is truncated, or holds PNGs that do not decode."""
    import tarfile

    source = DATA / "emoji"
    target = root / "emoji"
    target.mkdir(parents=True)
    for name in ("categories.json", "emoji.json", "emoji-twitter-64.tar.gz"):
        (target / name).symlink_to(source / name)
    google = source / "emoji-google-64.tar.gz"
    if how == "truncated archive":
        (target / google.name).write_bytes(google.read_bytes()[: 1 << 20])
        return root
    with tarfile.open(google) as good, tarfile.open(target / google.name, "w:gz") as bad:
        for member in good.getmembers():
            if member.isfile():
                member.size = 7
                bad.addfile(member, io.BytesIO(b"not png"))
            else:
                bad.addfile(member)
    return root


@pytest.mark.parametrize("how", ["truncated archive", "undecodable images"])
def test_unreadable_data_fails_instead_of_skipping(tmp_path, capsys, monkeypatch, how):
    if not (DATA / "emoji").is_dir():
        pytest.skip("needs the emoji archives under $CONTRASUITE_DATA")
    monkeypatch.setenv("CONTRASUITE_CACHE", str(tmp_path / "cache"))
    root = _emoji_root_with_bad_google_set(tmp_path / "data", how)
    assert main(["metric_learning/emoji_full", "--data-root", str(root), "--precision", "fp32"]) == 1
    out = capsys.readouterr().out
    assert "FAIL metric_learning/emoji_full: bad data:" in out and "google-64" in out
    assert "0 ok, 0 skipped (data not here), 1 failed" in out


def _smoke_rank(rank: int, port: int, out: Path, wrap: bool) -> None:
    """One rank of a two-process ``contrasuite smoke`` (what torchrun would set up); without ``wrap`` the model
    is not wrapped by DDP, so its gradients are not averaged and the ranks' parameters drift apart."""
    import contextlib

    from contrasuite.pipelines import distributed

    os.environ.update(RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if not wrap:
        distributed.wrap_module = lambda module, device: module
    with open(out / f"stdout-{rank}.txt", "w") as stdout, contextlib.redirect_stdout(stdout):
        code = main(["image_ssl/reduced_infonce", "--precision", "fp32", "--threads", "1", "--json", str(out / f"rank{rank}.json")])
    (out / f"exit-{rank}").write_text(str(code))


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.parametrize("wrap", [True, False], ids=["in sync", "diverged"])
def test_on_two_processes_rank_zero_reports_and_ranks_that_drift_apart_fail(tmp_path, wrap):
    """The run's final checkpoint save compares the ranks' parameters: a smoke run reaches it, and a model whose
    gradients are not averaged is FAIL on both ranks; rank 0 alone prints and writes the JSON."""
    if not (DATA / "cifar10").is_dir():
        pytest.skip("needs CIFAR-10 under $CONTRASUITE_DATA")
    spawn_two(_smoke_rank, tmp_path, wrap)
    (row,) = json.loads((tmp_path / "rank0.json").read_text())
    assert not (tmp_path / "rank1.json").exists() and (tmp_path / "stdout-1.txt").read_text() == ""
    assert [(tmp_path / f"exit-{r}").read_text() for r in range(2)] == (["0", "0"] if wrap else ["1", "1"])
    if wrap:
        assert row["state"] == "ok" and row["processes"] == 2 and row["smoke_batch"] == 8
    else:
        assert row["state"] == "FAIL" and "the ranks' parameters differ in ['model']" in row["note"], row
        assert "FAIL image_ssl/reduced_infonce: rank 0: RanksDivergedError" in (tmp_path / "stdout-0.txt").read_text()
