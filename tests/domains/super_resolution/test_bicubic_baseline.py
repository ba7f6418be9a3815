"""The bicubic-upscaling baseline reproduces the published numbers (RCAN/EDSR tables) within 0.05 dB."""

import pytest

from contrasuite.domains.super_resolution.data import eval_pairs, upscale_bicubic
from contrasuite.domains.super_resolution.metrics import psnr_y, ssim_y
from contrasuite.domains.super_resolution.report import BICUBIC_PUBLISHED


def bicubic_scores(root, name, scale):
    psnr, ssim = [], []
    for p in eval_pairs(str(root), name, scale):
        sr = upscale_bicubic(p.lr, scale)
        psnr.append(psnr_y(sr, p.hr, scale).item())
        ssim.append(ssim_y(sr, p.hr, scale).item())
    return sum(psnr) / len(psnr), sum(ssim) / len(ssim)


def check(root, name, scale):
    psnr, ssim = bicubic_scores(root, name, scale)
    want_psnr, want_ssim = BICUBIC_PUBLISHED[(name, scale)]
    assert psnr == pytest.approx(want_psnr, abs=0.05), f"{name} x{scale} bicubic PSNR {psnr:.3f}"
    assert ssim == pytest.approx(want_ssim, abs=0.002), f"{name} x{scale} bicubic SSIM {ssim:.4f}"


@pytest.mark.parametrize("scale", [2, 4])
def test_set5_bicubic_matches_published(sr_data_root, scale):
    check(sr_data_root, "Set5", scale)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["Set14", "B100"])
@pytest.mark.parametrize("scale", [2, 4])
def test_set14_b100_bicubic_matches_published(sr_data_root, name, scale):
    check(sr_data_root, name, scale)


def test_greyscale_bridge_keeps_one_channel(sr_data_root):
    bridge = {p.name: p for p in eval_pairs(str(sr_data_root), "Set14", 4)}["bridge"]
    assert bridge.hr.shape[0] == 1 and bridge.lr.shape[0] == 1
    assert bridge.hr.shape[-2] % 4 == 0 and bridge.lr.shape[-1] * 4 == bridge.hr.shape[-1]
