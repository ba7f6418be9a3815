"""The official AdaMEOW records on the graph_paper page re-parse from the time-stamped logs kept beside them."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OFFICIAL = ROOT / "docs" / "results" / "records" / "official"
RECORDS = ROOT / "docs" / "results" / "records" / "graph_paper"
KEPT = [(OFFICIAL / "adameow_gpu" / f"official_acm_seed{s}.log", OFFICIAL / "adameow_gpu" / "device_machine.txt",
         RECORDS / f"official_adameow_acm_seed{s}.json") for s in (0, 1, 2)]
KEPT += [(log, OFFICIAL / "adameow" / "official_acm_cpu_machine.txt",
          RECORDS / f"official_adameow_cpu_acm_seed{log.stem.rsplit('seed', 1)[1]}.json")
         for log in sorted((OFFICIAL / "adameow").glob("official_acm_cpu_seed*.log"))]


@pytest.mark.parametrize("log,machine,kept", [k for k in KEPT if k[2].exists()], ids=lambda p: Path(p).name)
def test_the_record_is_what_record_py_reads_from_the_log(log: Path, machine: Path, kept: Path, tmp_path: Path) -> None:
    (tmp_path / "data.txt").write_text("the data version is not compared here")
    seed = json.loads(kept.read_text())["seed"]
    out = subprocess.run([sys.executable, str(OFFICIAL / "adameow_gpu" / "record.py"), str(log), str(seed), str(machine),
                          str(tmp_path)], capture_output=True, text=True, check=True).stdout
    parsed, record = json.loads(out), json.loads(kept.read_text())
    for key in ("arm", "group", "command", "code", "machine", "metrics", "timings", "stopped"):
        assert parsed.get(key) == record.get(key), key
    assert list(parsed["evaluations"].values())[-1] == parsed["metrics"]["macro_f1_20"]  # the row is the last one
    if "evaluations" in record:                       # the H200 records predate this field
        assert parsed["evaluations"] == record["evaluations"]
