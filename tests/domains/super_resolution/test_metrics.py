import math

import pytest
import torch

from contrasuite.domains.super_resolution.metrics import crop_border, psnr_y, rgb_to_y, ssim_y


def test_y_of_black_white_and_grey():
    img = torch.stack([torch.zeros(3, 2, 2), torch.ones(3, 2, 2)])
    y = rgb_to_y(img)
    assert y[0].unique().tolist() == pytest.approx([16.0])
    assert y[1].unique().tolist() == pytest.approx([235.0])  # 16 + 65.481 + 128.553 + 24.966
    grey = torch.full((1, 2, 2), 0.5)
    assert rgb_to_y(grey).unique().tolist() == pytest.approx([127.5])  # greyscale is used as is
    with pytest.raises(ValueError, match="3 or 1"):
        rgb_to_y(torch.rand(2, 4, 4))


def test_psnr_hand_value_and_border():
    hr = torch.full((3, 12, 12), 0.5)
    sr = hr.clone()
    sr[:, 2:-2, 2:-2] += 10 / 255  # Y differs by 10 * (65.481 + 128.553 + 24.966) / 255
    d = 10 * 219 / 255
    assert psnr_y(sr, hr, border=2).item() == pytest.approx(10 * math.log10(255**2 / d**2), abs=1e-6)
    # Only the cropped border differs: identical after cropping -> capped, very large PSNR.
    sr2 = hr.clone()
    sr2[:, :2] = 0
    assert psnr_y(sr2, hr, border=2).item() > 100
    assert crop_border(torch.zeros(5, 10, 8), 3).shape == (5, 4, 2)


def test_ssim_identity_and_constant_closed_form():
    torch.manual_seed(0)
    x = torch.rand(2, 3, 24, 24)
    torch.testing.assert_close(ssim_y(x, x, border=2), torch.ones(2, dtype=torch.float64))
    # Constant images: variances are 0, SSIM = (2 a b + C1) / (a^2 + b^2 + C1) on Y.
    a, b = torch.full((1, 20, 20), 0.2), torch.full((1, 20, 20), 0.6)
    c1 = (0.01 * 255) ** 2
    ya, yb = 0.2 * 255, 0.6 * 255
    assert ssim_y(a, b, 0).item() == pytest.approx((2 * ya * yb + c1) / (ya**2 + yb**2 + c1), rel=1e-6)


def test_ssim_drops_with_noise():
    torch.manual_seed(1)
    x = torch.rand(1, 3, 32, 32)
    little = (x + 0.02 * torch.randn_like(x)).clamp(0, 1)
    lots = (x + 0.2 * torch.randn_like(x)).clamp(0, 1)
    s_little, s_lots = ssim_y(little, x, 2).item(), ssim_y(lots, x, 2).item()
    assert 1 > s_little > s_lots
    with pytest.raises(ValueError, match="same shape"):
        psnr_y(x, x[..., :-1], 2)


def test_separable_grouped_ssim_equals_the_direct_window_and_kornia():
    """The fast ssim_y against the textbook 11x11 window (the bench's baseline) and kornia's SSIM."""
    import kornia

    from contrasuite.domains.super_resolution.bench import ssim_direct

    g = torch.Generator().manual_seed(0)
    hr = torch.rand(3, 3, 41, 57, generator=g)
    hr[1, :, 10:30, 10:30] = 0.5  # flat patches: the variances there are where float32 would cancel
    sr = (hr + 0.05 * torch.randn(hr.shape, generator=g)).clamp(0, 1)
    fast = ssim_y(sr, hr, 2)
    for i in range(3):
        y1, y2 = (crop_border(rgb_to_y(x[i]), 2)[None, None] for x in (sr, hr))
        assert abs(fast[i].item() - ssim_direct(y1, y2)) < 1e-12
        theirs = kornia.metrics.ssim(y1 / 255, y2 / 255, 11, max_val=1.0, padding="valid").mean().item()
        assert abs(fast[i].item() - theirs) < 1e-6
