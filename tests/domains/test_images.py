"""Every domain's image readers name a bad file in one DataError (the CLI turns it into exit 2)."""

import numpy as np
import pytest
from PIL import Image

from contrasuite.core.task.errors import DataError
from contrasuite.domains.images import open_image


@pytest.fixture
def files(tmp_path):
    good = tmp_path / "good.png"
    Image.fromarray(np.full((6, 5, 3), 200, np.uint8)).save(good)
    truncated = tmp_path / "cut.png"
    truncated.write_bytes(good.read_bytes()[:30])
    text = tmp_path / "notes.png"
    text.write_text("not an image")
    return good, truncated, text


def test_open_image_decodes_or_names_the_file(files):
    good, truncated, text = files
    assert open_image(good).size == (5, 6)
    assert open_image(good.read_bytes(), "archive.tar:good.png").size == (5, 6)
    for bad in (truncated, text):
        with pytest.raises(DataError, match=rf"{bad.name}: not a readable image \("):
            open_image(bad)
    with pytest.raises(DataError, match=r"archive.tar:x.png: not a readable image"):
        open_image(b"garbage", "archive.tar:x.png")


def test_folder_datasets_of_each_domain_name_a_bad_image(files):
    from contrasuite.domains.metric_learning.images import read_rgb as metric_read
    from contrasuite.domains.translation.data import read_rgb as translation_read

    good, _, text = files
    assert translation_read(good).shape == (3, 6, 5) and metric_read(good, 4).shape == (3, 4, 4)
    for read in (translation_read, lambda p: metric_read(p, 4)):
        with pytest.raises(DataError, match="notes.png: not a readable image"):
            read(text)
