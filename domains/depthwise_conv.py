"""Depthwise convolution whose weight gradient, on the CPU for kernels larger than 3x3, is summed window by window.

For a depthwise convolution (one ``k x k`` filter per channel, no padding here: callers pad) with stride ``s``,

    dL/dw[c, i, j] = sum_{n, h, w} g[n, c, h, w] * x[n, c, s h + i, s w + j],

one product of the output gradient ``g`` with a shifted, strided view of the input per filter tap. oneDNN
(PyTorch's CPU convolutions for channels-last tensors) has a depthwise weight-gradient kernel for 3x3 filters
only: a 5x5 depthwise convolution's weight gradient runs its general grouped kernel, each channel's single
filter padded to a 16 x 16 block (``ONEDNN_VERBOSE=1``: ``jit_dw`` for 3x3, ``jit:avx512_core`` with weights
``aBCde16c16b`` for 5x5, oneDNN 3.12), and takes about ten times the forward convolution's time. The sum above
instead walks the ``k * k`` taps over channels-last tensors (channels innermost, so each tap is one vectorised
multiply and one reduction over rows of channels), a block of samples (about 1 MB of gradient) at a time so
both operands stay in cache. A one-off timing of single layers (a throwaway script, not a project command; AMD
EPYC, one thread, fp32, EfficientNet-Lite0's 5x5 layers at batch 64 on 64 px images, so 4x4 and 2x2 maps): 2.2-5.9
ms against oneDNN's 7.5-12.6 ms per layer; on larger maps (16-32 px) the two about even; oneDNN's 3x3 kernel 4-10x
faster than this sum, so 3x3 filters keep it. What it gives a whole step is measured by ``contrasuite bench
metric_learning --against peer`` (docs/results/bench_pipelines.md).

:func:`depthwise_conv2d` takes this path only where it was measured to pay: the CPU, channels-last input, a
filter larger than 3x3, a weight that needs its gradient. Everywhere else (CUDA, contiguous tensors, 3x3) it is
``F.conv2d``. The input's gradient is always PyTorch's own (``aten.convolution_backward``). Double backward
is not supported on the path (nothing here differentiates through a gradient).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import once_differentiable

from contrasuite.domains.autograd_graph import graph_holds

BLOCK_BYTES = 1 << 20
"""Output gradient per block of samples in the window sums (measured: 128 KB-1 MB about even, whole batches of
16 px maps twice as slow)."""


def takes_window_sums(x: Tensor, weight: Tensor) -> bool:
    """Whether :func:`depthwise_conv2d` sums the weight gradient window by window for these operands."""
    return (x.device.type == "cpu" and weight.shape[-2] * weight.shape[-1] > 9 and weight.requires_grad
            and torch.is_grad_enabled() and x.is_contiguous(memory_format=torch.channels_last))


def depthwise_weight_grad(x: Tensor, grad: Tensor, kernel: tuple[int, int], stride: tuple[int, int]) -> Tensor:
    """``dL/dw`` ``[C, 1, kh, kw]`` of a depthwise convolution (no padding, no dilation) from its input
    ``x [N, C, H, W]`` and output gradient ``grad [N, C, Ho, Wo]``, summed in fp32 at least (bf16 operands)."""
    n, c = x.shape[:2]
    ho, wo = grad.shape[-2:]
    (kh, kw), (sh, sw) = kernel, stride
    xs = x.permute(0, 2, 3, 1)  # [N, H, W, C]: a view when x is channels-last
    gs = grad.contiguous(memory_format=torch.channels_last).permute(0, 2, 3, 1)
    per_block = max(1, BLOCK_BYTES // (ho * wo * c * gs.element_size()))
    acc = torch.promote_types(grad.dtype, torch.float32)
    out = torch.zeros(kh, kw, c, dtype=acc, device=x.device)
    tap = torch.empty(min(per_block, n), ho, wo, c, dtype=gs.dtype, device=x.device)
    total = torch.empty(c, dtype=acc, device=x.device)
    for start in range(0, n, per_block):
        g_block, x_block = gs[start:start + per_block], xs[start:start + per_block]
        products = tap[: g_block.shape[0]]
        for i in range(kh):
            for j in range(kw):
                window = x_block[:, i:i + (ho - 1) * sh + 1:sh, j:j + (wo - 1) * sw + 1:sw]
                torch.mul(g_block, window, out=products)
                torch.sum(products.view(-1, c), 0, dtype=acc, out=total)
                out[i, j] += total
    return out.permute(2, 0, 1).contiguous().unsqueeze(1).to(grad.dtype)


class _DepthwiseConv(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor, weight: Tensor, stride: tuple[int, int]) -> Tensor:
        ctx.save_for_backward(x, weight)
        ctx.stride = stride
        return F.conv2d(x, weight, stride=stride, groups=x.shape[1])

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, Tensor, None]:
        x, weight = ctx.saved_tensors
        grad_x = None
        if ctx.needs_input_grad[0]:
            grad_x = torch.ops.aten.convolution_backward(
                grad, x, weight, None, list(ctx.stride), [0, 0], [1, 1], False, [0, 0], x.shape[1],
                [True, False, False])[0]
        return grad_x, depthwise_weight_grad(x, grad, tuple(weight.shape[-2:]), ctx.stride), None


def depthwise_conv2d(x: Tensor, weight: Tensor, stride: tuple[int, int]) -> Tensor:
    """``F.conv2d(x, weight, stride=stride, groups=C)`` for ``weight [C, 1, kh, kw]`` (no padding, no bias), its
    weight gradient summed window by window where :func:`takes_window_sums` says so."""
    if not takes_window_sums(x, weight):
        return F.conv2d(x, weight, stride=stride, groups=x.shape[1])
    device = x.device.type
    if torch.is_autocast_enabled(device):
        dtype = torch.get_autocast_dtype(device)
        x, weight = x.to(dtype), weight.to(dtype)
    with torch.autocast(device, enabled=False):
        return _DepthwiseConv.apply(x, weight, stride)


BACKWARD_NODE = "_DepthwiseConvBackward"
"""The name of the window sums' node in an autograd graph (``grad_fn.name()``)."""


def sums_windows(output: Tensor) -> bool:
    """Whether the autograd graph behind ``output`` holds a depthwise convolution on the window sums."""
    return graph_holds(output, BACKWARD_NODE)

