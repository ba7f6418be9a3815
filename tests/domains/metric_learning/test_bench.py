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
    # ours channels-last with its 5x5 depthwise weight gradients summed by windows; the peer on NCHW batches does not
    assert record["ours_layout"] == "channels_last" and record["ours_depthwise_grad"] == "window_sums"
    assert "_DepthwiseConvBackward" in record["profile"]["ours"]["ops"]
    assert "_DepthwiseConvBackward" not in record["profile"]["peer"]["ops"]
    (row,) = record["rounds"]
    assert row["ours_cpu_s"] > 0 and row["peer_cpu_s"] > 0 and row["ratio"] == record["ratio_median"]
    assert record["loss_check"]["equal"], record["loss_check"]  # the same loss: the two do the same work
    assert bench.main(["--report", "--output", str(out), "--page", str(page)]) == 0
    assert bench.main(["--report", "--output", str(out), "--page", str(page)]) == 0  # replaces its section
    text = page.read_text()
    assert text.count("<!-- section:metric_learning -->") == 1 and f"{record['ratio_median']:.2f}" in text
    assert record["ours_optimizer"] == "fused" and "AdamW (ours on PyTorch's fused kernel" in text
    assert "The operators of the engine's checks" in text and "| all operators |" in text
    assert "weight gradients are summed window by window" in text and "window-summed depthwise" in text



def test_to_checkpoint_alternates_our_training_with_the_peers_loop_to_the_same_step(emoji_root, cache_dir, tmp_path):
    out, page = tmp_path / "ml.json", tmp_path / "page.md"
    overrides = ["config.data.max_classes=8", "config.batch_size=8", f"config.data.cache_dir={cache_dir}", "run.epochs=2"]
    assert bench.main(["--against", "peer", "--batches", "1", "--steps", "1", "--repeats", "2", "--threads", "1",
                       "--data-root", str(emoji_root), "--output", str(out), "--to-checkpoint",
                       *(f"--override={o}" for o in overrides)]) == 0
    trained = json.loads(out.read_text())["to_checkpoint"]
    assert trained["command"] == ("contrasuite train configs/metric_learning/emoji_multi_similarity.yaml "
                                  + " ".join([*overrides, "run.device=cpu", "run.precision=fp32"]))
    # validation every epoch selects the best of the two epochs' ends (run.best_metric: recall@1)
    assert trained["checkpoint"] == "best" and 0 < trained["selected_step"] <= trained["steps_run"]
    assert trained["steps_run"] % 2 == 0 and len(trained["rounds"]) == 2
    for row in trained["rounds"]:  # the peer's hand loop: epoch ends that do nothing
        assert row["ours_cpu_s"] > 0 and row["peer_cpu_s"] > 0 and row["peer_epoch_ends"]["bytes"] == 0
    assert bench.main(["--report", "--output", str(out), "--page", str(page)]) == 0
    text = page.read_text()
    assert f"at step {trained['selected_step']:,} of {trained['steps_run']:,}" in text and "over the 2 rounds" in text
