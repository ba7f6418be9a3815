"""The image sets the translation configs read (``contrasuite data``; docs/data.md)."""

from __future__ import annotations

from typing import Any, Mapping

from contrasuite.domains.data_sources import EMOJI, DataFile, Dataset

_CUT = ("https://raw.githubusercontent.com/taesungp/contrastive-unpaired-translation/HEAD/datasets/"
        "single_image_monet_etretat")
MONET = Dataset(
    name="monet-etretat",
    files=(DataFile("translation/single_image_monet_etretat/trainA/monet.jpg",
                    "014186261bcfb600610a1dc44d03837da95e12a4684b0e0c087d6f01a4a65469", 296150, f"{_CUT}/trainA/monet.jpg"),
           DataFile("translation/single_image_monet_etretat/trainB/etretat-normandy-france.jpg",
                    "bc20b976332c29a98b9cd37464563798e97191a37ffc826f8e042344f8b88870", 620384,
                    f"{_CUT}/trainB/etretat-normandy-france.jpg")),
    source="GitHub taesungp/contrastive-unpaired-translation datasets/ (the CUT paper's single-image pair)",
    licence="as the source repository (no licence stated for the images)",
    layout="one image per domain: trainA/monet.jpg (a Monet painting), trainB/etretat-normandy-france.jpg (a photo)",
)
HORSE2ZEBRA = Dataset(
    name="horse2zebra",
    files=tuple(DataFile(f"translation/horse2zebra/{split}/") for split in ("trainA", "trainB", "testA", "testB")),
    source="the CycleGAN datasets (Zhu et al., 2017): efrosgans.eecs.berkeley.edu/cyclegan/datasets/horse2zebra.zip",
    licence="ImageNet images: the ImageNet terms of use (non-commercial research)",
    layout="unpaired horse and zebra photos, 256x256 JPEG: trainA/ (1,067), trainB/ (1,334), testA/ (120), "
           "testB/ (140); about 110 MB packed",
    by_hand="download horse2zebra.zip from https://efrosgans.eecs.berkeley.edu/cyclegan/datasets/ and extract it "
            "so that translation/horse2zebra/{trainA,trainB,testA,testB}/ hold the images",
)
DATASETS = (EMOJI, MONET, HORSE2ZEBRA)


def uses(config: Mapping[str, Any]) -> tuple[str, ...]:
    """emoji for ``config.data.kind: emoji`` (the default), else the declared dataset at ``config.data.path``."""
    data = config.get("config", {}).get("data", {})
    if data.get("kind", "emoji") == "emoji":
        return (EMOJI.name,)
    folder = f"{str(data.get('path', '')).rstrip('/')}/"
    return tuple(d.name for d in (MONET, HORSE2ZEBRA) if d.files[0].path.startswith(folder))
