"""The image sets the metric_learning configs read (``contrasuite data``; docs/data.md).

CARS196, SOP and In-Shop (``config.data.name``) are read too, but no shipped config uses them; their
layouts are in docs/domains/metric_learning.md.
"""

from __future__ import annotations

from typing import Any, Mapping

from contrasuite.domains.data_sources import EMOJI, DataFile, Dataset

CUB200 = Dataset(
    name="cub200",
    files=(DataFile("CUB_200_2011/images.txt"), DataFile("CUB_200_2011/image_class_labels.txt"),
           DataFile("CUB_200_2011/images/")),
    source="Caltech-UCSD Birds-200-2011 (Wah et al., 2011): www.vision.caltech.edu/datasets/cub_200_2011/",
    licence="non-commercial research and educational use (the images are Flickr photos)",
    layout="11,788 photos of 200 bird species: images/<class>/<image>.jpg, images.txt (id -> path), "
           "image_class_labels.txt (id -> class); classes 1-100 train, 101-200 test; about 1.1 GB packed",
    by_hand="download CUB_200_2011.tgz from https://data.caltech.edu/records/65de6-vp158 and extract it into the "
            "data root (CUB_200_2011/images.txt, image_class_labels.txt, images/)",
)
DATASETS = (EMOJI, CUB200)


def uses(config: Mapping[str, Any]) -> tuple[str, ...]:
    """``config.data.name`` (default emoji) when it is a declared dataset; a ``config.data.root`` of its own: none."""
    data = config.get("config", {}).get("data", {})
    name = data.get("name", "emoji")
    return (name,) if not data.get("root") and name in (EMOJI.name, CUB200.name) else ()
