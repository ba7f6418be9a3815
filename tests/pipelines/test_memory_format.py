"""``run.memory_format``: which tasks get channels-last weights, and the layout change itself."""

import pytest
import torch
from torch import nn

from contrasuite.pipelines.memory_format import laid_out, wants_channels_last
from contrasuite.pipelines.standalone import setup_task


class Declares:
    channels_last_on_cpu = True


class Silent:
    pass


CPU, CUDA = torch.device("cpu"), torch.device("cuda")


@pytest.mark.parametrize("setting, task, device, expected", [
    ("auto", Declares, CPU, True), ("auto", Silent, CPU, None), ("auto", Declares, CUDA, None),
    ("channels_last", Silent, CUDA, True), ("contiguous", Declares, CPU, False),
])
def test_auto_takes_channels_last_only_for_declaring_tasks_on_the_cpu(setting, task, device, expected):
    assert wants_channels_last(setting, task, device) is expected


def test_laid_out_moves_4d_weights_and_keeps_values_and_parameters():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten(), nn.LazyLinear(2))
    x = torch.randn(2, 3, 6, 6)
    before, param = net(x), net[0].weight
    assert laid_out(net, None) is net and net[0].weight.is_contiguous()
    laid_out(net, True)
    assert net[0].weight is param and param.is_contiguous(memory_format=torch.channels_last)
    assert torch.allclose(net(x), before, atol=1e-6)
    laid_out(net, False)
    assert param.is_contiguous()


class WrapsAConv:
    """The least task ``setup_task`` needs: one wrapped convolution."""

    channels_last_on_cpu = True

    def setup(self, ctx):
        self.net = ctx.wrap(nn.Conv2d(3, 4, 3))

    def modules(self):
        return {"net": self.net}


class ForgetsOne(WrapsAConv):
    """Wraps one convolution and keeps another as built, handed to neither ``ctx.wrap`` nor ``ctx.lay_out``."""

    def setup(self, ctx):
        super().setup(ctx)
        self.head = nn.Sequential(nn.Conv2d(4, 4, 3), nn.Conv2d(4, 2, 1))

    def modules(self):
        return {**super().modules(), "head": self.head}


@pytest.mark.parametrize("setting, layout", [("auto", torch.channels_last), ("contiguous", torch.contiguous_format)])
def test_setup_task_lays_out_the_wrapped_modules_as_the_trainer_does(setting, layout):
    task = setup_task(WrapsAConv(), None, device=CPU, memory_format=setting)
    assert task.net.weight.is_contiguous(memory_format=layout)


def test_a_module_left_out_of_the_asked_layout_stops_setup_naming_it():
    with pytest.raises(RuntimeError, match=r"channels_last weights, but head\.0\.weight and 1 more is not: .*ctx\.lay_out"):
        setup_task(ForgetsOne(), None, device=CPU, memory_format="auto")
    task = setup_task(ForgetsOne(), None, device=CPU, memory_format="contiguous")  # as built: nothing astray
    assert task.head[0].weight.is_contiguous()


def test_a_weight_that_is_both_layouts_gets_channels_last_strides():
    """A depthwise [C, 1, k, k] or 1 x 1 weight is contiguous in both layouts; its strides must still be the
    channels-last ones, which is what the convolution kernels read to pick NHWC (1.35x on metric_learning's step)."""
    depthwise, pointwise = nn.Conv2d(4, 4, 3, groups=4), nn.Conv2d(4, 6, 1)
    assert depthwise.weight.stride() == (9, 9, 3, 1)
    laid_out(nn.Sequential(depthwise, pointwise), True)
    assert depthwise.weight.stride() == (9, 1, 3, 1) and pointwise.weight.stride() == (4, 1, 4, 4)
    x = torch.randn(2, 4, 5, 5).contiguous(memory_format=torch.channels_last)
    assert depthwise(x).is_contiguous(memory_format=torch.channels_last)
