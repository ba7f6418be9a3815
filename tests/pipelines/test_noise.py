"""The command's expected library noise is silenced in one place (``pipelines/noise.py``), and only that."""

import logging
import os
import subprocess
import sys

from contrasuite.pipelines.noise import _OnlyUnexpectedKeys

TOWERS = ("from contrasuite.domains.image_text.models import ModelConfig, pretrained_towers; "
          "pretrained_towers(ModelConfig())")


def _stderr(code: str) -> str:
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300).stderr


def test_the_minilm_load_report_is_gone_and_a_real_one_stays():
    assert "LOAD REPORT" in _stderr(TOWERS)  # transformers prints it for the pooler MiniLM carries
    quiet = _stderr("from contrasuite.pipelines.noise import silence_expected_noise; silence_expected_noise(); " + TOWERS)
    assert "LOAD REPORT" not in quiet
    keep = _OnlyUnexpectedKeys()
    record = lambda text: logging.LogRecord("transformers.modeling_utils", logging.WARNING, "", 0, text, None, None)  # noqa: E731
    assert keep.filter(record("BertModel LOAD REPORT\nencoder.layer.0.weight | MISSING"))
    assert not keep.filter(record("BertModel LOAD REPORT\npooler.dense.bias | UNEXPECTED"))


def test_validate_configs_prints_no_deprecation_warning():
    out = subprocess.run([sys.executable, "-m", "contrasuite.pipelines.cli", "validate-configs"], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0 and "Warning" not in out.stderr, out.stderr[-2000:]


def test_the_profilers_cpp_lines_are_dropped_and_other_stderr_passes():
    code = ("import os, torch; from contrasuite.pipelines.memory import peak_bytes\n"
            "from contrasuite.pipelines.noise import without_cpp_noise\n"
            "kept = [torch.ones(1 << 16)]\n"
            "peak_bytes(lambda: kept.pop().sum(), torch.device('cpu'))  # frees a block from before the profiler\n"
            "with without_cpp_noise():\n"
            "    os.write(2, b'[W CPUAllocator.cpp:245] Memory block of unknown size was allocated before the profiling "
            "started, profiler results will not include the deallocation event\\nreal warning\\n')\n")
    err = _stderr(code)
    assert "real warning" in err and "Memory block of unknown size" not in err and "USDT" not in err, err
