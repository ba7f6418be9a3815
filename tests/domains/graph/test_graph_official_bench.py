"""``contrasuite bench graph --against official --method adameow`` without the official folder: where the flag
routes, the one-line answers for an absent or unpatched folder, the page section of a small record, the official
folder's import restoring the process, and the pair-weight check's two forms computing the same weights."""

import argparse
import json
import os
import sys

import pytest
import torch

import contrasuite.domains.graph.bench as bench

ROUNDS = [{"ours_cpu_s": 1.5, "peer_cpu_s": 4.5, "ours_wall_s": 2.0, "peer_wall_s": 6.0, "ratio": 3.0}] * 3


def adameow_record() -> dict:
    facts = {"nodes": 4019, "dim": 64, "metapath_edges": [10, 20], "parameters": 1000, "pair_hidden": 16,
             "optimizer": "Adam", "lr": 5e-05, "weight_decay": 1e-05}
    pair = {"rows": 1000, "dim": 64, "repeats": 3, "unpatched_s": 2.0, "patched_s": 0.5, "max_abs_diff": 6e-8}
    return {"section": "graph+adameow", "against": "official", "levers": [], "ours": "ours", "peer": "official",
            "method": "adameow", "dataset": "acm", "ours_facts": {**facts, "optimizer_kernel": "fused"},
            "official_facts": {**facts, "pair_weights": pair}, "first_loss": {"ours": 7.6, "peer": 7.7},
            "precision": "fp32", "device": "cpu", "threads": 1, "clock": "cpu", "steps_per_round": 3, "repeats": 3,
            "rounds": ROUNDS, "ratio_median": 3.0, "ratio_min": 3.0, "ratio_max": 3.0, "torch": "2", "machine": "cpu",
            "cpu_count": 2, "load_average_1min": 1.0, "date_utc": "2026-01-01 00:00",
            "command": "contrasuite bench graph --against official --method adameow"}


def test_method_names_its_record_and_section():
    assert bench.official_record("acm", "adameow").name == "graph_official_adameow.json"
    assert bench.official_record("dblp", "adameow").name == "graph_official_adameow_dblp.json"
    assert bench.official_record("acm").name == "graph_official.json"
    assert [bench.official_section(d, m) for d, m in (("acm", "meow"), ("dblp", "meow"), ("acm", "adameow"),
                                                       ("imdb", "adameow"))] == [
        "graph", "graph+dblp", "graph+adameow", "graph+adameow+imdb"]


def test_method_adameow_routes_to_the_adameow_config(monkeypatch, tmp_path):
    seen = []

    def stop(config, *rest):
        seen.append(config.name)
        raise RuntimeError("stop")

    monkeypatch.setattr(bench, "cpu_task", stop)
    args = argparse.Namespace(method="adameow", dataset="acm", override=[], data_root=None)
    with pytest.raises(RuntimeError, match="stop"):
        bench.against_official(args, [])
    assert seen == ["adameow_acm.yaml"] and bench.SETUPS["adameow"] is bench.official_adameow


def test_absent_folder_is_one_line_and_an_unpatched_one_exits_2(tmp_path, capsys):
    out = tmp_path / "record.json"
    absent = ["--against", "official", "--method", "adameow", "--official", str(tmp_path / "absent"), "--output", str(out)]
    assert bench.main(absent) == 0
    printed = capsys.readouterr().out.strip().splitlines()
    assert len(printed) == 1 and "no official code_adameow" in printed[0] and "code_adameow_cpu.patch" in printed[0]
    folder = tmp_path / "code_adameow"
    folder.mkdir()
    (folder / "main.py").write_text("")
    assert bench.main([*absent[:-3], str(folder), "--output", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "does not carry" in err[0] and not out.exists()


def test_report_renders_the_adameow_section_from_its_record(tmp_path):
    path, page = tmp_path / "graph_official_adameow.json", tmp_path / "page.md"
    path.write_text(json.dumps(adameow_record()))
    assert bench.main(["--report", "--output", str(path), "--page", str(page)]) == 0
    text = page.read_text()
    assert "<!-- section:graph+adameow -->" in text and "our AdaMEOW epoch vs the official code_adameow (ACM)" in text
    assert "| 1 | 1.50 | 4.50 | 2.00 | 6.00 | 3.00 |" in text and "**3.00** median" in text
    assert "three of 4.1 GB at N = 4,019" in text and "the unpatched form took 2.00 s and the patched one 0.50 s" in text


def test_official_imports_restore_the_process(tmp_path):
    (tmp_path / "utils").mkdir()
    (tmp_path / "utils" / "__init__.py").write_text("import sys\nDATASET = sys.argv[1]\nprint('noise')\n")
    before = (list(sys.path), list(sys.argv), os.getcwd(), sys.dont_write_bytecode, sys.modules.get("utils"))
    with open(os.devnull, "w") as out, bench.official_imports(tmp_path, "acm", out):
        import utils  # noqa: PLC0415 - the official folder's package

        assert utils.DATASET == "acm" and os.getcwd() == str(tmp_path.resolve())
    assert (list(sys.path), list(sys.argv), os.getcwd(), sys.dont_write_bytecode, sys.modules.get("utils")) == before
    assert not (tmp_path / "utils" / "__pycache__").exists()


def test_pair_weight_forms_compute_the_same_weights():
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1), torch.nn.Sigmoid())
    check = bench.pair_weight_seconds(mlp, rows=30, repeats=1)
    assert check["rows"] == 30 and check["dim"] == 8 and check["max_abs_diff"] < 1e-6
    assert check["unpatched_s"] > 0 and check["patched_s"] > 0
