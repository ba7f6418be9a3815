"""CIFAR-10 loading: the official pickle layout (a tiny archive built here), the JPEG copy, bad input."""

import io
import os
import pickle
import tarfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from contrasuite.domains.image_ssl.data import CLASSES, DataError, load_cifar10, read_batch

DATA = Path(os.environ["CONTRASUITE_DATA"])


def _batch(n: int, seed: int) -> tuple[dict, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, size=(n, 32, 32, 3), dtype=np.uint8)
    labels = rng.integers(0, 10, size=n)
    data = images.transpose(0, 3, 1, 2).reshape(n, 3072)
    batch = {b"batch_label": b"x", b"labels": labels.tolist(), b"data": data, b"filenames": [b"f"] * n}
    return batch, images, labels


def _tiny_official(root: Path, packed: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Write a 6-batch official-layout archive (or folder) with 4 images per train batch, 3 test."""
    parts = {f"data_batch_{i}": _batch(4, i) for i in range(1, 6)}
    parts["test_batch"] = _batch(3, 99)
    folder = root / "cifar10" / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    for name, (batch, _, _) in parts.items():
        (folder / name).write_bytes(pickle.dumps(batch, protocol=2))
    if packed:
        with tarfile.open(root / "cifar10" / "cifar-10-python.tar.gz", "w:gz") as tar:
            tar.add(folder, arcname="cifar-10-batches-py")
        for f in folder.iterdir():
            f.unlink()
        folder.rmdir()
    train = [parts[f"data_batch_{i}"] for i in range(1, 6)]
    return (np.concatenate([p[1] for p in train]), np.concatenate([p[2] for p in train]),
            parts["test_batch"][1], parts["test_batch"][2])


@pytest.mark.parametrize("packed", [True, False], ids=["archive", "extracted"])
def test_official_layout_round_trip(tmp_path, packed):
    train_x, train_y, test_x, test_y = _tiny_official(tmp_path, packed)
    train = load_cifar10(tmp_path, "train", download=False)
    test = load_cifar10(tmp_path, "test", source="python", download=False)
    assert train.images.shape == (20, 32, 32, 3) and train.images.dtype == np.uint8
    assert np.array_equal(train.images, train_x) and np.array_equal(train.labels, train_y)
    assert np.array_equal(test.images, test_x) and np.array_equal(test.labels, test_y)
    assert train.source == "CIFAR-10 (official python archive)"


def test_restricted_unpickler_refuses_arbitrary_objects():
    class Evil:
        def __reduce__(self):
            return (os.system, ("echo pwned",))

    payload = pickle.dumps({b"data": Evil(), b"labels": []}, protocol=2)
    with pytest.raises(DataError, match="refusing to load"):
        read_batch(payload, "evil_batch")


def test_corrupt_batch_names_the_file(tmp_path):
    _tiny_official(tmp_path, packed=False)
    (tmp_path / "cifar10" / "cifar-10-batches-py" / "data_batch_3").write_bytes(b"not a pickle")
    with pytest.raises(DataError, match="data_batch_3"):
        load_cifar10(tmp_path, "train", download=False)


def test_missing_data_names_expected_files(tmp_path):
    with pytest.raises(DataError, match="cifar-10-python.tar.gz") as err:
        load_cifar10(tmp_path, "train", download=False)
    assert "cifar10-jpg" in str(err.value) and "6d958be0" in str(err.value)


def _jpeg_folder(root: Path) -> np.ndarray:
    rng = np.random.default_rng(0)
    folder = root / "cifar10" / "cifar10-jpg" / "test"
    arrays = []
    for c in ("airplane", "truck"):
        (folder / c).mkdir(parents=True)
        for i in range(2):
            arr = np.broadcast_to(rng.integers(0, 256, size=3, dtype=np.uint8), (32, 32, 3)).copy()
            Image.fromarray(arr).save(folder / c / f"{i:04d}.jpg", quality=95)
            arrays.append(arr)
    return np.stack(arrays)


def test_jpeg_folder_is_decoded_then_cached(tmp_path):
    originals = _jpeg_folder(tmp_path)
    cache = tmp_path / "cache"
    first = load_cifar10(tmp_path, "test", cache_dir=cache)
    assert first.images.shape == (4, 32, 32, 3)
    assert first.labels.tolist() == [0, 0, 9, 9]
    assert np.abs(first.images.astype(int) - originals.astype(int)).mean() < 3  # JPEG is lossy, but flat colours survive
    cached = list(cache.glob("cifar10-jpg-test-*.npz"))
    assert len(cached) == 1 and not list(cache.glob("*.tmp"))
    again = load_cifar10(tmp_path, "test", cache_dir=cache)
    assert np.array_equal(again.images, first.images)


def test_a_decoded_jpeg_archive_is_not_read_again(tmp_path, monkeypatch):
    """A load from the decoded cache reads no archive member (every load read all 60,000 before: 5 s a run)."""
    import shutil

    import contrasuite.domains.image_ssl.data as data

    _jpeg_folder(tmp_path)
    with tarfile.open(tmp_path / "cifar10" / "cifar10-jpg-test.tar.gz", "w:gz") as tar:
        tar.add(tmp_path / "cifar10" / "cifar10-jpg", arcname="cifar10-jpg")
    shutil.rmtree(tmp_path / "cifar10" / "cifar10-jpg")
    first = load_cifar10(tmp_path, "test", cache_dir=tmp_path / "cache")
    opened, real_open = [], tarfile.open
    monkeypatch.setattr(data.tarfile, "open", lambda *args, **kwargs: opened.append(args) or real_open(*args, **kwargs))
    again = load_cifar10(tmp_path, "test", cache_dir=tmp_path / "cache")
    assert first.labels.tolist() == [0, 0, 9, 9] and np.array_equal(again.images, first.images) and opened == []


def test_undecodable_image_names_the_file(tmp_path):
    _jpeg_folder(tmp_path)
    bad = tmp_path / "cifar10" / "cifar10-jpg" / "test" / "truck" / "0001.jpg"
    bad.write_bytes(b"\xff\xd8 broken")
    with pytest.raises(DataError, match="0001.jpg"):
        load_cifar10(tmp_path, "test", cache_dir=tmp_path / "cache")
    assert not list((tmp_path / "cache").glob("*.npz"))  # nothing half-written


def test_unknown_class_folder_is_an_error(tmp_path):
    _jpeg_folder(tmp_path)
    (tmp_path / "cifar10" / "cifar10-jpg" / "test" / "unicorn").mkdir()
    with pytest.raises(DataError, match="unicorn"):
        load_cifar10(tmp_path, "test", cache_dir=tmp_path / "cache")


def test_real_jpeg_copy_reads_a_few_files(tmp_path):
    archive = DATA / "cifar10" / "cifar10-jpg-test.tar.gz"
    if not archive.is_file():
        pytest.skip(f"CIFAR-10 JPEG copy not found at {archive} (set CONTRASUITE_DATA)")
    with tarfile.open(archive, "r:gz") as tar:
        names = [m.name for m in tar.getmembers() if m.name.endswith(".jpg")][:3]
        for name in names:
            img = Image.open(io.BytesIO(tar.extractfile(name).read()))
            assert img.size == (32, 32)
            assert Path(name).parts[-2] in CLASSES
    test = load_cifar10(DATA, "test", cache_dir=tmp_path)
    assert test.images.shape == (10000, 32, 32, 3) and test.source == "CIFAR-10 (JPEG copy)"
    assert np.bincount(test.labels).tolist() == [1000] * 10


def test_jpeg_tarball_layout_and_truncated_archive(tmp_path):
    originals = _jpeg_folder(tmp_path)
    packed = tmp_path / "packed"
    (packed / "cifar10").mkdir(parents=True)
    archive = packed / "cifar10" / "cifar10-jpg-test.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(tmp_path / "cifar10" / "cifar10-jpg", arcname="cifar10-jpg")
    got = load_cifar10(packed, "test", cache_dir=tmp_path / "cache")
    assert got.labels.tolist() == [0, 0, 9, 9]
    assert np.abs(got.images.astype(int) - originals.astype(int)).mean() < 3
    archive.write_bytes(archive.read_bytes()[:200])
    with pytest.raises(DataError, match="cifar10-jpg-test.tar.gz"):
        load_cifar10(packed, "test", cache_dir=tmp_path / "cache2")


def test_empty_split_folder_is_named(tmp_path):
    empty = tmp_path / "cifar10" / "cifar10-jpg" / "test"
    empty.mkdir(parents=True)
    with pytest.raises(DataError, match=f"{empty}: no images found for split 'test'"):
        load_cifar10(tmp_path, "test", source="jpeg", cache_dir=tmp_path / "cache")


def _folder(root, sizes):
    """``root/{train,test}/{cat,dog}/k.png`` of the given sizes (a cat is red, a dog blue)."""
    for split in ("train", "test"):
        for cls, colour in (("cat", (220, 30, 30)), ("dog", (30, 30, 220))):
            (root / split / cls).mkdir(parents=True)
            for k, size in enumerate(sizes):
                Image.new("RGB", (size, size + k), colour).save(root / split / cls / f"{k}.png")


def test_own_image_folder_is_resized_labelled_by_folder_and_cached(tmp_path):
    from contrasuite.domains.image_ssl.data import folder_classes, load_image_folder

    _folder(tmp_path / "pets", (40, 50, 64))
    assert folder_classes(tmp_path / "pets") == ("cat", "dog")
    first = load_image_folder(tmp_path / "pets", "train", 24, cache_dir=tmp_path / "cache")
    assert first.images.shape == (6, 24, 24, 3) and first.labels.tolist() == [0, 0, 0, 1, 1, 1]
    assert first.images[0, 12, 12].tolist()[0] > 200 and first.images[5, 12, 12].tolist()[2] > 200
    assert len(list((tmp_path / "cache").glob("folder-pets-train-*.npz"))) == 1
    again = load_image_folder(tmp_path / "pets", "train", 24, cache_dir=tmp_path / "cache")
    assert np.array_equal(again.images, first.images)
    (tmp_path / "pets" / "test" / "bird").mkdir()
    with pytest.raises(DataError, match="class 'bird' is not among the training classes"):
        load_image_folder(tmp_path / "pets", "test", 24, cache_dir=tmp_path / "cache")


def test_image_ssl_trains_and_evaluates_on_an_own_folder(tmp_path):
    from contrasuite.pipelines import trainer
    from contrasuite.pipelines.config import load_config

    _folder(tmp_path / "pets", (40, 48, 56, 64, 36, 44, 52, 60))
    overrides = ["run.max_steps=2", "run.progress=false", f"run.output_root={tmp_path / 'runs'}", "config.batch_size=8",
                 "config.data.source=folder", f"config.data.folder={tmp_path / 'pets'}", "config.data.image_size=24",
                 "config.data.train_subset=0", "config.data.test_subset=0",
                 f"config.data.cache_dir={tmp_path / 'cache'}", "config.data.val_fraction=0.25", "config.eval.knn_k=3",
                 "config.eval.linear_epochs=2", "config.model.width=8"]
    run_dir = trainer.train(load_config(Path(__file__).resolve().parents[3] / "configs" / "image_ssl" / "reduced_infonce.yaml",
                                        overrides, data_root=str(tmp_path)))
    result = trainer.evaluate(run_dir, "last")["metrics"]
    assert 0 <= result["knn_acc"] <= 100 and 0 <= result["linear_acc"] <= 100
