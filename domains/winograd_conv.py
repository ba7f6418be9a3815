"""3x3 convolutions as Winograd F(2x2, 3x3) matrix products on the CPU (Lavin and Gray, "Fast Algorithms for
Convolutional Neural Networks", CVPR 2016).

A 2x2 tile of a valid 3x3 convolution's output, from the 4x4 input tile ``d`` and filter ``g``, is

    Y = A^T [ (G g G^T) * (B^T d B) ] A,   * elementwise,

    B^T = [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]],
    G   = [[1, 0, 0], [1/2, 1/2, 1/2], [1/2, -1/2, 1/2], [0, 0, 1]],
    A^T = [[1, 1, 1, 0], [0, 1, -1, -1]],

so over channels each of the 16 points of the transformed tile is one matrix product ``U[xi] (O x C) @ V[xi]
(C x tiles)``: 16 products per 4 outputs against 36 multiplies per 4 outputs directly, 2.25x fewer. The backward
pass is the same algebra transposed: ``dU[xi] = dM[xi] V[xi]^T``, ``dV[xi] = U[xi]^T dM[xi]`` with ``dM`` the
output gradient's tiles through ``A``, then ``dx`` through ``B`` (overlapping tiles add) and ``dw = G^T dU G``.

PyTorch's CPU convolutions compute them directly (``ONEDNN_VERBOSE=1``: ``jit:avx512_core``,
``alg:convolution_direct``, oneDNN 3.12). The transforms here are a few strided adds each, memory-bound, so they pay
only where a tile's matrix products are large (many channels, many tiles) and a band of transformed tiles stays in
cache: one sample at a time, in bands of tile rows of at most :data:`BAND_BYTES`; the backward pass transforms the
input again rather than keeping 4x its size per layer. Measured by a one-off timing (a throwaway script, not a
project command; AMD EPYC, one thread, fp32, forward and backward of one layer, NCHW, ms): 256 -> 256 channels on 64
x 64 maps 97.1 against oneDNN's 151.3 (batch 1), 203.5 against 289.8 (batch 2); on 32 x 32 maps 26.9 against 37.2,
on 128 x 128 399.4 against 602.3; 512 channels on 32 x 32 91.4 against 146.8; 192 channels on 64 x 64 59.1 against
81.5; 128 channels on 128 x 128 137.6 against 160.4; 256 channels on 16 x 16 9.9 against 10.3; 64 channels slower
(190.7 against 176.7 on 256 x 256, 109.8 against 85.9 on EDSR's 48 x 48 at batch 16); with zero padding 1 (``F.pad``
first), batch 2 on 128 x 128 maps, 128 -> 256 channels 558.2 against 647.8 and 256 -> 128 497.1 against 588.6. On
two threads, 256 channels: 58.7 against 81.3 (64 x 64, batch 1), 250.1 against 298.7 (128 x 128); more threads were
not measured. F(4x4, 3x3) (6 x 6 tiles, 36 products per 16 outputs: 4x fewer multiplies) was tried for EDSR's 64
channels (a throwaway prototype, NCHW and NHWC, one band per 1 to 16 samples): no faster than oneDNN there (91 to
131 ms against 82 to 115 on 48 x 48 at batch 16), its 36 products of 64 x 64 weights by 64 x tiles running at about
half the direct convolution's rate (48 against 96 GFLOP/s), the transforms' thousands of small strided operations
the rest. What it gives a whole step is measured by ``contrasuite bench translation --against official``
(docs/results/bench_pipelines.md). The result equals the direct convolution up to fp32 rounding (relative
differences of a few 1e-7 in the output, up to ~1e-5 in the weight gradient, summed in another order).

:class:`WinogradConv2d` is an ``nn.Conv2d(in, out, 3)`` (stride 1, zero padding or none; the same parameters and
state dict) that takes this path where :func:`takes_winograd` says so, and is ``nn.Conv2d`` everywhere else (CUDA,
autocast, channels-last tensors, fewer channels). Double backward is not supported on the path.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from contrasuite.domains.autograd_graph import graph_holds

B_T = ((1, 0, -1, 0), (0, 1, 1, 0), (0, -1, 1, 0), (0, 1, 0, -1))
A_T = ((1, 1, 1, 0), (0, 1, -1, -1))
G = ((1.0, 0.0, 0.0), (0.5, 0.5, 0.5), (0.5, -0.5, 0.5), (0.0, 0.0, 1.0))
MIN_CHANNELS = 128
"""Input and output channels from which the path is taken (measured: 128 pays a little, 64 not)."""
MIN_OUTPUTS = 32 * 32
"""Output positions per sample from which the path is taken (measured: 32 x 32 pays, 16 x 16 about even)."""
BAND_BYTES = 16 << 20
"""Transformed input tiles per band of one sample (16 x channels x tiles x 4 bytes)."""


def takes_winograd(x: Tensor, weight: Tensor, padding: int = 0) -> bool:
    """Whether :class:`WinogradConv2d` runs these operands (``x`` before its zero ``padding``) as Winograd products:
    the CPU in fp32 (no autocast), an NCHW input, an even output size of at least :data:`MIN_OUTPUTS` positions, and
    at least :data:`MIN_CHANNELS` channels in and out; never while tracing, scripting or compiling."""
    if torch.jit.is_tracing() or torch.jit.is_scripting() or torch.compiler.is_compiling():
        return False  # a traced or compiled graph must not bake in this shape's bands (exports have free sizes)
    height, width = x.shape[-2] + 2 * padding - 2, x.shape[-1] + 2 * padding - 2
    return (x.device.type == "cpu" and x.dtype == weight.dtype == torch.float32 and x.dim() == 4
            and not torch.is_autocast_enabled("cpu") and x.is_contiguous() and height % 2 == 0 and width % 2 == 0
            and height * width >= MIN_OUTPUTS and min(weight.shape[:2]) >= MIN_CHANNELS)


def combine(coeffs: Sequence[float], parts: Sequence[Tensor], out: Tensor | None = None) -> Tensor:
    """``sum_i coeffs[i] * parts[i]`` over the nonzero coefficients, into ``out`` when given (a unit coefficient
    first, so the first two terms are one ``add``)."""
    terms = sorted(((c, p) for c, p in zip(coeffs, parts) if c != 0), key=lambda term: term[0] != 1)
    (c0, p0), *rest = terms
    into = {} if out is None else {"out": out}
    if c0 == 1 and rest:
        (c1, p1), *rest = rest
        out = torch.add(p0, p1, alpha=c1, **into)
    else:
        out = torch.mul(p0, c0, **into)
    for c, p in rest:
        out.add_(p, alpha=c)
    return out


def every_other(x: Tensor, dim: int, start: int, count: int) -> Tensor:
    """``count`` slices of ``x`` along ``dim`` from ``start`` in steps of 2 (a view)."""
    return x.narrow(dim, start, 2 * count - 1)[(slice(None),) * dim + (slice(None, None, 2),)]


def input_tiles(x: Tensor) -> Tensor:
    """``B^T d B`` of every 4x4 tile (stride 2) of ``x [C, 2R + 2, 2S + 2]``: ``[16, C, R * S]``."""
    c, rows, cols = x.shape[0], (x.shape[1] - 2) // 2, (x.shape[2] - 2) // 2
    out = x.new_empty(4, 4, c, rows, cols)
    by_row = [every_other(x, 1, k, rows) for k in range(4)]
    for a in range(4):
        u = combine(B_T[a], by_row)
        by_col = [every_other(u, 2, k, cols) for k in range(4)]
        for b in range(4):
            combine(B_T[b], by_col, out=out[a, b])
    return out.view(16, c, rows * cols)


def add_input_tiles_back(grad_tiles: Tensor, rows: int, cols: int, out: Tensor) -> None:
    """The adjoint of :func:`input_tiles`: ``B d' B^T`` of each tile's gradient ``[16, C, rows * cols]`` added
    into ``out [C, 2 rows + 2, 2 cols + 2]`` (overlapping tiles add)."""
    c = grad_tiles.shape[1]
    grad_tiles = grad_tiles.view(4, 4, c, rows, cols)
    by_row = []
    for a in range(4):
        row = out.new_zeros(c, rows, 2 * cols + 2)
        for k in range(4):
            every_other(row, 2, k, cols).add_(combine([B_T[b][k] for b in range(4)], grad_tiles[a]))
        by_row.append(row)
    for k in range(4):
        every_other(out, 1, k, rows).add_(combine([B_T[a][k] for a in range(4)], by_row))


def output_tiles(products: Tensor, rows: int, cols: int, out: Tensor) -> None:
    """``A^T M A`` of each tile's products ``[16, O, rows * cols]`` written into ``out [O, 2 rows, 2 cols]``."""
    m = products.view(4, 4, products.shape[1], rows, cols)
    for i in range(2):
        s = [combine(A_T[i], [m[a, b] for a in range(4)]) for b in range(4)]
        for j in range(2):
            combine(A_T[j], s, out=out[:, i::2, j::2])


