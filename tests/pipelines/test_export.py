"""``contrasuite export`` as the engine runs it: which runs it refuses, what a bad checkpoint leaves, the listing."""

from pathlib import Path

import pytest

from contrasuite.pipelines import trainer
from contrasuite.pipelines.catalog import export_formats, listing
from contrasuite.pipelines.cli import main
from contrasuite.pipelines.config import load_config
from contrasuite.pipelines.registry import TASKS

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def test_every_domain_declares_its_formats_and_list_shows_them():
    formats = export_formats()
    assert set(formats) == set(TASKS)
    assert all(formats[d] and all(isinstance(v, str) and v for v in formats[d].values()) for d in formats)
    text = listing()
    assert "export formats (contrasuite export RUN_DIR --format F --out DIR):" in text
    assert f"super_resolution   {' '.join(formats['super_resolution'])}" in text


def test_a_task_without_an_export_and_a_bad_checkpoint_are_refused_in_one_line(toy_yaml, tmp_path, capsys):
    run_dir = trainer.train(load_config(toy_yaml(run={"max_steps": 2})))
    assert main(["export", str(run_dir), "--format", "onnx", "--out", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "has no export" in err and "super_resolution" in err
    assert not (tmp_path / "a").exists()
    assert main(["export", str(tmp_path / "nowhere"), "--format", "onnx", "--out", str(tmp_path / "b")]) == 2
    assert "not a run folder" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:  # argparse: RUN_DIR and --out missing
        main(["export", "--format", "onnx"])
    assert exit_info.value.code == 2


def test_a_truncated_checkpoint_writes_nothing(tmp_path, capsys):
    from contrasuite.domains.super_resolution.networks import EDSR
    from contrasuite.pipelines.checkpoint import REQUIRED_KEYS, atomic_save
    from contrasuite.pipelines.config import save_resolved

    loaded = load_config(CONFIGS / "super_resolution" / "reduced_x2_l1.yaml", ["config.model.n_resblocks=1"])
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    save_resolved(loaded.resolved, run_dir / "config.yaml")
    best = run_dir / "checkpoints" / "best.pt"
    atomic_save({key: {} for key in REQUIRED_KEYS} | {"modules": {"generator": EDSR(2, 1).state_dict()}}, best)
    assert main(["export", str(run_dir), "--format", "onnx", "--out", str(tmp_path / "ok")]) == 0
    best.write_bytes(best.read_bytes()[:100])
    assert main(["export", str(run_dir), "--format", "onnx", "--out", str(tmp_path / "out")]) == 2
    assert "incomplete or altered" in capsys.readouterr().err
    assert not (tmp_path / "out").exists() and not any(p.name.startswith(".") for p in tmp_path.iterdir())
