"""Every PIL mode reaches the networks as 8-bit RGB scaled, not clipped (PIL's convert("RGB") clips 16-bit at 255),
and 8-bit images give the bytes they always gave."""

import numpy as np
import pytest
from PIL import Image

from contrasuite.domains.images import open_image, rgb_on_white, to_grey8, to_rgb8

GRADIENT_16 = np.linspace(0, 65535, 8 * 64).round().astype(np.uint16).reshape(8, 64)


def _rgb(image: Image.Image) -> np.ndarray:
    return np.asarray(to_rgb8(image))


def _grey_of(rgb: np.ndarray) -> np.ndarray:
    assert (rgb == rgb[..., :1]).all()  # a greyscale source stays grey
    return rgb[..., 0]


def _old_rgb_on_white(image: Image.Image) -> np.ndarray:
    """What rgb_on_white returned before to_rgb8 (the reference for 8-bit images)."""
    canvas = Image.new("RGBA", image.size, (255, 255, 255, 255))
    canvas.alpha_composite(image.convert("RGBA"))
    return np.asarray(canvas.convert("RGB"))


@pytest.fixture
def rgb8() -> Image.Image:
    return Image.fromarray(np.random.default_rng(0).integers(0, 256, (8, 16, 3), dtype=np.uint8))


def test_a_16_bit_png_gradient_is_scaled_not_saturated(tmp_path):
    path = tmp_path / "grey16.png"
    Image.fromarray(GRADIENT_16).save(path)
    image = open_image(path)
    assert image.mode == "I;16"
    assert (np.asarray(image.convert("RGB")) == 255).mean() > 0.99  # the bug: PIL clips above 255
    grey = _grey_of(_rgb(image))
    assert np.array_equal(grey, np.round(GRADIENT_16 / 257).astype(np.uint8))
    assert grey.min() == 0 and grey.max() == 255 and (np.diff(grey.ravel().astype(int)) >= 0).all()
    assert (grey == 255).mean() < 0.01


def test_big_endian_16_bit_and_in_range_32_bit_ints_are_16_bit_data():
    expected = np.round(GRADIENT_16 / 257).astype(np.uint8)
    big = Image.frombytes("I;16B", GRADIENT_16.shape[::-1], GRADIENT_16.astype(">u2").tobytes())
    assert np.array_equal(_grey_of(_rgb(big)), expected)
    assert np.array_equal(_grey_of(_rgb(Image.fromarray(GRADIENT_16.astype(np.int32), "I"))), expected)


def test_32_bit_ints_beyond_16_bits_use_the_int32_range(tmp_path):
    values = np.array([[-(2**31), -1000, 0, 70_000, 2**30, 2**31 - 1]], np.int32)
    path = tmp_path / "int32.tif"
    Image.fromarray(values, "I").save(path)
    image = open_image(path)
    assert image.mode == "I"
    grey = _grey_of(_rgb(image))
    assert grey[0, 0] == 0 and grey[0, -1] == 255 and grey[0, 2] == 128
    assert (np.diff(grey.ravel().astype(int)) >= 0).all()


def test_floats_are_0_to_1_data_when_at_most_1_else_0_to_255(tmp_path):
    unit = np.linspace(0, 1, 64, dtype=np.float32).reshape(4, 16)
    path = tmp_path / "float.tif"
    Image.fromarray(unit, "F").save(path)
    image = open_image(path)
    assert image.mode == "F"
    assert (np.asarray(image.convert("L")) <= 1).all()  # the bug: PIL keeps the values, all black
    assert np.array_equal(_grey_of(_rgb(image)), np.round(unit * 255).astype(np.uint8))
    wide = Image.fromarray(np.array([[-5.0, 0.0, 127.6, 255.0, 300.0]], np.float32), "F")
    assert _grey_of(_rgb(wide)).tolist() == [[0, 0, 128, 255, 255]]  # outside [0, 255]: clipped (documented)


