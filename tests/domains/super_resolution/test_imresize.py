import math

import pytest
import torch

from contrasuite.domains.super_resolution.imresize import cubic, imresize, quantize, resize_matrix


def test_cubic_kernel_values():
    x = torch.tensor([0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 2.5], dtype=torch.float64)
    want = torch.tensor([1.0, 0.8671875, 0.5625, 0.2265625, 0.0, -0.0625, 0.0, 0.0], dtype=torch.float64)
    torch.testing.assert_close(cubic(x), want)


def test_downscale_row_hand_computed():
    # x0.5 with antialiasing: width 8, u_1 = 1.5, taps j = -3..6, w = 0.5 * cubic(0.5 (u - j)) =
    # [0, -0.01171875, -0.03515625, 0.11328125, 0.43359375, 0.43359375, 0.11328125, -0.03515625,
    # -0.01171875, 0]; j <= 0 mirrors to 1 - j, so columns 1..5 collect:
    m = resize_matrix(8, 4, 0.5)
    want = torch.tensor([0.546875, 0.3984375, 0.1015625, -0.03515625, -0.01171875, 0, 0, 0], dtype=torch.float64)
    torch.testing.assert_close(m[0], want)
    # Interior row 2 (u = 3.5): taps j = -1..8, no mirroring beyond j <= 0 and j > 8.
    row = m[1]
    assert row.sum().item() == pytest.approx(1.0)
    torch.testing.assert_close(row[2:4], torch.tensor([0.43359375, 0.43359375], dtype=torch.float64))


def test_upscale_x2_uses_keys_weights_without_antialias():
    m = resize_matrix(8, 16, 2.0)
    # Output 3 sits at u = 1.75: taps j = 0..3 at distances 1.75, 0.75, -0.25, -1.25.
    want = torch.zeros(8, dtype=torch.float64)
    want[0] = cubic(torch.tensor(1.75)) + cubic(torch.tensor(0.75))  # j = 0 mirrors to 1
    want[1] = cubic(torch.tensor(0.25))
    want[2] = cubic(torch.tensor(1.25))
    torch.testing.assert_close(m[2], want)


@pytest.mark.parametrize("scale", [0.5, 0.25, 2.0, 4.0, 1 / 3])
def test_rows_sum_to_one_and_constants_are_kept(scale):
    img = torch.full((3, 24, 36), 0.3, dtype=torch.float64)
    out = imresize(img, scale)
    assert out.shape[-2:] == (math.ceil(24 * scale), math.ceil(36 * scale))
    torch.testing.assert_close(out, torch.full_like(out, 0.3))


def test_symmetric_under_flips_and_transpose():
    torch.manual_seed(0)
    img = torch.rand(2, 3, 20, 20, dtype=torch.float64)
    out = imresize(img, 0.5)
    torch.testing.assert_close(imresize(img.flip(-1), 0.5), out.flip(-1))
    torch.testing.assert_close(imresize(img.flip(-2), 0.5), out.flip(-2))
    torch.testing.assert_close(imresize(img.transpose(-1, -2), 0.5), out.transpose(-1, -2))


def test_linear_ramp_is_reproduced_inside_the_image():
    ramp = torch.arange(32, dtype=torch.float64).expand(4, 32)
    up = imresize(ramp, 2.0)
    # Cubic convolution reproduces linear functions away from the mirrored border.
    centres = (torch.arange(64, dtype=torch.float64) + 1) / 2 + 0.5 * (1 - 0.5) - 1
    torch.testing.assert_close(up[0, 4:-4], centres[4:-4])


def test_quantize_and_bad_arguments():
    q = quantize(torch.tensor([0.5 / 255 + 1e-4, 3.4 / 255, 1.2, -0.1], dtype=torch.float64))
    assert (q * 255).tolist() == pytest.approx([1.0, 3.0, 255.0, 0.0])
    with pytest.raises(ValueError, match="scale"):
        imresize(torch.rand(4, 4))
    with pytest.raises(ValueError, match="H, W"):
        imresize(torch.rand(4), 0.5)
