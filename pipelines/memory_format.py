"""``run.memory_format``: the memory layout of the 4-D weights of the modules a task hands to ``TaskContext.wrap``
(or, averaging its gradients itself, to ``TaskContext.lay_out``: translation, image_text). After setup the engine
checks that every 4-D weight of ``task.modules()`` has the asked layout (:func:`check_laid_out`): a task that
forgot one of the two would otherwise run its convolutions in the other layout without a word.

With channels-last (NHWC) weights PyTorch's convolutions run their NHWC kernels, and a convolution's output
takes its weight's layout, so activations stay NHWC from the first convolution on: the network and its
numbers are the same, only the kernels (and their order of summation) change. Measured on an Intel Xeon (2 cores,
oneDNN, fp32, one thread; git history of the records): metric_learning's step (EfficientNet-Lite0 blocks on cached stem features) against
pytorch-metric-learning's loop went from 1.00x to 1.45x, super_resolution's EDSR-baseline x2 step against the
official PCL-SISR from 0.98x to 1.13x (L1) and 0.97x to 1.20x (L1 + PCL), image_ssl's SimCLR ResNet-18 step at
batch 256 against lightly's from 1.00x to 1.25x (``contrasuite bench metric_learning --against peer``,
``contrasuite bench super_resolution --against official``, ``contrasuite bench image_ssl --against peer``;
docs/results/bench_pipelines.md); a one-off timing of CUT's ResNet generator and PatchGAN (reflection padding,
instance norm) alone gave 0.88x. On an AMD EPYC (2026-12-06, the peer's batches NCHW as its users' are)
metric_learning's step runs 1.01x its peer's (1.00-1.02 over 3 rounds; ``--override run.memory_format=contiguous``)
with contiguous weights and 2.23x (2.22-2.24) channels-last, where its 5x5 depthwise weight gradients also take
``domains/depthwise_conv.py``'s window sums (an earlier AMD record, 1.05x, had fed the peer the stem cache's
channels-last batches, so both sides ran NHWC). So ``auto`` takes channels-last on the CPU for the tasks that declare
``channels_last_on_cpu = True`` and leaves every other case as built (CUDA: not measured here).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

MEMORY_FORMATS = ("auto", "channels_last", "contiguous")


def wants_channels_last(setting: str, task_class: Any, device: torch.device) -> bool | None:
    """True (channels-last), False (contiguous) or None (leave the modules as built) for ``run.memory_format``."""
    if setting == "auto":
        return True if device.type == "cpu" and getattr(task_class, "channels_last_on_cpu", False) else None
    return setting == "channels_last"


def laid_out(module: nn.Module, channels_last: bool | None) -> nn.Module:
    """``module`` with its 4-D parameters channels-last (True) or contiguous (False), in place (the parameter
    objects stay, so optimizers built before keep them). Buffers keep their layout: DDP broadcasts them as they are."""
    if channels_last is None:
        return module
    layout = torch.channels_last if channels_last else torch.contiguous_format
    with torch.no_grad():
        for p in module.parameters():
            if p.dim() == 4:
                # a fresh tensor with the layout's own strides: ``contiguous(memory_format=...)`` keeps the strides of a
                # weight that is both (a depthwise [C, 1, k, k] or a 1 x 1 one), which the kernels then read as NCHW
                p.data = torch.empty_like(p, memory_format=layout).copy_(p)
    return module


def has_layout(p: torch.Tensor, layout: torch.memory_format) -> bool:
    """Whether ``p`` has the strides :func:`laid_out` gives a weight in ``layout``."""
    return p.stride() == torch.empty_like(p, memory_format=layout).stride()


def check_laid_out(task: Any, channels_last: bool | None) -> None:
    """Raises naming the first 4-D parameter of ``task.modules()`` that is not laid out as ``channels_last`` asks
    (nothing to check when it is None: the modules stay as built)."""
    if channels_last is None:
        return
    layout, asked = (torch.channels_last, "channels_last") if channels_last else (torch.contiguous_format, "contiguous")
    astray = [f"{name}.{key}" for name, module in task.modules().items() for key, p in module.named_parameters()
              if p.dim() == 4 and not has_layout(p, layout)]
    if astray:
        more = f" and {len(astray) - 1} more" if len(astray) > 1 else ""
        raise RuntimeError(f"{type(task).__name__}: run.memory_format asks {asked} weights, but {astray[0]}{more} is not: its setup must hand the module to ctx.wrap or ctx.lay_out")
