"""Class splits: disjoint classes, whole emoji (with skin tones) on one side, public layouts on tiny folders."""

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from contrasuite.core.task.errors import DataError
from contrasuite.domains.archives import extract_once, sha256_of
from contrasuite.domains.metric_learning.data import load_splits
from contrasuite.domains.metric_learning.images import read_rgb

from tests.domains.metric_learning.conftest import write_image


def test_emoji_splits_are_class_disjoint_and_cross_style(emoji_root, cache_dir):
    splits = load_splits("emoji", emoji_root, cache=cache_dir, val_fraction=0.2, split_seed=0)
    sets = {name: getattr(splits, name) for name in ("train", "val", "test")}
    classes = {name: s.classes() for name, s in sets.items()}
    assert not classes["train"] & classes["val"]
    assert not classes["train"] & classes["test"]
    assert not classes["val"] & classes["test"]
    # A base emoji and all its skin-tone variants stay on one side of the train/test split.
    base = {name: {n.split(":")[0] for n in s.names} for name, s in sets.items()}
    assert not (base["train"] | base["val"]) & base["test"]
    assert not base["train"] & base["val"]
    # Every class: exactly one Twemoji and one Noto drawing of the same file name.
    test = sets["test"]
    by_class = {}
    for path, y in zip(test.paths, test.labels):
        by_class.setdefault(y, []).append(path)
    assert all(len(p) == 2 and p[0].name == p[1].name and p[0].parent != p[1].parent for p in by_class.values())
    total = sum(len(s) for s in sets.values())
    assert total == 2 * len(set().union(*classes.values())) > 7000
    assert 0.4 < len(classes["test"]) / (total / 2) < 0.6


def test_emoji_split_is_reproducible_and_seeded(emoji_root, cache_dir):
    a = load_splits("emoji", emoji_root, cache=cache_dir, val_fraction=0.2, split_seed=0)
    b = load_splits("emoji", emoji_root, cache=cache_dir, val_fraction=0.2, split_seed=0)
    c = load_splits("emoji", emoji_root, cache=cache_dir, val_fraction=0.2, split_seed=1)
    assert a.test.paths == b.test.paths
    assert set(a.test.paths) != set(c.test.paths)


def test_rgba_is_composited_on_white(tmp_path):
    rgba = np.zeros((8, 8, 4), dtype=np.uint8)
    rgba[:4, :, :] = (255, 0, 0, 255)  # opaque red top, transparent bottom
    Image.fromarray(rgba, "RGBA").save(tmp_path / "x.png")
    img = read_rgb(tmp_path / "x.png", 8)
    assert img[:, 0, 0].tolist() == [255, 0, 0]
    assert img[:, 7, 7].tolist() == [255, 255, 255]


def _pack(tmp_path: Path) -> Path:
    """A gzipped tar holding ``pack/a.png``."""
    import tarfile

    src = tmp_path / "src" / "pack"
    write_image(src / "a.png", 1)
    archive = tmp_path / "pack.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(src, arcname="pack")
    return archive


def test_extract_once_is_atomic_and_idempotent(tmp_path):
    archive = _pack(tmp_path)
    target = extract_once(archive, tmp_path / "cache" / "pack")
    assert (target / "a.png").is_file() and target.name == f"pack-{sha256_of(archive)[:16]}"
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [target.name]  # no temp leftovers
    (target / "a.png").unlink()
    assert extract_once(archive, tmp_path / "cache" / "pack") == target and not (target / "a.png").exists()  # not re-extracted


