"""The dependency rule of docs/architecture.md, checked by reading every module's imports."""

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STDLIB = set(sys.stdlib_module_names)
# the modules at the top of domains/ that every domain may use
SHARED_DOMAIN_MODULES = {"contrasuite.domains.archives", "contrasuite.domains.averaging",
                         "contrasuite.core.task.config_fields", "contrasuite.core.task.errors",
                         "contrasuite.domains.images", "contrasuite.domains.image_loading", "contrasuite.domains.init_from",
                         "contrasuite.domains.checkpoint_fit", "contrasuite.domains.hugging_face",
                         "contrasuite.domains.disk_cache", "contrasuite.domains.data_sources",
                         "contrasuite.domains.ssim", "contrasuite.domains.depthwise_conv",
                         "contrasuite.domains.winograd_conv", "contrasuite.domains.autograd_graph",
                         "contrasuite.domains.efficientnet_lite0", "contrasuite.domains.exporting"}


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


ENGINE_API = "contrasuite.pipelines.api"


def is_front_module(path: Path) -> bool:
    """A domain's CLI entry: ``report.py``, ``bench.py`` or a module declaring ``COMMAND`` (pipelines/catalog.py)."""
    tree = ast.parse(path.read_text())
    declares = any(isinstance(n, ast.Assign) and any(getattr(t, "id", None) == "COMMAND" for t in n.targets)
                   for n in tree.body)
    return path.name in ("report.py", "bench.py") or declares


def module_name(path: Path) -> str:
    return "contrasuite." + ".".join(path.relative_to(ROOT).with_suffix("").parts)


def domain_importers() -> dict[str, set[Path]]:
    """Each imported name -> the domain files importing it (``import m``, ``from m import x``, ``from pkg import m``)."""
    users: dict[str, set[Path]] = {}
    for path in files("domains"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            else:
                continue
            for name in names:
                users.setdefault(name, set()).add(path)
    return users


IMPORTERS = domain_importers()


def is_front_helper(path: Path) -> bool:
    """A module that only front modules import (a report's helper, e.g. image_text's tuning grid): part of the front."""
    users = IMPORTERS.get(module_name(path), set())
    return bool(users) and all(is_front_module(user) for user in users)


@pytest.mark.parametrize("path", files("domains"), ids=lambda p: str(p.relative_to(ROOT)))
def test_domains_import_core_own_package_and_only_fronts_the_engine_api(path):
    rel = path.relative_to(ROOT / "domains")
    own = f"contrasuite.domains.{rel.parts[0]}" if len(rel.parts) > 1 else None
    front = is_front_module(path) or is_front_helper(path)
    for name in imports_of(path):
        if name.startswith("contrasuite.pipelines"):
            assert front and name == ENGINE_API, (
                f"domains/{rel} imports {name}: only a domain's report.py, bench.py and COMMAND modules (and modules only "
                f"they import) import the engine, and only {ENGINE_API}")
        if name.startswith("contrasuite.domains.") and name not in SHARED_DOMAIN_MODULES:
            assert own and name.startswith(own), f"domains/{rel} imports another domain: {name}"


def test_core_never_imports_pipelines():
    for path in files("core"):
        for name in imports_of(path):
            assert not name.startswith("contrasuite.pipelines"), f"{path.relative_to(ROOT)} imports {name}"


def test_the_engine_api_is_what_the_domains_use():
    """Every name the domains' front modules import from the API exists there, and nothing there goes unused."""
    import importlib

    api = importlib.import_module(ENGINE_API)
    used = set()
    for path in files("domains"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == ENGINE_API:
                used.update(alias.name for alias in node.names)
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "api":
                used.add(node.attr)
    assert used <= set(api.__all__), sorted(used - set(api.__all__))
    assert set(api.__all__) <= used, f"unused in {ENGINE_API}: {sorted(set(api.__all__) - used)}"
