"""What CLIPLoss and SigLIP share: the logit scale clamped at 100, and finite bf16 autocast at that scale."""

import math

import pytest
import torch

from contrasuite.core.objectives import CLIPLoss, SigLIP

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
    torch.manual_seed(5)
    base = torch.randn(64, 32)
    other = base + 1e-4 * torch.randn_like(base) if near_duplicate else torch.randn(64, 32)
    q, k = base.requires_grad_(), other.requires_grad_()
    obj = objective(init_logit_scale=math.log(100.0))  # temperature 0.01
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = obj(q, k, extra_texts=torch.randn(8, 32))
    loss.backward()
    assert loss.dtype == torch.float32
    grads = [q.grad, k.grad, *(p.grad for p in obj.parameters())]
    assert torch.isfinite(loss) and all(torch.isfinite(g).all() for g in grads)
