"""Winograd F(2x2, 3x3) convolutions: equal to ``F.conv2d`` and its gradients, and taken only where they pay."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from contrasuite.domains import winograd_conv
from contrasuite.domains.winograd_conv import WinogradConv2d, runs_winograd, takes_winograd, winograd_conv3x3


def grads(conv, x, w, g):
    out = conv(x, w)
    return (out, *torch.autograd.grad(out, (x, w), g))


@pytest.mark.parametrize("band_bytes", [winograd_conv.BAND_BYTES, 16 * 5 * 3 * 8 * 3])  # one band; bands of 3 tile rows
def test_output_and_both_gradients_equal_the_direct_convolution_in_fp64(monkeypatch, band_bytes):
    monkeypatch.setattr(winograd_conv, "BAND_BYTES", band_bytes)
    torch.manual_seed(0)
    x = torch.randn(2, 5, 16, 8, dtype=torch.float64, requires_grad=True)  # 7 tile rows: bands of 3, 3, 1
    w = torch.randn(4, 5, 3, 3, dtype=torch.float64, requires_grad=True)
    g = torch.randn(2, 4, 14, 6, dtype=torch.float64)
    for ours, direct in zip(grads(winograd_conv3x3, x, w, g), grads(F.conv2d, x, w, g)):
        torch.testing.assert_close(ours, direct, rtol=1e-12, atol=1e-12)


def test_gradcheck():
    x = torch.randn(1, 2, 6, 4, dtype=torch.float64, requires_grad=True)
    w = torch.randn(3, 2, 3, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(winograd_conv3x3, (x, w))


def test_only_the_weight_gradient_when_the_input_needs_none():
    x = torch.randn(1, 3, 6, 6, dtype=torch.float64)
    w = torch.randn(2, 3, 3, 3, dtype=torch.float64, requires_grad=True)
    (ours,) = torch.autograd.grad(winograd_conv3x3(x, w).square().sum(), w)
    (direct,) = torch.autograd.grad(F.conv2d(x, w).square().sum(), w)
    torch.testing.assert_close(ours, direct)


def test_the_module_is_a_conv2d_with_its_state_dict_and_fp32_results():
    torch.manual_seed(0)
    ours, direct = WinogradConv2d(256, 256), nn.Conv2d(256, 256, 3)
    direct.load_state_dict(ours.state_dict())
    assert isinstance(ours, nn.Conv2d) and ours.state_dict().keys() == direct.state_dict().keys()
    x = torch.randn(2, 256, 34, 34, requires_grad=True)
    assert takes_winograd(x, ours.weight)
    g = torch.randn(2, 256, 32, 32)
    got = [ours(x), *torch.autograd.grad(ours(x), (x, ours.weight, ours.bias), g)]
    want = [direct(x), *torch.autograd.grad(direct(x), (x, direct.weight, direct.bias), g)]
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4 * b.abs().max().item())
    assert not torch.equal(got[0], want[0])  # a different order of summation: the path was taken


def test_taken_only_in_fp32_nchw_on_large_even_maps_of_wide_layers():
    w = torch.randn(128, 128, 3, 3)
    x = torch.randn(1, 128, 34, 34)
    assert takes_winograd(x, w)
    assert not takes_winograd(x.contiguous(memory_format=torch.channels_last), w)
    assert not takes_winograd(torch.randn(1, 128, 35, 34), w)  # odd output height
    assert not takes_winograd(x[..., :18, :18], w)  # 16 x 16 outputs: measured about even
    assert not takes_winograd(x[:, :64], w[:64, :64])  # narrower layers: measured slower
    assert not takes_winograd(x.double(), w.double())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not takes_winograd(x, w)


def test_the_graph_tells_whether_the_path_was_taken():
    conv = WinogradConv2d(128, 128)
    assert runs_winograd(conv(torch.randn(1, 128, 34, 34)))
    assert not runs_winograd(conv(torch.randn(1, 128, 18, 18)))


def test_a_traced_module_is_the_direct_convolution_on_any_size():
    """Exports trace the generator once and run it on other sizes: the trace must not hold one size's bands."""
    torch.manual_seed(0)
    conv = WinogradConv2d(128, 128)
    traced = torch.jit.trace(conv, torch.randn(1, 128, 34, 34), check_trace=False)
    assert not runs_winograd(traced(torch.randn(1, 128, 34, 34, requires_grad=True)))
    x = torch.randn(2, 128, 20, 26)
    torch.testing.assert_close(traced(x), F.conv2d(x, conv.weight, conv.bias))


def test_flop_counter_sees_the_three_products():
    """Forward ``U V``, backward ``U^T dM`` and ``dM V^T``: 3 x 16 products of ``2 O C tiles`` FLOPs each (the bench's
    compute bound counts them), and the filters' transform and its adjoint, ``2 x 16 x 9`` FLOPs per filter each."""
    from torch.utils.flop_counter import FlopCounterMode

    conv = WinogradConv2d(128, 128, bias=False)
    x = torch.randn(1, 128, 34, 34, requires_grad=True)
    with FlopCounterMode(display=False) as counter:
        conv(x).sum().backward()
    assert counter.get_total_flops() == 3 * 16 * 2 * 128 * 128 * 16 * 16 + 2 * (2 * 16 * 9) * 128 * 128


def test_zero_padding_as_nn_conv2d():
    torch.manual_seed(0)
    ours, direct = WinogradConv2d(128, 128, padding=1), nn.Conv2d(128, 128, 3, padding=1)
    direct.load_state_dict(ours.state_dict())
    x = torch.randn(1, 128, 32, 32, requires_grad=True)
    assert takes_winograd(x, ours.weight, padding=1) and not takes_winograd(x, ours.weight)  # 30 x 30 unpadded
    assert runs_winograd(ours(x))
    torch.testing.assert_close(ours(x), direct(x), rtol=1e-4, atol=1e-5)
    (gx,) = torch.autograd.grad(ours(x).sum(), x)
    (want,) = torch.autograd.grad(direct(x).sum(), x)
    torch.testing.assert_close(gx, want, rtol=1e-4, atol=1e-4)
