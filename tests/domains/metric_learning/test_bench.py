"""``contrasuite bench metric_learning --against peer`` on a tiny setting: one step per side, a record with both."""

import json

import pytest

pytest.importorskip("pytorch_metric_learning")

from contrasuite.domains.metric_learning import bench


def test_against_peer_writes_a_record_with_both_timings_and_equal_first_losses(emoji_root, cache_dir, tmp_path):
    out, page = tmp_path / "ml.json", tmp_path / "page.md"
    args = ["--against", "peer", "--batches", "1", "--steps", "1", "--repeats", "1", "--threads", "1",
            "--data-root", str(emoji_root), "--override", "config.data.max_classes=8",
            "--override", "config.batch_size=8", "--override", f"config.data.cache_dir={cache_dir}",
            "--output", str(out), "--profile"]
    assert bench.main(args) == 0
    record = json.loads(out.read_text())
    assert record["batch"] == 8 and record["precision"] == "fp32"
    assert "aten::_foreach_norm" in record["profile"]["ours"]["ops"]  # the engine's checks, ours only
    (row,) = record["rounds"]
    assert row["ours_cpu_s"] > 0 and row["peer_cpu_s"] > 0 and row["ratio"] == record["ratio_median"]
    assert record["loss_check"]["equal"], record["loss_check"]  # the same loss: the two do the same work
    assert bench.main(["--report", "--output", str(out), "--page", str(page)]) == 0
    assert bench.main(["--report", "--output", str(out), "--page", str(page)]) == 0  # replaces its section
    text = page.read_text()
    assert text.count("<!-- section:metric_learning -->") == 1 and f"{record['ratio_median']:.2f}" in text
    assert "The operators of the engine's checks" in text and "| all operators |" in text


def test_the_fused_adamw_lever_is_named_and_gets_its_own_section(emoji_root, cache_dir, tmp_path):
    out, page = tmp_path / "ml.json", tmp_path / "page.md"
    args = ["--batches", "1", "--steps", "1", "--repeats", "1", "--data-root", str(emoji_root), "--fused-adamw",
            "--override", "config.data.max_classes=8", "--override", "config.batch_size=8",
            "--override", f"config.data.cache_dir={cache_dir}", "--output", str(out)]
    assert bench.main(args) == 0
    record = json.loads(out.read_text())
    assert record["section"] == "metric_learning+fused_adamw" and record["levers"] == ["fused AdamW"]
    assert record["loss_check"]["equal"]  # the first step's loss is taken before the optimizer acts
    assert bench.main(["--report", "--output", str(out), "--page", str(page)]) == 0
    assert "<!-- section:metric_learning+fused_adamw -->" in page.read_text()
