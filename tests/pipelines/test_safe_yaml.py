"""Run-config YAML that would silently change or hang a run is refused: a key given twice in one mapping,
anchors and aliases (a "billion laughs" file), a file that is not UTF-8. ``contrasuite train`` exits 2 with
one stderr line naming the file, the key and the line, and makes no run folder."""

import time
from pathlib import Path

import pytest

from contrasuite.pipelines.cli import main
from contrasuite.pipelines.config import ConfigError, load_config, parse_override, parse_yaml

DUPLICATED = """\
task: toy_task:ToyTask
run:
  output_root: {runs}
  max_steps: 1
  seed: 3
  max_steps: 500
"""


def _billion_laughs(levels: int = 9) -> str:
    """About 1 KB of YAML whose nested aliases expand to 9**levels strings under ``config.negatives``."""
    rows = ["    l0: &l0 [x, x, x, x, x, x, x, x, x]"]
    rows += [f"    l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "task: graph\nrun: {output_root: RUNS}\nconfig:\n  negatives:\n" + "\n".join(rows) + "\n"


def _write(path: Path, text: str, runs: Path) -> Path:
    path.write_text(text.replace("{runs}", str(runs)).replace("RUNS", str(runs)))
    return path


def _one_line(capsys) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_train_refuses_a_key_given_twice(tmp_path, capsys):
    runs = tmp_path / "runs"
    path = _write(tmp_path / "dup.yaml", DUPLICATED, runs)
    assert main(["train", str(path)]) == 2
    line = _one_line(capsys)
    assert str(path) in line and "'run.max_steps'" in line and "line 6" in line and "first at line 4" in line, line
    assert not runs.exists()


def test_validate_configs_fails_a_key_given_twice(tmp_path, capsys):
    folder = tmp_path / "configs"
    folder.mkdir()
    _write(folder / "good.yaml", "task: toy_task:ToyTask\nrun: {max_steps: 2}\n", tmp_path)
    bad = _write(folder / "dup.yaml", DUPLICATED, tmp_path / "runs")
    assert main(["validate-configs", "--root", str(folder)]) == 1
    out = capsys.readouterr()
    assert "1/2 configs valid" in out.out and f"ok   {folder / 'good.yaml'}" in out.out
    fails = [line for line in out.err.splitlines() if line.startswith("FAIL")]
    assert len(fails) == 1 and str(bad) in fails[0] and "'run.max_steps'" in fails[0] and "line 6" in fails[0]


@pytest.mark.timeout(30)
def test_alias_bomb_is_refused_at_once(tmp_path, capsys):
    runs = tmp_path / "runs"
    path = _write(tmp_path / "bomb.yaml", _billion_laughs(), runs)
    assert len(path.read_bytes()) < 1500
    started = time.perf_counter()
    with pytest.raises(ConfigError, match=r"bomb\.yaml: line 5: YAML anchor '&l0' is not allowed"):
        load_config(path)
    assert time.perf_counter() - started < 1.0
    assert main(["train", str(path)]) == 2
    line = _one_line(capsys)
    assert str(path) in line and "line 5" in line and "anchor" in line
    assert not runs.exists()


def test_an_alias_alone_is_refused_with_its_line(tmp_path):
    path = tmp_path / "alias.yaml"
    path.write_text("task: toy_task:ToyTask\nrun:\n  seed: 1\n  output_root: *somewhere\n")
    with pytest.raises(ConfigError, match=r"alias\.yaml: line 4: YAML alias '\*somewhere' is not allowed"):
        load_config(path)


def test_train_refuses_a_file_that_is_not_utf8(tmp_path, capsys):
    runs = tmp_path / "runs"
    path = tmp_path / "latin1.yaml"
    path.write_bytes(f"task: toy_task:ToyTask\nrun: {{output_root: {runs}}}\n# r\u00e9sum\u00e9\n".encode("latin-1"))
    assert main(["train", str(path)]) == 2
    line = _one_line(capsys)
    assert str(path) in line and "not UTF-8" in line and "line 3" in line, line
    assert not runs.exists()


def test_an_extended_file_is_read_the_same_way(tmp_path):
    (tmp_path / "base.yaml").write_text("task: toy_task:ToyTask\nconfig: {lr: 0.1, lr: 0.2}\n")
    path = tmp_path / "top.yaml"
    path.write_text("extends: base.yaml\nrun: {seed: 1}\n")
    with pytest.raises(ConfigError, match=r"base\.yaml: line 2: key 'config\.lr' is given twice"):
        load_config(path)


@pytest.mark.parametrize(
    "item, match",
    [
        ("config.x={a: 1, a: 2}", r"override 'config\.x=\{a: 1, a: 2\}': line 1: key 'a' is given twice"),
        ("config.x=[&a [1], *a]", r"override 'config\.x=\[&a \[1\], \*a\]': line 1: YAML anchor '&a'"),
        ("config.x=[1, 2", r"override 'config\.x=\[1, 2': not valid YAML: line 1"),
    ],
)
def test_override_values_are_read_the_same_way(item, match):
    with pytest.raises(ConfigError, match=match):
        parse_override(item)


def test_plain_yaml_still_loads():
    text = "a: 1\nb: {c: [1, {d: 2}], e: 'x'}\n<<: {f: 3}\nlist: [{k: 1}, {k: 2}]\n"
    assert parse_yaml(text, "t.yaml") == {"a": 1, "b": {"c": [1, {"d": 2}], "e": "x"}, "f": 3,
                                          "list": [{"k": 1}, {"k": 2}]}
    assert parse_override("run.seed=3") == ("run.seed", 3)


def test_a_saved_config_with_a_shared_value_reads_back(tmp_path):
    """The reader refuses aliases, so the writer never makes one, even for one list under two keys."""
    from contrasuite.pipelines.config import save_resolved

    shared = [1, 2]
    save_resolved({"run": {"a": shared, "b": shared}}, tmp_path / "config.yaml")
    text = (tmp_path / "config.yaml").read_text()
    assert "&" not in text and "*" not in text
    assert parse_yaml(text, tmp_path / "config.yaml") == {"run": {"a": [1, 2], "b": [1, 2]}}