def test_extraction_is_keyed_on_the_archive_not_the_folder(tmp_path):
    archive = _pack(tmp_path)
    extract_once(archive, tmp_path / "cache" / "pack")
    data = archive.read_bytes()
    archive.write_bytes(data[: len(data) // 2])  # truncated: the old extraction must not serve it
    with pytest.raises(DataError, match=r"pack.tar.gz: corrupt or truncated archive"):
        extract_once(archive, tmp_path / "cache" / "pack")
    archive.unlink()  # missing: likewise
    with pytest.raises(FileNotFoundError, match="archive not found: .*pack.tar.gz"):
        extract_once(archive, tmp_path / "cache" / "pack")


def test_extraction_without_the_data_filter_refuses_what_it_would(tmp_path, monkeypatch):
    """On a Python whose tarfile has no ``filter`` (Debian 12's 3.11.2), extraction works and still refuses a
    member that would land outside the folder."""
    import tarfile

    monkeypatch.delattr(tarfile, "data_filter", raising=False)  # absent already before 3.11.4
    target = extract_once(_pack(tmp_path), tmp_path / "cache" / "pack")
    assert (target / "a.png").is_file()
    evil = tmp_path / "evil.tar.gz"
    with tarfile.open(evil, "w:gz") as tar:
        tar.add(tmp_path / "src" / "pack" / "a.png", arcname="../escaped.png")
    with pytest.raises(DataError, match=r"evil.tar.gz: member '../escaped.png' is not a plain file or folder inside"):
        extract_once(evil, tmp_path / "cache" / "evil")
    assert not (tmp_path / "cache" / "escaped.png").exists() and not (tmp_path / "escaped.png").exists()


def test_cub_layout(tiny_cub):
    splits = load_splits("cub200", tiny_cub, cache=tiny_cub, val_fraction=0.25, split_seed=0)
    assert splits.test.classes() == {101, 102, 103, 104}
    assert len(splits.val.classes()) == 1 and splits.val.classes() | splits.train.classes() == {1, 2, 3, 4}
    assert all(p.is_file() for p in splits.train.paths + splits.test.paths)


def test_sop_and_inshop_layouts(tmp_path):
    sop = tmp_path / "Stanford_Online_Products"
    for split, classes in (("train", [1, 2, 3]), ("test", [11, 12])):
        rows = ["image_id class_id super_class_id path"]
        for c in classes:
            for k in range(2):
                rel = f"bike_final/{c}_{k}.JPG"
                write_image(sop / rel, c * 10 + k)
                rows.append(f"{len(rows)} {c} 1 {rel}")
        (sop / f"Ebay_{split}.txt").write_text("\n".join(rows) + "\n")
    splits = load_splits("sop", tmp_path, cache=tmp_path, val_fraction=0.34, split_seed=0)
    assert splits.test.classes() == {11, 12} and len(splits.val.classes()) == 1

    shop = tmp_path / "InShop"
    rows = ["6", "image_name item_id evaluation_status"]
    for item, status in [(1, "train"), (1, "train"), (2, "train"), (2, "train"), (3, "query"), (3, "gallery"), (4, "gallery")]:
        rel = f"img/WOMEN/id_{item:08d}/{len(rows)}.jpg"
        write_image(shop / rel, len(rows))
        rows.append(f"{rel} id_{item:08d} {status}")
    (shop / "list_eval_partition.txt").write_text("\n".join(rows) + "\n")
    splits = load_splits("inshop", tmp_path, cache=tmp_path, val_fraction=0.5, split_seed=0)
    assert splits.test.is_query == [True, False, False]
    assert not splits.test.classes() & (splits.train.classes() | splits.val.classes())


def test_cars_layout(tmp_path):
    scipy_io = pytest.importorskip("scipy.io")
    base = tmp_path / "cars196"
    dtype = [("relative_im_path", object), ("class", object)]
    records = np.array([(f"car_ims/{i:06d}.jpg", c) for i, c in enumerate([1, 1, 2, 2, 99, 99, 196, 196])], dtype=dtype)
    for r in records:
        write_image(base / r["relative_im_path"], int(r["class"]))
    scipy_io.savemat(base / "cars_annos.mat", {"annotations": records})
    splits = load_splits("cars196", tmp_path, cache=tmp_path, val_fraction=0.5, split_seed=0)
    assert splits.test.classes() == {99, 196}
    assert all(p.is_file() for p in splits.test.paths)


def test_missing_files_and_unknown_name_are_clear(tmp_path):
    with pytest.raises(FileNotFoundError, match="CUB_200_2011/images.txt"):
        load_splits("cub200", tmp_path, cache=tmp_path, val_fraction=0.2, split_seed=0)
    with pytest.raises(ValueError, match="data.name"):
        load_splits("mnist", tmp_path, cache=tmp_path, val_fraction=0.2, split_seed=0)
