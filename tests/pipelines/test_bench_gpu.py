"""``contrasuite bench gpu`` runs through on the CPU at tiny sizes, so it runs in one go the day a GPU is lent."""

import json
import os
from pathlib import Path

import pytest

from contrasuite.pipelines.bench.gpu import main


def test_bench_gpu_on_the_cpu_writes_its_json_and_page(tmp_path):
    if not (Path(os.environ["CONTRASUITE_DATA"]) / "cifar10").is_dir():
        pytest.skip("needs CIFAR-10 under $CONTRASUITE_DATA")
    args = ["--device", "cpu", "--dense-n", "32", "--n", "256", "--repeats", "1", "--tile-size", "64", "--steps", "3",
            "--subset", "--configs", "image_ssl/reduced_infonce", "--out-dir", str(tmp_path)]
    assert main(args) == 0
    result = json.loads((tmp_path / "bench_gpu.json").read_text())
    assert result["process_group"] == {**result["process_group"], "backend": "gloo", "all_reduce_ok": True}
    kinds = {(r["kind"], r["precision"]) for r in result["objectives"]}
    assert kinds == {("dense", "bf16"), ("dense", "fp32"), ("tiled", "bf16"), ("tiled", "fp32")}
    pipes = result["pipelines"]
    assert [(r["config"], r["precision"], r["state"]) for r in pipes] == [
        ("image_ssl/reduced_infonce", "bf16", "ok"), ("image_ssl/reduced_infonce", "fp32", "ok")]
    assert all(r["steps"] == 3 and r["steps_per_second"] > 0 for r in pipes)
    page = (tmp_path / "bench_gpu.md").read_text()
    assert page.startswith("# `contrasuite bench gpu` on") and "| image_ssl/reduced_infonce | bf16 | ok |" in page


def test_no_cuda_is_a_clear_refusal(capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    assert main(["--device", "cuda"]) == 2
    assert "no CUDA device here" in capsys.readouterr().err