def test_grey_with_alpha_and_transparent_palettes_go_on_white():
    grey = np.array([[10, 20, 30, 40]], np.uint8)
    alpha = np.array([[255, 0, 255, 0]], np.uint8)
    la = Image.fromarray(np.stack([grey, alpha], -1), "LA")
    assert _grey_of(_rgb(la)).tolist() == [[10, 255, 30, 255]]
    palette = Image.fromarray(np.array([[0, 1, 2, 1]], np.uint8), "P")
    palette.putpalette([200, 0, 0, 0, 200, 0, 0, 0, 200])
    assert np.array_equal(_rgb(palette), np.asarray(palette.convert("RGB")))
    palette.info["transparency"] = 1
    assert _rgb(palette).tolist() == [[[200, 0, 0], [255, 255, 255], [0, 0, 200], [255, 255, 255]]]
    pa = palette.convert("PA")
    assert pa.mode == "PA" and _rgb(pa).tolist() == _rgb(palette).tolist()


def test_8_bit_images_keep_their_bytes(rgb8, tmp_path):
    rgb8.save(tmp_path / "rgb.png")
    rgb8.save(tmp_path / "rgb.jpg")
    for image in (open_image(tmp_path / "rgb.png"), open_image(tmp_path / "rgb.jpg"), rgb8.convert("RGBA")):
        assert np.array_equal(_rgb(image), np.asarray(image.convert("RGB")))
    for mode in ("L", "1", "P", "CMYK", "YCbCr", "RGBA", "LA"):
        image = rgb8.convert(mode)
        assert to_rgb8(image).mode == "RGB" and to_rgb8(image).tobytes() == _old_rgb_on_white(image).tobytes(), mode
        assert np.array_equal(rgb_on_white(image), _old_rgb_on_white(image)), mode
        if mode in ("L", "1", "P", "CMYK", "YCbCr"):  # no transparency: what convert("RGB") gave at the other sites
            assert to_rgb8(image).tobytes() == image.convert("RGB").tobytes(), mode
    cmyk = rgb8.convert("CMYK")
    assert np.array_equal(_rgb(cmyk), np.asarray(cmyk.convert("RGB")))


def test_semi_transparent_rgba_is_composited_on_white():
    rgba = Image.fromarray(np.array([[[0, 0, 0, 0], [0, 0, 0, 128], [100, 50, 0, 255]]], np.uint8), "RGBA")
    assert _rgb(rgba).tolist() == [[[255, 255, 255], [127, 127, 127], [100, 50, 0]]]


def test_to_grey8_keeps_one_channel_and_refuses_colour(rgb8):
    assert to_grey8(Image.fromarray(GRADIENT_16)).mode == "L"
    assert to_grey8(rgb8.convert("L")).tobytes() == rgb8.convert("L").tobytes()
    with pytest.raises(ValueError, match="single-channel"):
        to_grey8(rgb8)


def _save_16_bit_grey(path, seed: int) -> np.ndarray:
    values = np.random.default_rng(seed).integers(0, 65536, (12, 12), dtype=np.uint16)
    Image.fromarray(values).save(path)
    return values


def test_a_16_bit_image_folder_reaches_image_ssl_unsaturated(tmp_path):
    from contrasuite.domains.image_ssl.data import load_image_folder

    folder = tmp_path / "scans"
    expected = []
    for name in ("a", "b"):
        (folder / "train" / name).mkdir(parents=True)
        values = _save_16_bit_grey(folder / "train" / name / "0.png", seed=len(expected))
        expected.append(np.round(values / 257).astype(np.uint8))
    images = load_image_folder(folder, "train", 12, cache_dir=tmp_path / "cache").images
    assert images.shape == (2, 12, 12, 3) and (images == 255).mean() < 0.02
    assert np.array_equal(images[..., 0], np.stack(expected)) and 100 < images.mean() < 155


def test_a_16_bit_grey_png_reaches_super_resolution_unsaturated(tmp_path):
    from contrasuite.domains.super_resolution.upscale import read_image

    values = _save_16_bit_grey(tmp_path / "scan.png", seed=3)
    image, grey = read_image(tmp_path / "scan.png")
    assert grey and image.shape == (1, 3, 12, 12)
    assert np.array_equal((image[0, 0] * 255).round().numpy().astype(np.uint8), np.round(values / 257).astype(np.uint8))
    assert (image == 1).float().mean() < 0.02
