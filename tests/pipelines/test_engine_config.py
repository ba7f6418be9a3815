"""Config loading: typed schemas, errors naming file and key, overrides, extends, validate-configs."""

import re

import pytest
import yaml
from omegaconf import OmegaConf

from contrasuite.pipelines.cli import main, validate_configs
from contrasuite.pipelines.config import ConfigError, RunSettings, load_config
from contrasuite.pipelines.moved_keys import MOVED
from contrasuite.pipelines.registry import known_tasks, resolve_task


def _write(tmp_path, data, name="c.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data) if not isinstance(data, str) else data)
    return path


def test_defaults_types_and_resolved(tmp_path, monkeypatch):
    monkeypatch.setenv("CONTRASUITE_DATA", "/some/data")
    loaded = load_config(_write(tmp_path, {"task": "toy_task:ToyTask", "config": {"lr": 0.5}}))
    assert isinstance(loaded.run, RunSettings) and loaded.run.precision == "auto" and loaded.run.device == "auto"
    assert type(loaded.config).__name__ == "ToyConfig" and loaded.config.lr == 0.5
    assert loaded.config.objective.terms == [{"name": "infonce", "temperature": 0.5}]
    assert loaded.resolved["run"]["data_root"] == "/some/data"
    assert loaded.domain == "ToyTask" and loaded.stem == "c"


def test_data_root_precedence(tmp_path, monkeypatch):
    monkeypatch.setenv("CONTRASUITE_DATA", "/env")
    path = _write(tmp_path, {"task": "toy_task:ToyTask", "run": {"data_root": "/cfg"}})
    assert load_config(path).run.data_root == "/cfg"
    assert load_config(path, data_root="/flag").run.data_root == "/flag"


@pytest.mark.parametrize(
    "data, match",
    [
        ({"task": "toy_task:ToyTask", "config": {"lrr": 1.0}}, r"c\.yaml: config\.lrr: Key 'lrr' not in 'ToyConfig'"),
        ({"task": "toy_task:ToyTask", "config": {"n": "many"}}, r"c\.yaml: config\.n: .*'many'"),
        ({"task": "toy_task:ToyTask", "run": {"epochz": 1}}, r"c\.yaml: run\.epochz"),
        ({"task": "toy_task:ToyTask", "run": {"precision": "fp8"}}, r"run\.precision: 'fp8' is not one of"),
        ({"task": "toy_task:ToyTask", "runn": {}}, r"unknown top-level key 'runn'"),
        ({"run": {}}, r"missing top-level key 'task'"),
        ({"task": "no_such_task"}, r"task: .*unknown task 'no_such_task'"),
        ({"task": "toy_task:ToyTask", "config": {"objective": {"terms": [{"name": "infonse"}]}}},
         r"config\.objective\.terms: unknown objective 'infonse'"),
        ({"task": "toy_task:ToyTask", "config": {"objective": {"terms": [{"name": "infonce", "temprature": 1}]}}},
         r"config\.objective\.terms: objective 'infonce'.*temprature"),
    ],
)
def test_errors_name_file_and_key(tmp_path, data, match):
    with pytest.raises(ConfigError, match=match):
        load_config(_write(tmp_path, data))


def test_missing_and_corrupt_files(tmp_path):
    with pytest.raises(ConfigError, match="config file not found: .*nope.yaml"):
        load_config(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match=r"bad\.yaml: not valid YAML"):
        load_config(_write(tmp_path, "task: [unclosed\n", "bad.yaml"))


def test_overrides_with_list_indices_and_append(tmp_path):
    path = _write(tmp_path, {"task": "toy_task:ToyTask"})
    loaded = load_config(path, [
        "run.seed=3", "run.grad_clip=1.5", "config.objective.terms.0.name=dcl",
        "config.objective.terms.1={name: weince, weight: 0.5}",
    ])
    assert loaded.run.seed == 3 and loaded.run.grad_clip == 1.5
    assert [t["name"] for t in loaded.config.objective.terms] == ["dcl", "weince"]
    assert loaded.resolved["config"]["objective"]["terms"][1]["weight"] == 0.5
    with pytest.raises(ConfigError, match=r"override config\.lrr: unknown key 'lrr'"):
        load_config(path, ["config.lrr=1"])
    with pytest.raises(ConfigError, match=r"override run\.epochs: .*'x'"):
        load_config(path, ["run.epochs=x"])
    with pytest.raises(ConfigError, match="is a list; index it with a number"):
        load_config(path, ["config.objective.terms.first=1"])
    with pytest.raises(ConfigError, match=r"override config\.objective\.terms\.5"):
        load_config(path, ["config.objective.terms.5={name: dcl}"])
    replaced = load_config(path, ["config.objective.terms.0={name: clip}"])
    assert replaced.config.objective.terms == [{"name": "clip"}]  # a list item is replaced, not merged
    with pytest.raises(ConfigError, match="not key=value"):
        load_config(path, ["run.epochs"])


def test_extends_merges_underneath(tmp_path):
    _write(tmp_path, {"task": "toy_task:ToyTask", "run": {"epochs": 7, "seed": 1}, "config": {"lr": 0.3}}, "base.yaml")
    child = _write(tmp_path, {"extends": "base.yaml", "run": {"seed": 2}}, "child.yaml")
    loaded = load_config(child)
    assert (loaded.run.epochs, loaded.run.seed, loaded.config.lr) == (7, 2, 0.3)
    assert loaded.stem == "child"


def test_registry_resolution():
    assert resolve_task("toy_task:ToyTask").__name__ == "ToyTask"
    assert isinstance(known_tasks(), dict)
    with pytest.raises(KeyError, match="unknown task"):
        resolve_task("nope")
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        resolve_task("toy_task:Nope")


def test_validate_configs_names_bad_file_and_key(tmp_path, capsys):
    root = tmp_path / "configs"
    (root / "toy").mkdir(parents=True)
    _write(root / "toy", {"task": "toy_task:ToyTask"}, "good.yaml")
    assert validate_configs(root) == 0
    _write(root / "toy", {"task": "toy_task:ToyTask", "config": {"hiden": 3}}, "bad.yaml")
    assert main(["validate-configs", "--root", str(root)]) == 1
    err = capsys.readouterr().err
    assert "bad.yaml: config.hiden" in err and "good.yaml" not in err


def test_dispatch_to_missing_bench_is_a_clear_error(capsys):
    assert main(["bench", "no_such_bench"]) == 2
    assert "no bench named 'no_such_bench'" in capsys.readouterr().err


def test_shipped_configs_validate(capsys):
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "configs"
    if not any(root.rglob("*.yaml")):
        pytest.skip("no shipped configs yet")
    assert validate_configs(root) == 0, capsys.readouterr().err


def _nested(dotted, value):
    for part in reversed(dotted.split(".")):
        value = {part: value}
    return value


@pytest.mark.parametrize("task, old", [(t, k) for t, keys in sorted(MOVED.items()) for k in sorted(keys)])
def test_a_moved_key_is_refused_naming_the_key_to_use(tmp_path, task, old):
    """A file or an override that uses a key that moved fails with one line naming the new key; the old key is
    unknown to today's schema (so the table holds no key that still exists)."""
    new = f"config.{old} moved: use {MOVED[task][old]}"
    with pytest.raises(ConfigError, match=rf"c\.yaml: {re.escape(new)}$"):
        load_config(_write(tmp_path, {"task": task, "config": _nested(old, 1)}))
    plain = _write(tmp_path, {"task": task}, "plain.yaml")
    with pytest.raises(ConfigError, match=rf"plain\.yaml: override config\.{re.escape(old)}: {re.escape(new)}$"):
        load_config(plain, [f"config.{old}=1"])
    head, _, last = old.rpartition(".")
    if head:  # a mapping given to the key above holds it too
        with pytest.raises(ConfigError, match=re.escape(new)):
            load_config(plain, [f"config.{head}={{{last}: 1}}"])
    schema = OmegaConf.structured(resolve_task(task).config_class)
    assert last not in (OmegaConf.select(schema, head) if head else schema)


def test_moved_keys_are_a_table_per_task(tmp_path):
    """A key that moved in one task is only an unknown key in another."""
    assert "optim.warmup_steps" in MOVED["code_search"]
    with pytest.raises(ConfigError, match=r"config\.optim: Key 'optim' not in 'ToyConfig'"):
        load_config(_write(tmp_path, {"task": "toy_task:ToyTask", "config": {"optim": {"warmup_steps": 1}}}))
