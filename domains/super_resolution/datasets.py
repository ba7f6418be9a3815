"""The SR image sets the super_resolution configs read (``contrasuite data``; docs/data.md)."""

from __future__ import annotations

from typing import Any, Mapping

from contrasuite.domains.data_sources import DataFile, Dataset
from contrasuite.domains.super_resolution.data import SOURCES

_SETS = {  # name: (SHA-256, bytes, what it holds)
    "T91": ("4ff2f47686d0b5b4dc613213c82f3b99d5333bfa0de6f7687f3a68ab6525fd24", 13590539, "91 training images (BMP)"),
    "Set5": ("c6c48bfbdd9ed2a849fb89418faff2bb1fdb3da47cf026deb1e43ab24fed8d80", 852068, "5 test images (PNG)"),
    "Set14": ("a3faf763cc80355bb68850ca679bc5aab62b14f1687bdcf18392100e5ccc621c", 4977973,
              "14 test images (PNG; bridge.png is greyscale)"),
    "B100": ("3abf5c147d006b266bcfee907825ba5f1826eb63dddc601f35f4cc76914b956f", 27044089, "100 test images (PNG)"),
}
DATASETS = tuple(
    Dataset(
        name=f"sr-{name}",
        files=(DataFile(f"sr/{name}.tar.gz", digest, size),),
        source=SOURCES[name],
        licence="as the source repository (no licence stated)",
        layout=f"HR ground truth, {what}, as members {name}/<image>; LR inputs are made by bicubic downscaling",
        by_hand=f"download the images of {SOURCES[name]} and pack them as sr/{name}.tar.gz with members "
                f"{name}/<image>, or put them in the folder sr/{name}/ (the loader reads either)",
    )
    for name, (digest, size, what) in _SETS.items()
)


def uses(config: Mapping[str, Any]) -> tuple[str, ...]:
    """``config.data.train_set`` and ``config.test_sets`` (defaults T91; Set5, Set14, B100)."""
    section = config.get("config", {})
    names = [section.get("data", {}).get("train_set", "T91"), *section.get("test_sets", ["Set5", "Set14", "B100"])]
    return tuple(f"sr-{n}" for n in dict.fromkeys(names) if n in _SETS)
