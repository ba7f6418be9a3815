"""Shipped configs by name from any folder, the packaged set as validate-configs' default, missing extras."""

import subprocess
import sys

import pytest

from contrasuite.pipelines.config import ConfigError, config_root, find_config, load_config, shipped_configs
from contrasuite.pipelines.registry import EXTRAS


def test_a_shipped_config_is_found_by_name():
    assert find_config("image_ssl/infonce") == config_root() / "image_ssl" / "infonce.yaml"
    assert find_config("graph/reduced/meow_acm.yaml") == config_root() / "graph" / "reduced" / "meow_acm.yaml"
    assert load_config("image_ssl/reduced_infonce").task_name == "image_ssl"
    with pytest.raises(ConfigError, match=r"config file not found: image_ssl/infonc; shipped configs like it: \['image_ssl/infonce'"):
        find_config("image_ssl/infonc")


def test_every_config_file_under_configs_is_shipped():
    shipped = {p.relative_to(config_root()) for p in shipped_configs()}
    assert len(shipped) > 80 and any(p.parts[0:2] == ("graph", "reduced") for p in shipped)
    assert any(p.parts[0:2] == ("image_ssl", "base") for p in shipped)  # the files others extend


def _cli(code, cwd):
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=300)


def test_validate_configs_defaults_to_the_packaged_set_from_any_folder(tmp_path):
    out = _cli("import sys; from contrasuite.pipelines.cli import main; sys.exit(main(['validate-configs']))", tmp_path)
    assert out.returncode == 0, out.stderr
    n = len(shipped_configs())
    assert out.stdout.strip().splitlines()[-1] == f"{n}/{n} configs valid"


@pytest.mark.parametrize("module, command, extra", [
    ("yaml", "['validate-configs']", "engine"),
    ("torch_geometric", "['train', 'graph/meow_acm']", "graph"),
])
def test_a_missing_extra_is_one_line_naming_it(tmp_path, module, command, extra):
    code = f"import sys; sys.modules[{module!r}] = None; from contrasuite.pipelines.cli import main; sys.exit(main({command}))"
    out = _cli(code, tmp_path)
    lines = [line for line in out.stderr.splitlines() if "contrasuite" in line]
    assert out.returncode == 2 and len(lines) == 1, out.stderr
    assert f"needs the '{extra}' extra" in lines[0] and f"pip install 'contrasuite[{extra}]'" in lines[0]
    assert EXTRAS[module] == extra
