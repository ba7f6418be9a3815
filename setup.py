"""Map the repository's top-level folders onto sub-packages of one import name, ``contrasuite``.

``core/`` becomes ``contrasuite.core`` and so on, so no generic top-level name (``core``) is ever
installed into site-packages. The sub-package list is derived from the folders so that new modules
need no edit here.
"""

from setuptools import find_packages, setup

ROOTS = {"core": "contrasuite.core", "domains": "contrasuite.domains", "pipelines": "contrasuite.pipelines"}

packages: list[str] = []
package_dir: dict[str, str] = {"contrasuite.configs": "configs"}
for folder, name in ROOTS.items():
    package_dir[name] = folder
    packages.append(name)
    packages += [f"{name}.{sub}" for sub in find_packages(where=folder)]

setup(
    packages=packages + ["contrasuite.configs"],
    package_dir=package_dir,
    package_data={"contrasuite.configs": ["**/*.yaml"]},  # every shipped config, at any depth (base/, datasets/, reduced/)
    include_package_data=True,
)
