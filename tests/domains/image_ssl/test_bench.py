"""``contrasuite bench image_ssl --against peer`` on a tiny CIFAR: one step per side, a record with both."""

import json

import pytest

pytest.importorskip("lightly.loss")

from contrasuite.domains.image_ssl import bench


def test_against_peer_writes_a_record_with_both_timings_and_equal_first_losses(tiny_cifar, tmp_path):
    out, page = tmp_path / "ssl.json", tmp_path / "page.md"
    argv = ["--against", "peer", "--batch", "8", "--subset", "20", "--batches", "1", "--steps", "1", "--repeats", "1",
            "--threads", "1", "--data-root", str(tiny_cifar), "--override", "config.data.source=python",
            "--override", "config.data.test_subset=10", "--output", str(out), "--profile"]
    assert bench.main(argv) == 0
    record = json.loads(out.read_text())
    assert record["batch"] == 8 and record["encoder"] == "resnet18_cifar" and record["precision"] == "fp32"
    assert "aten::_foreach_norm" in record["profile"]["ours"]["ops"]  # the engine's checks, ours only
    (row,) = record["rounds"]
    assert row["ours_cpu_s"] > 0 and row["peer_cpu_s"] > 0 and row["ratio"] == record["ratio_median"]
    assert record["loss_check"]["equal"], record["loss_check"]  # same weights, views and loss: the same work
    assert record["ours_layout"] == "channels_last" and "channels-last weights" in record["ours"]  # memory_format auto
    assert bench.main(["--report", "--output", str(out), "--page", str(page)]) == 0
    text = page.read_text()
    assert "<!-- section:image_ssl -->" in text and f"**{record['ratio_median']:.2f}**" in text
    assert "The operators of the engine's checks" in text and "| all operators |" in text
    # the compute bound: the convolutions' FLOPs (forward and backward) over the fp32 matmul peak, rendered
    flop = record["compute"]["flop_by_op"]
    assert flop["aten.convolution_backward"] > flop["aten.convolution"]
    assert "Compute bound" in text and "x the peer's speed" in text


def test_ours_as_built_is_named_and_keeps_the_same_first_loss(tiny_cifar, tmp_path):
    out = tmp_path / "ssl.json"
    argv = ["--batch", "8", "--subset", "20", "--batches", "1", "--steps", "1", "--repeats", "1", "--threads", "1",
            "--data-root", str(tiny_cifar), "--override", "config.data.source=python", "--override",
            "config.data.test_subset=10", "--override", "run.memory_format=contiguous", "--output", str(out)]
    assert bench.main(argv) == 0
    record = json.loads(out.read_text())
    assert record["ours_layout"] == "contiguous" and "channels-last" not in record["ours"] and record["levers"] == []
    assert record["ours_optimizer"] == "fused"  # the pipeline's default SGD kernel, not a lever
    assert record["loss_check"]["equal"], record["loss_check"]  # a memory format changes no value beyond rounding


def test_to_checkpoint_trains_the_reduced_config_against_lightlys_loop_to_the_same_step(tiny_cifar, tmp_path):
    out, page = tmp_path / "ssl.json", tmp_path / "page.md"
    shrink = ["config.data.source=python", "config.data.test_subset=10", "config.data.train_subset=24",
              "config.batch_size=8", "run.epochs=2"]
    argv = ["--batch", "8", "--subset", "24", "--batches", "1", "--steps", "1", "--repeats", "2", "--threads", "1",
            "--data-root", str(tiny_cifar), *[a for o in shrink for a in ("--override", o)], "--to-checkpoint",
            "--output", str(out)]
    assert bench.main(argv) == 0
    t = json.loads(out.read_text())["to_checkpoint"]
    assert t["command"].startswith("contrasuite train configs/image_ssl/reduced_infonce.yaml")
    assert t["checkpoint"] == "last" and t["selected_step"] == t["steps_run"] == 6  # 2 epochs of 24 / 8 batches
    for row in t["rounds"]:  # the peer's plain loop: 2 epoch ends doing nothing
        assert row["ours_cpu_s"] > 0 and row["peer_cpu_s"] > 0
        assert row["peer_epoch_ends"]["count"] == 2 and row["peer_epoch_ends"]["bytes"] == 0
    assert bench.main(["--report", "--output", str(out), "--page", str(page)]) == 0
    assert "To the checkpoint it selects" in page.read_text()
