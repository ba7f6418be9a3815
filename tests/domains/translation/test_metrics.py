"""PSNR/SSIM closed forms, FD on toy features, KID's unbiased estimator."""

import numpy as np
import torch

from contrasuite.domains.translation.metrics import frechet_distance, kid, mmd2_unbiased, psnr, ssim


def test_psnr_ssim():
    x = torch.rand(2, 3, 16, 16)
    y = (x + 0.1).clamp(0, 1)
    mse = (x - y).pow(2).flatten(1).mean(1).double()
    torch.testing.assert_close(psnr(x, y), 10 * torch.log10(1 / mse))
    torch.testing.assert_close(ssim(x, x), torch.ones(2, dtype=torch.float64))
    assert (ssim(x, torch.rand(2, 3, 16, 16)) < 0.5).all()


def test_ssim_is_the_11x11_gaussian_window_formula():
    """The separable filtering gives what the direct 11x11 window of Wang et al. gives."""
    g = torch.Generator().manual_seed(0)
    x = torch.rand(3, 3, 20, 24, generator=g)
    y = (x + 0.3 * torch.rand(3, 3, 20, 24, generator=g)).clamp(0, 1)
    t = torch.arange(11, dtype=torch.float64) - 5
    w1 = torch.exp(-t**2 / (2 * 1.5**2))
    w = (torch.outer(w1, w1) / w1.sum() ** 2).expand(3, 1, 11, 11)
    xd, yd = x.double(), y.double()
    mean = lambda a: torch.nn.functional.conv2d(a, w, groups=3)  # noqa: E731
    mx, my = mean(xd), mean(yd)
    sxx, syy, sxy = mean(xd * xd) - mx**2, mean(yd * yd) - my**2, mean(xd * yd) - mx * my
    c1, c2 = 0.01**2, 0.03**2
    direct = ((2 * mx * my + c1) * (2 * sxy + c2)) / ((mx**2 + my**2 + c1) * (sxx + syy + c2))
    torch.testing.assert_close(ssim(x, y), direct.flatten(1).mean(1), rtol=0, atol=1e-12)


def test_fd_identical_zero_and_shift_is_squared_norm():
    f = np.random.default_rng(0).normal(size=(200, 8))
    assert abs(frechet_distance(f, f)) < 1e-6
    shift = np.arange(8) * 0.1
    assert abs(frechet_distance(f, f + shift) - (shift**2).sum()) < 1e-6
    # a different covariance adds the trace term: N(0, I) vs N(0, 4I) -> d * (1 + 4 - 2*2) = d
    g = np.random.default_rng(1).normal(size=(20000, 2))
    assert abs(frechet_distance(g, 2 * g) - 2.0) < 0.05


def test_fd_sample_and_feature_routes_agree():
    rng = np.random.default_rng(4)
    a, b = rng.normal(size=(12, 30)), rng.normal(size=(9, 30)) * 1.5 + 0.2
    fd_s, fd_f = frechet_distance(a, b, "samples"), frechet_distance(a, b, "features")
    assert abs(fd_s - fd_f) < 1e-6 * max(1.0, fd_f)
    assert abs(frechet_distance(a, a, "samples")) < 1e-9


def test_mmd_unbiased_matches_brute_force():
    rng = np.random.default_rng(2)
    x, y = rng.normal(size=(5, 3)), rng.normal(size=(6, 3)) + 0.5
    k = lambda a, b: (a @ b / 3 + 1) ** 3  # noqa: E731
    xx = sum(k(x[i], x[j]) for i in range(5) for j in range(5) if i != j) / 20
    yy = sum(k(y[i], y[j]) for i in range(6) for j in range(6) if i != j) / 30
    xy = sum(k(x[i], y[j]) for i in range(5) for j in range(6)) / 30
    assert abs(mmd2_unbiased(x, y) - (xx + yy - 2 * xy)) < 1e-9


def test_kid_is_unbiased_near_zero_for_one_distribution():
    rng = np.random.default_rng(3)
    vals = [mmd2_unbiased(rng.normal(size=(20, 4)), rng.normal(size=(20, 4))) for _ in range(300)]
    biased = []
    for _ in range(50):
        x, y = rng.normal(size=(20, 4)), rng.normal(size=(20, 4))
        kern = lambda a, b: (a @ b.T / 4 + 1) ** 3  # noqa: E731
        biased.append(kern(x, x).mean() + kern(y, y).mean() - 2 * kern(x, y).mean())
    assert abs(np.mean(vals)) < 3 * np.std(vals) / np.sqrt(len(vals))  # unbiased: mean ~ 0
    assert min(vals) < 0 < np.mean(biased)  # the unbiased estimate can be negative; the V-statistic cannot
    same = rng.normal(size=(50, 4))
    assert kid(same, rng.normal(size=(50, 4)) + 1.0, subsets=5) > 10 * abs(kid(same, rng.normal(size=(50, 4)), subsets=5))
