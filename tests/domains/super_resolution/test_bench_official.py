"""``contrasuite bench super_resolution --against official`` at tiny sizes, and ``--report`` of the kept records.

The end-to-end tests need the official PCL-SISR export (``docs/results/records/official/pcl_sisr/
export_pcl_sisr.sh``; ``$CONTRASUITE_PCL_SISR`` or ``/tmp/official/pcl_sisr``) and the SR data; they skip without.
"""

import json
import os
from pathlib import Path

import pytest

from contrasuite.domains.super_resolution import bench

OFFICIAL = Path(os.environ.get("CONTRASUITE_PCL_SISR", bench.OFFICIAL))
TINY = ["--device", "cpu", "--batches", "1", "--steps", "1", "--repeats", "1", "--threads", "1",
        "--override", "config.data.max_train_images=20", "--override", "config.data.patch_size=8",
        "--override", "config.batch_size=2", "--override", "config.model.n_resblocks=2",
        "--override", "config.model.n_feats=8"]


@pytest.fixture
def official() -> Path:
    if not (OFFICIAL / "src" / "option.py").is_file():
        pytest.skip(f"no official PCL-SISR export at {OFFICIAL} "
                    "(docs/results/records/official/pcl_sisr/export_pcl_sisr.sh makes it)")
    return OFFICIAL


@pytest.mark.parametrize("mode", ["l1", "pcl"])
def test_against_official_runs_both_steps_from_the_same_weights_and_renders(mode, official, sr_data_root, tmp_path):
    out, page = tmp_path / "sr.json", tmp_path / "page.md"
    args = ["--against", "official", "--official", str(official), "--modes", mode, "--precisions", "fp32",
            "--data-root", str(sr_data_root), "--output", str(out), "--page", str(page), *TINY,
            *(["--profile"] if mode == "pcl" else ["--to-checkpoint", "--override", "config.data.steps_per_epoch=3"])]
    assert bench.main(args) == 0
    record = json.loads(out.read_text())
    assert record["section"] == "super_resolution" and record["against"] == "official"
    (c,) = record["comparisons"]
    assert c["mode"] == mode and c["precision"] == c["official_precision"] == "fp32" and c["device"] == "cpu"
    assert c["loss_check"]["equal"], c["loss_check"]  # the same L1 from the same weights on the same batch
    assert c["ours_parameters"]["generator"] == c["official_parameters"]["generator"]
    (row,) = c["rounds"]
    assert row["ours_cpu_s"] > 0 and row["peer_cpu_s"] > 0 and row["ratio"] == c["ratio_median"]
    if mode == "pcl":  # the official discriminator's convolutions have no bias: 1,920 fewer parameters
        assert c["ours_parameters"]["discriminator"] - c["official_parameters"]["discriminator"] == 1920
        assert c["profile"]["ours"]["top"] and c["profile"]["peer"]["top"]
    else:  # reduced_x2_l1 for 2 epochs of 3 steps, against the official run with its epoch ends to the same step
        t = c["to_checkpoint"]
        assert t["command"].startswith("contrasuite train super_resolution/reduced_x2_l1 run.epochs=2")
        assert t["steps_run"] == 6 and t["selected_step"] in (3, 6)
        (row,) = t["rounds"]
        ends = row["peer_epoch_ends"]  # Trainer.test() and checkpoint.save at each: model, optimizer, logs, plots
        assert ends["count"] == t["selected_step"] // 3 and ends["cpu_s"] > 0 and ends["bytes"] > 0
        assert row["ours_cpu_s"] > 0 and row["peer_cpu_s"] > ends["cpu_s"]
    for _ in range(2):  # the second replaces the section
        assert bench.main(["--report", "--output", str(out), "--page", str(page)]) == 0
    text = page.read_text()
    assert text.count("<!-- section:super_resolution -->") == 1 and f"{c['ratio_median']:.2f}" in text
    assert ("To the checkpoint it selects" in text) == (mode == "l1")


def test_a_missing_export_is_a_one_line_error(tmp_path, capsys):
    assert bench.main(["--against", "official", "--official", str(tmp_path / "none")]) == 2
    assert "export_pcl_sisr.sh" in capsys.readouterr().err


def test_report_renders_every_kept_record(tmp_path):
    kept = sorted(bench.RECORDS.glob("super_resolution_official*.json"))
    if not kept:
        pytest.skip("no kept super_resolution_official record")
    page = tmp_path / "page.md"
    assert bench.main(["--report", "--page", str(page)]) == 0
    text = page.read_text()
    for path in kept:
        record = json.loads(path.read_text())
        assert f"<!-- section:{record['section']} -->" in text
        assert all(f"**{c['ratio_median']:.2f}** median" in text for c in record["comparisons"])
