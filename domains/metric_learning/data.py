"""Retrieval datasets as labelled image lists, split into train / val / test by class.

Deep metric learning evaluates on classes never seen in training (Oh Song et al., "Deep Metric
Learning via Lifted Structured Feature Embedding", CVPR 2016, set the CUB/Cars/SOP protocol):

* ``emoji``: cross-style instance retrieval on ``<root>/emoji`` (Twemoji and Noto drawings sharing
  file names). A class is one emoji image name, i.e. one emoji or one of its skin-tone variants;
  its two images are the two styles. Base emoji (with all their skin-tone variants) are shuffled
  with ``split_seed``; the first ``train_fraction`` of them give the training classes, the rest the
  test classes, so no variant of a test emoji is seen in training.
* ``cub200`` (CUB-200-2011): classes 1-100 train, 101-200 test.
* ``cars196`` (Cars196, ``cars_annos.mat``): classes 1-98 train, 99-196 test.
* ``sop`` (Stanford Online Products): ``Ebay_train.txt`` / ``Ebay_test.txt``.
* ``inshop`` (In-Shop Clothes Retrieval): ``list_eval_partition.txt``; test is query vs gallery.

For every dataset ``val_fraction`` of the training classes (chosen with ``split_seed``; for emoji,
whole base emoji with their skin-tone variants) are held out as the validation split used to
select the checkpoint.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from contrasuite.core.task.errors import ConfigValueError
from contrasuite.domains.archives import emoji_style_dirs

EMOJI_STYLES = ("twitter", "google")
"""The default ``config.data.styles``: every emoji is one class, drawn in each of these styles."""
DATASETS = ("emoji", "cub200", "cars196", "sop", "inshop")


@dataclass
class ImageList:
    """Images of one split: ``paths[i]`` has class ``labels[i]``; ``is_query`` marks In-Shop queries."""

    paths: list[Path]
    labels: list[int]
    is_query: list[bool] | None = None
    """``None``: every image queries all others. Else queries search the gallery (``False``) only."""
    names: list[str] = field(default_factory=list)
    """Optional human-readable class names (by position in ``labels``)."""
    groups: list[str] = field(default_factory=list)
    """Optional group of each image's class (emoji: the base emoji of a skin-tone variant); a
    validation split holds out whole groups."""

    def __post_init__(self) -> None:
        if len(self.paths) != len(self.labels):
            raise ValueError(f"{len(self.paths)} paths but {len(self.labels)} labels")

    def __len__(self) -> int:
        return len(self.paths)

    def classes(self) -> set[int]:
        return set(self.labels)

    def subset(self, keep: Callable[[int], bool]) -> "ImageList":
        """Images whose label satisfies ``keep``."""
        idx = [i for i, y in enumerate(self.labels) if keep(y)]
        return ImageList(
            [self.paths[i] for i in idx],
            [self.labels[i] for i in idx],
            None if self.is_query is None else [self.is_query[i] for i in idx],
            [self.names[i] for i in idx] if self.names else [],
            [self.groups[i] for i in idx] if self.groups else [],
        )


@dataclass
class Splits:
    train: ImageList
    val: ImageList
    test: ImageList


def missing(path: Path, what: str) -> FileNotFoundError:
    return FileNotFoundError(
        f"{what}: expected {path}. These datasets need a manual download (licence terms); put them "
        f"under the data root (config.data.root, --data-root or $CONTRASUITE_DATA) in the layout of "
        f"docs/domains/metric_learning.md"
    )


def emoji_groups(root: Path) -> list[tuple[str, list[tuple[str, str]]]]:
    """``[(base emoji name, [(image file, class name), ...]), ...]`` from ``emoji.json``."""
    meta = root / "emoji.json"
    if not meta.is_file():
        raise missing(meta, "emoji metadata")
    groups = []
    for entry in json.loads(meta.read_text()):
        images = [(entry["image"], entry.get("short_name") or entry["name"])]
        for tone, variant in sorted((entry.get("skin_variations") or {}).items()):
            images.append((variant["image"], f"{images[0][1]}:{tone}"))
        groups.append((entry["unified"], images))
    return sorted(groups)


def load_emoji(root: Path, cache: Path, train_fraction: float, split_seed: int,
               styles: Sequence[str] = EMOJI_STYLES) -> tuple[ImageList, ImageList]:
    """(train classes, test classes) of the cross-style emoji benchmark; see the module docstring."""
    dirs = emoji_style_dirs(root, cache, styles)
    groups = emoji_groups(root)
    random.Random(split_seed).shuffle(groups)
    n_train = round(len(groups) * train_fraction)
    lists = []
    label = 0
    for part in (groups[:n_train], groups[n_train:]):
        paths, labels, names, bases = [], [], [], []
        for base, images in part:
            for image, name in images:
                files = [dirs[s] / image for s in styles]
                if not all(f.is_file() for f in files):
                    continue
                paths += files
                labels += [label] * len(files)
                names += [name] * len(files)
                bases += [base] * len(files)
                label += 1
        lists.append(ImageList(paths, labels, names=names, groups=bases))
    return lists[0], lists[1]


def split_by_class_range(paths: list[Path], labels: list[int], first_test: int) -> tuple[ImageList, ImageList]:
    train = [(p, y) for p, y in zip(paths, labels) if y < first_test]
    test = [(p, y) for p, y in zip(paths, labels) if y >= first_test]
    return ImageList(*map(list, zip(*train))), ImageList(*map(list, zip(*test)))


def load_cub200(root: Path) -> tuple[ImageList, ImageList]:
    """CUB-200-2011: ``CUB_200_2011/{images.txt, image_class_labels.txt, images/}``."""
    base = root / "CUB_200_2011"
    images, labels_file = base / "images.txt", base / "image_class_labels.txt"
    for f in (images, labels_file):
        if not f.is_file():
            raise missing(f, "CUB-200-2011")
    path_of = dict(line.split() for line in images.read_text().splitlines() if line.strip())
    pairs = [line.split() for line in labels_file.read_text().splitlines() if line.strip()]
    paths = [base / "images" / path_of[i] for i, _ in pairs]
    return split_by_class_range(paths, [int(c) for _, c in pairs], 101)


def load_cars196(root: Path) -> tuple[ImageList, ImageList]:
    """Cars196: ``cars196/cars_annos.mat`` (fields ``relative_im_path``, ``class``) and ``car_ims/``."""
    from scipy.io import loadmat

    base = root / "cars196"
    annos = base / "cars_annos.mat"
    if not annos.is_file():
        raise missing(annos, "Cars196")
    records = loadmat(annos, squeeze_me=True)["annotations"]
    paths = [base / str(r["relative_im_path"]) for r in records]
    labels = [int(r["class"]) for r in records]
    return split_by_class_range(paths, labels, 99)


def read_table(path: Path, what: str, skip: int) -> list[list[str]]:
    if not path.is_file():
        raise missing(path, what)
    return [line.split() for line in path.read_text().splitlines()[skip:] if line.strip()]


def load_sop(root: Path) -> tuple[ImageList, ImageList]:
    """Stanford Online Products: ``Stanford_Online_Products/Ebay_{train,test}.txt`` (image_id class_id super_class_id path)."""
    base = root / "Stanford_Online_Products"
    out = []
    for split in ("train", "test"):
        rows = read_table(base / f"Ebay_{split}.txt", "Stanford Online Products", 1)
        out.append(ImageList([base / r[3] for r in rows], [int(r[1]) for r in rows]))
    return out[0], out[1]


def load_inshop(root: Path) -> tuple[ImageList, ImageList]:
    """In-Shop: ``InShop/list_eval_partition.txt`` (count, header, then ``img/... id_XXXXXXXX train|query|gallery``)."""
    base = root / "InShop"
    rows = read_table(base / "list_eval_partition.txt", "In-Shop Clothes Retrieval", 2)
    ids = {item: k for k, item in enumerate(sorted({r[1] for r in rows}))}
    train = [r for r in rows if r[2] == "train"]
    test = [r for r in rows if r[2] in ("query", "gallery")]
    return (
        ImageList([base / r[0] for r in train], [ids[r[1]] for r in train]),
        ImageList([base / r[0] for r in test], [ids[r[1]] for r in test], [r[2] == "query" for r in test]),
    )


def hold_out_classes(train: ImageList, val_fraction: float, seed: int) -> tuple[ImageList, ImageList]:
    """Move ``val_fraction`` of the training classes (seeded; whole groups when ``groups`` is set) to validation."""
    if not 0.0 < val_fraction < 1.0:
        raise ConfigValueError(f"data.val_fraction must be in (0, 1), got {val_fraction}")
    group_of = dict(zip(train.labels, train.groups)) if train.groups else {y: str(y) for y in train.labels}
    groups = sorted(set(group_of.values()))
    random.Random(seed + 1).shuffle(groups)
    held = set(groups[: max(1, round(len(groups) * val_fraction))])
    val = {y for y, g in group_of.items() if g in held}
    return train.subset(lambda y: y not in val), train.subset(lambda y: y in val)


def limit_classes(images: ImageList, max_classes: int) -> ImageList:
    """The first ``max_classes`` classes (by label), for smoke tests; 0 keeps all."""
    if max_classes <= 0:
        return images
    keep = set(sorted(images.classes())[:max_classes])
    return images.subset(lambda y: y in keep)


def load_splits(
    name: str,
    root: Path,
    *,
    cache: Path,
    val_fraction: float,
    split_seed: int,
    train_fraction: float = 0.5,
    max_classes: int = 0,
    styles: Sequence[str] = EMOJI_STYLES,
) -> Splits:
    """Train / val / test image lists of dataset ``name`` under ``root`` (classes disjoint across splits)."""
    if name == "emoji":
        train, test = load_emoji(root / "emoji", cache, train_fraction, split_seed, styles)
    elif name == "cub200":
        train, test = load_cub200(root)
    elif name == "cars196":
        train, test = load_cars196(root)
    elif name == "sop":
        train, test = load_sop(root)
    elif name == "inshop":
        train, test = load_inshop(root)
    else:
        raise ConfigValueError(f"data.name: unknown dataset {name!r}; known: {DATASETS}")
    train, val = hold_out_classes(train, val_fraction, split_seed)
    n = max_classes
    return Splits(limit_classes(train, n), limit_classes(val, n), limit_classes(test, n))