def output_grad_tiles(grad: Tensor) -> Tensor:
    """The adjoint of :func:`output_tiles`: ``A g A^T`` of each 2x2 tile of ``grad [O, 2R, 2S]``, ``[16, O, R * S]``."""
    o, rows, cols = grad.shape[0], grad.shape[1] // 2, grad.shape[2] // 2
    out = grad.new_empty(4, 4, o, rows, cols)
    by_row = [grad[:, i::2] for i in range(2)]
    for a in range(4):
        r = combine([A_T[i][a] for i in range(2)], by_row)
        by_col = [r[..., j::2] for j in range(2)]
        for b in range(4):
            combine([A_T[j][b] for j in range(2)], by_col, out=out[a, b])
    return out.view(16, o, rows * cols)


def filter_tiles(weight: Tensor) -> Tensor:
    """``G w G^T`` of every filter of ``weight [O, C, 3, 3]``: ``[16, O, C]``, one product with ``G (x) G``."""
    o, c = weight.shape[:2]
    kron = torch.kron(weight.new_tensor(G), weight.new_tensor(G))  # [16, 9]: (a, b) x (u, v)
    return (kron @ weight.permute(2, 3, 0, 1).reshape(9, o * c)).view(16, o, c)


def filter_grad(grad_tiles: Tensor, shape: Sequence[int]) -> Tensor:
    """The adjoint of :func:`filter_tiles`: ``G^T dU G``, ``[O, C, 3, 3]``."""
    o, c = shape[:2]
    kron = torch.kron(grad_tiles.new_tensor(G), grad_tiles.new_tensor(G))
    return (kron.t() @ grad_tiles.view(16, o * c)).view(3, 3, o, c).permute(2, 3, 0, 1).contiguous()


