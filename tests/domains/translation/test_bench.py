"""``contrasuite bench translation``: the --setting mode, and --against official end to end at tiny size."""

import json
import os
from pathlib import Path

import pytest

from contrasuite.domains.translation import bench

TINY = ["config.data.crop_size=64", "config.data.load_size=72", "config.generator.ngf=8", "config.generator.n_blocks=4",
        "config.nce.layers=[0,4,8,12,15]", "config.nce.num_patches=16", "config.discriminator.ndf=8",
        "config.nce.head_dim=32"]


@pytest.fixture
def pair_root() -> Path:
    """The data root holding the single-image pair; skips when it is absent."""
    root = Path(os.environ.get("CONTRASUITE_DATA", "."))
    if not (root / bench.PAIR / "trainA").is_dir():
        pytest.skip(f"{bench.PAIR} not found under {root} (set CONTRASUITE_DATA)")
    return root


@pytest.fixture
def export() -> Path:
    """The official CUT export; skips when it is absent."""
    if not (bench.OFFICIAL / ".patched").is_file():
        pytest.skip(f"no official CUT export at {bench.OFFICIAL} (docs/results/records/official/cut/run_official_cut.sh "
                    "export makes it)")
    return bench.OFFICIAL


def test_the_setting_mode_times_real_crops(pair_root, tmp_path, capsys):
    out = tmp_path / "rows.json"
    assert bench.main(["--setting", "emoji_reduced", "--steps", "1", "--warmup", "0", "--precision", "fp32",
                       "--data-root", str(pair_root), "--json", str(out)]) == 0
    (row,) = json.loads(out.read_text())
    assert row["setting"] == "emoji_reduced" and row["it_per_s"] > 0 and bench.PAIR in row["images"]


def test_against_official_runs_end_to_end_and_its_record_renders(pair_root, export, tmp_path):
    record = tmp_path / "record.json"
    args = ["--against", "official", "--official", str(export), "--data-root", str(pair_root), "--device", "cpu",
            "--output", str(record), "--repeats", "2", "--batches", "2", "--profile"]
    assert bench.main([*args, *(f"--override={o}" for o in TINY)]) == 0
    data = json.loads(record.read_text())
    assert data["section"] == "translation" and data["against"] == "official" and data["threads"] == 1
    assert [v["mode"] for v in data["variants"]] == ["CUT", "FastCUT"]
    for v in data["variants"]:
        assert v["parameters"]["ours"] == v["parameters"]["official"]
        assert v["loss_check"]["equal"] and v["bf16"]["loss_check"]["equal"], v
        assert len(v["rounds"]) == 2 and all(r["ratio"] > 0 and r["ratio_bf16"] > 0 for r in v["rounds"])
        assert v["profile"]["ours"]["ops"] and v["profile"]["peer"]["ops"]
    rendered = tmp_path / "rendered.md"
    assert bench.main(["--against", "peer", "--report", "--output", str(record), "--page", str(rendered)]) == 0
    text = rendered.read_text()
    assert "<!-- section:translation -->" in text and "official fp32 / ours bf16 autocast" in text
    assert "Where the time goes" in text and "| `aten::mkldnn_convolution` |" in text


def test_against_official_refuses_a_missing_export_or_the_gan(pair_root, tmp_path):
    with pytest.raises(SystemExit) as missing:
        bench.main(["--against", "official", "--official", str(tmp_path), "--data-root", str(pair_root)])
    assert missing.value.code == 2
    with pytest.raises(SystemExit) as gan:
        bench.main(["--against", "official", "--variant", "gan", "--data-root", str(pair_root)])
    assert gan.value.code == 2


def test_against_official_refuses_a_config_the_official_code_cannot_express(pair_root, export, capsys):
    with pytest.raises(SystemExit) as ema:
        bench.main(["--against", "official", "--override", "config.ema=0.99", "--data-root", str(pair_root)])
    assert ema.value.code == 2 and "config.ema=0.99" in capsys.readouterr().err


def test_to_checkpoint_trains_reduced_cut_emoji_against_the_official_train_py_run(pair_root, export, tmp_path):
    pytest.importorskip("dominate", reason="the official train.py's Visualizer imports dominate (pip install dominate)")
    record = tmp_path / "record.json"
    shrink = [*TINY, "config.data.steps_per_epoch=1", "config.batch_size=2", "config.data.val_images=8",
              "config.data.test_images=8", "run.epochs=5", "run.eval_every_epochs=5",
              "config.optim.schedule.start.epochs=4", "config.optim.schedule.end.epochs=5"]
    args = ["--against", "official", "--official", str(export), "--data-root", str(pair_root), "--device", "cpu",
            "--output", str(record), "--repeats", "1", "--batches", "1", "--variant", "cut", "--to-checkpoint"]
    assert bench.main([*args, *(f"--override={o}" for o in shrink)]) == 0
    data = json.loads(record.read_text())
    t = data["to_checkpoint"]
    assert t["command"].startswith("contrasuite train translation/reduced_cut_emoji")
    assert t["selected_step"] == t["steps_run"] == 5  # one validation, after the fifth epoch of one step
    (row,) = t["rounds"]
    ends = row["peer_epoch_ends"]  # train.py's 5 epoch ends: the lr schedule, and at the fifth (--save_epoch_freq 5)
    assert ends["count"] == 5 and ends["bytes"] > 0  # the saves of G, D and F, latest and epoch 5
    assert row["ours_cpu_s"] > 0 and row["peer_cpu_s"] > 0
    rendered = tmp_path / "rendered.md"
    assert bench.main(["--against", "peer", "--report", "--output", str(record), "--page", str(rendered)]) == 0
    assert "To the checkpoint it selects" in rendered.read_text()


def test_to_checkpoint_without_dominate_is_a_one_line_error(pair_root, export, monkeypatch, capsys):
    find_spec = bench.importlib.util.find_spec
    monkeypatch.setattr(bench.importlib.util, "find_spec", lambda name: None if name == "dominate" else find_spec(name))
    with pytest.raises(SystemExit) as stop:
        bench.main(["--against", "official", "--data-root", str(pair_root), "--to-checkpoint"])
    assert stop.value.code == 2 and "pip install dominate" in capsys.readouterr().err
