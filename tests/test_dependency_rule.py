"""The dependency rule of docs/architecture.md, checked by reading every module's imports."""

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STDLIB = set(sys.stdlib_module_names)
# the modules at the top of domains/ that every domain may use
SHARED_DOMAIN_MODULES = {"contrasuite.domains.task", "contrasuite.domains.archives", "contrasuite.domains.averaging",
                         "contrasuite.domains.config_fields", "contrasuite.domains.errors",
                         "contrasuite.domains.images", "contrasuite.domains.image_loading", "contrasuite.domains.init_from",
                         "contrasuite.domains.efficientnet_lite0"}


def imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
        elif isinstance(node, ast.ImportFrom) and node.level > 0:
            raise AssertionError(f"{path}: relative import; use absolute contrasuite.* imports")
    return names


def files(folder: str) -> list[Path]:
    return sorted((ROOT / folder).rglob("*.py"))


@pytest.mark.parametrize("path", files("core"), ids=lambda p: str(p.relative_to(ROOT)))
def test_core_imports_only_torch_numpy_stdlib(path):
    for name in imports_of(path):
        top = name.split(".")[0]
        ok = top in STDLIB or top in {"torch", "numpy", "__future__"} or name.startswith("contrasuite.core")
        assert ok, f"{path.relative_to(ROOT)} imports {name}: core may import only torch, numpy, stdlib"


@pytest.mark.parametrize("path", files("domains"), ids=lambda p: str(p.relative_to(ROOT)))
def test_domains_import_core_and_own_package_only(path):
    rel = path.relative_to(ROOT / "domains")
    own = f"contrasuite.domains.{rel.parts[0]}" if len(rel.parts) > 1 else None
    for name in imports_of(path):
        assert not name.startswith("contrasuite.pipelines"), f"{rel}: a domain never imports pipelines"
        if name.startswith("contrasuite.domains.") and name not in SHARED_DOMAIN_MODULES:
            assert own and name.startswith(own), f"domains/{rel} imports another domain: {name}"


@pytest.mark.parametrize("folder", ["core", "domains", "pipelines"])
def test_only_cli_imports_pipelines(folder):
    for path in files(folder):
        if folder == "pipelines":
            continue
        for name in imports_of(path):
            assert not name.startswith("contrasuite.pipelines"), f"{path.relative_to(ROOT)} imports {name}"
