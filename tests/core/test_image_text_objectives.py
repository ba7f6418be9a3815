"""What CLIPLoss and SigLIP share: the logit scale clamped at 100, and finite bf16 autocast at that scale."""

import math

import pytest
import torch

from contrasuite.core.objectives import CLIPLoss, SigLIP
from tests.bf16_check import assert_finite_in_bf16, hard_pair

IMAGE_TEXT = (CLIPLoss, SigLIP)


@pytest.mark.parametrize("objective", IMAGE_TEXT)
def test_scale_is_clamped_at_100(objective):
    torch.manual_seed(3)
    img, txt = torch.randn(4, 3), torch.randn(4, 3)
    assert objective(init_logit_scale=9.0)(img, txt).item() == pytest.approx(
        objective(init_logit_scale=math.log(100))(img, txt).item(), rel=1e-6
    )


@pytest.mark.parametrize("objective", IMAGE_TEXT)
@pytest.mark.parametrize("near_duplicate", [False, True])
def test_bf16_autocast_scale_100_finite(objective, near_duplicate):
    q, k = hard_pair(5, near_duplicate)
    obj = objective(init_logit_scale=math.log(100.0))  # temperature 0.01
    assert_finite_in_bf16(lambda: obj(q, k, extra_texts=torch.randn(8, 32)), q, k, *obj.parameters())
