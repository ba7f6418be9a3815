import pytest
import torch

from contrasuite.domains.super_resolution.data import degrade
from contrasuite.domains.super_resolution.frequency import FrequencyConfig, fourier_lowpass, negatives, positives


def high_frequency_energy(x: torch.Tensor) -> torch.Tensor:
    """Per-image energy of the spectrum above 1/4 cycle per pixel."""
    spec = torch.fft.rfft2(x.float()).abs() ** 2
    fy = torch.fft.fftfreq(x.shape[-2])[:, None]
    fx = torch.fft.rfftfreq(x.shape[-1])[None, :]
    return (spec * ((fy**2 + fx**2).sqrt() > 0.25)).sum(dim=(-3, -2, -1))


@pytest.fixture
def batch():
    torch.manual_seed(0)
    # A textured image: smooth gradients plus fine checkerboard detail.
    yy, xx = torch.meshgrid(torch.arange(32.0), torch.arange(32.0), indexing="ij")
    base = 0.5 + 0.2 * torch.sin(xx / 3) * torch.cos(yy / 5) + 0.15 * ((xx + yy) % 2 - 0.5)
    hr = (base[None, None] + 0.05 * torch.rand(3, 3, 32, 32)).clamp(0, 1)
    return degrade(hr, 2), hr


def test_shapes_and_counts(batch):
    lr, hr = batch
    cfg = FrequencyConfig(n_sharp=2, n_blur=3, n_lowpass=2, use_upsampled_lr=True, n_mix=2)
    g = torch.Generator().manual_seed(0)
    pos, neg = positives(hr, cfg, g), negatives(hr, lr, 2, cfg, g)
    assert pos.shape == (2, *hr.shape)
    assert neg.shape == (3 + 2 + 1 + 2, *hr.shape)
    assert pos.min() >= 0 and neg.max() <= 1
    assert positives(hr, FrequencyConfig(n_sharp=0), g).shape == (0, *hr.shape)


def test_variants_differ_from_hr_and_negatives_lose_high_frequencies(batch):
    lr, hr = batch
    cfg = FrequencyConfig()
    g = torch.Generator().manual_seed(1)
    pos, neg = positives(hr, cfg, g), negatives(hr, lr, 2, cfg, g)
    for v in torch.cat([pos, neg]):
        assert (v - hr).abs().amax(dim=(1, 2, 3)).min() > 1 / 255
    e_hr = high_frequency_energy(hr)
    for v in neg:
        assert (high_frequency_energy(v) < e_hr).all()
    for v in pos:
        assert (high_frequency_energy(v) > e_hr).all()


def test_reproducible_from_the_generator(batch):
    lr, hr = batch
    cfg = FrequencyConfig()
    a = negatives(hr, lr, 2, cfg, torch.Generator().manual_seed(3))
    b = negatives(hr, lr, 2, cfg, torch.Generator().manual_seed(3))
    c = negatives(hr, lr, 2, cfg, torch.Generator().manual_seed(4))
    torch.testing.assert_close(a, b)
    assert not torch.allclose(a, c)


def test_lowpass_keeps_the_mean_and_bad_configs_fail(batch):
    _, hr = batch
    out = fourier_lowpass(hr, (0.1, 0.1), torch.Generator().manual_seed(0))
    torch.testing.assert_close(out.mean(dim=(-2, -1)), hr.mean(dim=(-2, -1)), atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="n_blur"):
        FrequencyConfig(n_blur=-1)
    with pytest.raises(ValueError, match="no negatives"):
        FrequencyConfig(n_blur=0, n_lowpass=0, use_upsampled_lr=False, n_mix=0)
