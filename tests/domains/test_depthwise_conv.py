"""The depthwise convolution of ``domains/depthwise_conv.py``: its window-summed weight gradient equals
PyTorch's, it is taken only where it was measured to pay, and EfficientNet-Lite0 computes the same with it."""

import pytest
import torch
import torch.nn.functional as F

from contrasuite.domains import depthwise_conv
from contrasuite.domains.depthwise_conv import depthwise_conv2d, depthwise_weight_grad, takes_window_sums
from contrasuite.domains.efficientnet_lite0 import efficientnet_lite0

CL = torch.channels_last


def operands(n: int, c: int, size: tuple[int, int], kernel: tuple[int, int], stride: tuple[int, int],
             dtype: torch.dtype = torch.float64) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(n * 1000 + c)
    x = torch.randn(n, c, *size, generator=g, dtype=dtype).contiguous(memory_format=CL)
    w = torch.randn(c, 1, *kernel, generator=g, dtype=dtype).contiguous(memory_format=CL)
    return x, w


@pytest.mark.parametrize("kernel,stride,size", [((5, 5), (1, 1), (8, 8)), ((5, 5), (2, 2), (7, 9)),
                                                ((7, 3), (1, 2), (10, 6)), ((3, 3), (1, 1), (6, 6))])
def test_weight_gradient_equals_pytorchs(kernel, stride, size, monkeypatch):
    # blocks of 3 samples over a batch of 7: two full blocks and an uneven last one
    x, w = operands(7, 6, size, kernel, stride)
    out = F.conv2d(x, w, stride=stride, groups=6)
    grad = torch.randn_like(out)
    expected = torch.ops.aten.convolution_backward(
        grad, x, w, None, list(stride), [0, 0], [1, 1], False, [0, 0], 6, [False, True, False])[1]
    monkeypatch.setattr(depthwise_conv, "BLOCK_BYTES", 3 * grad[0].numel() * grad.element_size())
    got = depthwise_weight_grad(x, grad, kernel, stride)
    assert got.shape == w.shape and got.dtype == torch.float64
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-10)


def test_forward_and_both_gradients_equal_conv2d():
    x, w = operands(5, 8, (8, 8), (5, 5), (2, 2), torch.float32)
    assert not takes_window_sums(x, w)  # a weight without a gradient: nothing to sum
    x.requires_grad_(True)
    w.requires_grad_(True)
    assert takes_window_sums(x, w)
    ref_x, ref_w = x.detach().clone().requires_grad_(True), w.detach().clone().requires_grad_(True)
    out = depthwise_conv2d(x, w, (2, 2))
    ref = F.conv2d(ref_x, ref_w, stride=(2, 2), groups=8)
    torch.testing.assert_close(out, ref)
    grad = torch.randn_like(ref)
    out.backward(grad)
    ref.backward(grad)
    torch.testing.assert_close(x.grad, ref_x.grad)
    torch.testing.assert_close(w.grad, ref_w.grad, rtol=1e-5, atol=1e-4)
    assert out.grad_fn.name().endswith("_DepthwiseConvBackward")


def test_taken_only_on_channels_last_cpu_tensors_with_large_filters():
    x, w = operands(2, 4, (6, 6), (5, 5), (1, 1), torch.float32)
    w.requires_grad_(True)
    assert takes_window_sums(x, w)
    assert not takes_window_sums(x.contiguous(), w)
    with torch.no_grad():
        assert not takes_window_sums(x, w)
    small = operands(2, 4, (6, 6), (3, 3), (1, 1), torch.float32)[1].requires_grad_(True)
    assert not takes_window_sums(x, small)
    assert depthwise_conv2d(x.contiguous(), w, (1, 1)).grad_fn.name() == "ConvolutionBackward0"


def test_input_without_gradient_and_bf16_autocast():
    x, w = operands(4, 6, (8, 8), (5, 5), (1, 1), torch.float32)
    w.requires_grad_(True)
    depthwise_conv2d(x, w, (1, 1)).square().sum().backward()  # no input gradient asked for
    expected = w.grad.clone()
    w.grad = None
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = depthwise_conv2d(x, w, (1, 1))
    assert out.dtype == torch.bfloat16
    out.float().square().sum().backward()
    assert w.grad.dtype == torch.float32
    torch.testing.assert_close(w.grad, expected, rtol=0.05, atol=0.05 * expected.abs().max().item())


def test_efficientnet_gradients_equal_across_layouts(monkeypatch):
    """The whole network (its 5x5 depthwise layers on the window sums when channels-last, on PyTorch's
    kernel when contiguous): the same output and the same gradient for every parameter."""
    summed = []
    monkeypatch.setattr(depthwise_conv, "depthwise_weight_grad",
                        lambda *a: summed.append(a[2]) or depthwise_weight_grad(*a))
    torch.manual_seed(0)
    net = efficientnet_lite0(pretrained=False).double()
    images = torch.randn(3, 3, 64, 64, dtype=torch.float64)
    grads = []
    for layout in (torch.contiguous_format, CL):
        net.zero_grad()
        net.to(memory_format=layout)
        out = net(images.contiguous(memory_format=layout))
        out.square().sum().backward()
        grads.append((out.detach(), {k: p.grad.clone() for k, p in net.named_parameters()}))
    assert summed == [(5, 5)] * 9  # Lite0's nine 5x5 depthwise layers, channels-last only
    torch.testing.assert_close(grads[0][0], grads[1][0])
    for name, g in grads[0][1].items():
        torch.testing.assert_close(grads[1][1][name], g, rtol=1e-9, atol=1e-9, msg=name)
