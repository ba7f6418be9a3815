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