def bands(x: Tensor) -> list[tuple[int, int, int]]:
    """``(sample, first tile row, end tile row)`` of each band: the transformed tiles of a band at most
    :data:`BAND_BYTES`."""
    c, rows, cols = x.shape[1], (x.shape[2] - 2) // 2, (x.shape[3] - 2) // 2
    per_band = max(1, BAND_BYTES // (16 * c * cols * x.element_size()))
    return [(n, r, min(r + per_band, rows)) for n in range(x.shape[0]) for r in range(0, rows, per_band)]


class _WinogradConv(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor, weight: Tensor) -> Tensor:
        u = filter_tiles(weight)
        out = x.new_empty(x.shape[0], weight.shape[0], x.shape[2] - 2, x.shape[3] - 2)
        cols = (x.shape[3] - 2) // 2
        for n, r0, r1 in bands(x):
            v = input_tiles(x[n, :, 2 * r0:2 * r1 + 2])
            m = v.new_empty(16, weight.shape[0], v.shape[2])
            for xi in range(16):
                torch.mm(u[xi], v[xi], out=m[xi])
            output_tiles(m, r1 - r0, cols, out[n, :, 2 * r0:2 * r1])
        ctx.save_for_backward(x, weight, u)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, Tensor | None]:
        x, weight, u = ctx.saved_tensors
        want_x, want_w = ctx.needs_input_grad
        grad = grad.contiguous()
        cols = (x.shape[3] - 2) // 2
        grad_x = torch.zeros_like(x) if want_x else None
        grad_u = torch.zeros_like(u) if want_w else None
        for n, r0, r1 in bands(x):
            dm = output_grad_tiles(grad[n, :, 2 * r0:2 * r1])
            if want_w:  # the tiles again rather than kept from forward: 4x the input's memory per layer
                v = input_tiles(x[n, :, 2 * r0:2 * r1 + 2])
                for xi in range(16):
                    torch.addmm(grad_u[xi], dm[xi], v[xi].t(), out=grad_u[xi])  # counted by flop_counter; addmm_ is not
            if want_x:
                dv = dm.new_empty(16, x.shape[1], dm.shape[2])
                for xi in range(16):
                    torch.mm(u[xi].t(), dm[xi], out=dv[xi])
                add_input_tiles_back(dv, r1 - r0, cols, grad_x[n, :, 2 * r0:2 * r1 + 2])
        return grad_x, filter_grad(grad_u, weight.shape) if want_w else None


def winograd_conv3x3(x: Tensor, weight: Tensor) -> Tensor:
    """``F.conv2d(x, weight)`` (stride 1, no padding, no bias) for ``weight [O, C, 3, 3]`` as Winograd F(2x2, 3x3)
    matrix products; ``x [N, C, H + 2, W + 2]`` NCHW with ``H``, ``W`` even (:func:`takes_winograd`)."""
    return _WinogradConv.apply(x, weight)


BACKWARD_NODE = "_WinogradConvBackward"
"""The name of a Winograd convolution's node in an autograd graph (``grad_fn.name()``)."""


def runs_winograd(output: Tensor) -> bool:
    """Whether the autograd graph behind ``output`` holds a convolution on the Winograd path."""
    return graph_holds(output, BACKWARD_NODE)


class WinogradConv2d(nn.Conv2d):
    """``nn.Conv2d(in_channels, out_channels, 3, padding=padding)`` (stride 1, zero padding) on
    :func:`winograd_conv3x3` where :func:`takes_winograd` says so; the same parameters and state dict."""

    def __init__(self, in_channels: int, out_channels: int, padding: int = 0, bias: bool = True) -> None:
        super().__init__(in_channels, out_channels, 3, padding=padding, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        pad = self.padding[0]
        if not takes_winograd(x, self.weight, pad):
            return super().forward(x)
        out = winograd_conv3x3(F.pad(x, (pad,) * 4) if pad else x, self.weight)
        return out if self.bias is None else out + self.bias.view(1, -1, 1, 1)
