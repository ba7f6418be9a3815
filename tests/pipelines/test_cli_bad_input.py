"""End to end: ``contrasuite`` as a user runs it, on bad input, exits 2 with a short stderr naming the culprit."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(os.environ["CONTRASUITE_DATA"])


def _cli(args, env, cwd):
    out = subprocess.run([sys.executable, "-m", "contrasuite.pipelines.cli", *map(str, args)], env=env, cwd=cwd,
                         capture_output=True, text=True, timeout=300)
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    return out.returncode, lines


def _assert_refused(code, lines, *named):
    assert code == 2, lines
    assert 1 <= len(lines) <= 3, lines
    assert all(any(n in line for line in lines) for n in named), (named, lines)


def test_bad_config_value(cli_env, tmp_path):
    config = ROOT / "configs" / "image_ssl" / "reduced_infonce.yaml"
    code, lines = _cli(["train", config, "config.batch_size=0"], cli_env, tmp_path)
    _assert_refused(code, lines, "reduced_infonce.yaml", "config.batch_size")


def test_a_moved_key(cli_env, tmp_path):
    config = ROOT / "configs" / "code_search" / "reduced_infonce.yaml"
    code, lines = _cli(["train", config, "config.optim.warmup_steps=4"], cli_env, tmp_path)
    _assert_refused(code, lines, "config.optim.warmup_steps moved: use config.optim.warmup: {steps: N}")
    assert len(lines) == 1, lines


def test_missing_and_truncated_data(cli_env, tmp_path):
    config = ROOT / "configs" / "image_ssl" / "reduced_infonce.yaml"
    code, lines = _cli(["train", config, "--data-root", tmp_path / "nowhere", "config.data.download=false",
                        f"run.output_root={tmp_path / 'runs'}"], cli_env, tmp_path)
    _assert_refused(code, lines, str(tmp_path / "nowhere"))
    archive = DATA / "emoji" / "emoji-twitter-64.tar.gz"
    if not archive.is_file():
        pytest.skip("needs the emoji archives under $CONTRASUITE_DATA/emoji")
    root = tmp_path / "root"
    (root / "emoji").mkdir(parents=True)
    for f in (DATA / "emoji").iterdir():
        data = f.read_bytes()
        (root / "emoji" / f.name).write_bytes(data[: len(data) // 3] if f.name == archive.name else data)
    config = ROOT / "configs" / "metric_learning" / "emoji_multi_similarity.yaml"
    code, lines = _cli(["train", config, "--data-root", root, f"config.data.cache_dir={tmp_path / 'cache'}",
                        f"run.output_root={tmp_path / 'runs'}"], cli_env, tmp_path)
    _assert_refused(code, lines, "emoji-twitter-64.tar.gz", "corrupt or truncated archive")


def test_corrupt_checkpoint_on_resume_and_eval(toy_yaml, cli_env, tmp_path):
    from contrasuite.pipelines import trainer
    from contrasuite.pipelines.config import load_config

    run_dir = trainer.train(load_config(toy_yaml(run={"epochs": 2}), ["run.max_steps=2"]))
    last = run_dir / "checkpoints" / "last.pt"
    last.write_bytes(last.read_bytes()[:1000])
    code, lines = _cli(["resume", run_dir, "run.max_steps=null"], cli_env, tmp_path)
    _assert_refused(code, lines, "last.pt", "incomplete or altered")
    (run_dir / "checkpoints" / "best.pt").write_bytes(b"\x00" * 64)
    code, lines = _cli(["eval", run_dir], cli_env, tmp_path)
    _assert_refused(code, lines, "best.pt")


def test_bad_image_for_upscale(cli_env, tmp_path):
    from contrasuite.domains.super_resolution.networks import EDSR
    from contrasuite.pipelines.checkpoint import REQUIRED_KEYS, atomic_save
    from contrasuite.pipelines.config import load_config, save_resolved

    loaded = load_config(ROOT / "configs" / "super_resolution" / "reduced_x2_l1.yaml",
                         ["config.model.n_resblocks=1", "config.model.n_feats=4"])
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    save_resolved(loaded.resolved, run_dir / "config.yaml")
    model = EDSR(scale=2, n_resblocks=1, n_feats=4)
    atomic_save({k: {} for k in REQUIRED_KEYS} | {"modules": {"generator": model.state_dict()}},
                run_dir / "checkpoints" / "best.pt")
    bad = tmp_path / "photo.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(40))  # a PNG signature, then nothing usable
    code, lines = _cli(["upscale", run_dir, bad, tmp_path / "out.png"], cli_env, tmp_path)
    _assert_refused(code, lines, "photo.png", "not a readable image")
    assert torch.load(run_dir / "checkpoints" / "best.pt", weights_only=True)  # nothing lost
