"""DiffAugment on the discriminator's inputs: policies, gradients, errors, and its place in the step."""

import pytest
import torch

pytest.importorskip("kornia")

from contrasuite.domains.translation.augment import POLICIES, DiffAugment  # noqa: E402


def test_no_policy_is_the_identity():
    x = torch.rand(2, 3, 16, 16) * 2 - 1
    assert DiffAugment([])(x) is x


def test_every_policy_keeps_range_and_passes_gradients():
    torch.manual_seed(0)
    for policies in [[p] for p in POLICIES] + [list(POLICIES)]:
        x = (torch.rand(3, 3, 32, 32) * 2 - 1).requires_grad_()
        y = DiffAugment(policies)(x)
        assert y.shape == x.shape and y.dtype == torch.float32
        assert float(y.detach().min()) >= -1.0 and float(y.detach().max()) <= 1.0
        assert not torch.allclose(y, x), policies
        (y * torch.randn_like(y)).sum().backward()
        assert x.grad is not None and bool(x.grad.abs().sum() > 0), policies


def test_hue_rotation_keeps_grey_and_moves_a_pure_colour():
    torch.manual_seed(1)
    image = -torch.ones(8, 3, 8, 8)
    image[:, 0] = 1.0  # pure red
    image[:, :, :4] = 0.0  # the upper half mid grey
    out = DiffAugment(["hue"])(image)
    torch.testing.assert_close(out[:, :, :4], image[:, :, :4], atol=1e-5, rtol=0)  # grey has no hue
    red = out[:, :, 4:].mean(dim=(2, 3))
    assert bool((red[:, 1:] > 0).any())  # some image's red turned towards green or blue
    # the colour keeps its value: the largest channel stays at full intensity
    torch.testing.assert_close(red.max(dim=1).values, torch.ones(8), atol=1e-4, rtol=0)


def test_cutout_greys_a_quarter_of_the_image():
    torch.manual_seed(2)
    out = DiffAugment(["cutout"])(torch.ones(4, 3, 16, 16))
    grey = (out.abs() < 1e-6).all(dim=1).float().mean(dim=(1, 2))
    torch.testing.assert_close(grey, torch.full((4,), 0.25))


def test_unknown_policy_is_named():
    with pytest.raises(ValueError, match="config.discriminator.augment.*'zoom'"):
        DiffAugment(["colour", "zoom"])
