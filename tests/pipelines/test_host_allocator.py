"""``run.host_allocator``: which runs retain freed memory, and that retaining removes a step's page faults."""

import json
import subprocess
import sys

import pytest
import torch

from contrasuite.pipelines import trainer
from contrasuite.pipelines.config import load_config
from contrasuite.pipelines.host_allocator import wants_retain

CPU, CUDA = torch.device("cpu"), torch.device("cuda")
glibc = pytest.mark.skipif(not wants_retain("retain", CPU), reason="mallopt is glibc's")

# twelve "steps" of a convolution on 16 MiB activations; prints the page faults of the last ten
STEPS = """
import sys, torch
from contrasuite.pipelines.host_allocator import page_faults, use_host_allocator
use_host_allocator(sys.argv[1], torch.device("cpu"))
torch.set_num_threads(1)
x, w = torch.randn(64, 64, 32, 32), torch.randn(64, 64, 3, 3)
counts = []
for _ in range(12):
    before = page_faults()
    torch.nn.functional.conv2d(torch.relu(x), w, padding=1).sum()
    counts.append(page_faults() - before)
print(sum(counts[2:]))
"""


@glibc
@pytest.mark.parametrize("setting, device, retains", [
    ("auto", CPU, True), ("auto", CUDA, False), ("retain", CUDA, True), ("system", CPU, False)])
def test_auto_retains_on_the_cpu_only(setting, device, retains):
    assert wants_retain(setting, device) is retains


@glibc
def test_retaining_removes_the_page_faults_of_a_repeated_large_allocation():
    def faults(setting: str) -> int:
        out = subprocess.run([sys.executable, "-c", STEPS, setting], capture_output=True, text=True, check=True)
        return int(out.stdout)

    pages = 10 * (16 << 20) // 4096  # one 16 MiB activation a step: 4,096 pages of 4 KiB
    assert faults("system") > pages  # trimmed or unmapped, then faulted in (and zeroed by the kernel) again
    # the heap's freed blocks, reused: at most a couple of blocks faulted in over the ten steps (once, on a loaded
    # machine, one block: exactly 0.1 of the pages), not one a step
    assert faults("auto") < 0.25 * pages


@glibc
@pytest.mark.parametrize("setting, said", [("auto", "retain"), ("system", "system")])
def test_a_cpu_run_says_where_its_memory_came_from(toy_yaml, setting, said):
    run_dir = trainer.train(load_config(toy_yaml(run={"max_steps": 1, "host_allocator": setting})))
    assert json.loads((run_dir / "environment.json").read_text())["host_allocator"] == said
