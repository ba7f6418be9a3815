"""CLIPLoss against a plain-loop reference, extra candidates, the local-loss recipe, gradcheck (scale clamp and bf16:
test_image_text_objectives.py)."""

import math

import pytest
import torch
import torch.nn.functional as F

from contrasuite.core.objectives import CLIPLoss, Distributed


def direction(rows, cols, pos, scale):
    """Mean over rows with a positive of the mean over positives of -log softmax (NT-Xent style)."""
    total, count = 0.0, 0
    for i in range(rows.shape[0]):
        logits = [scale * float(rows[i] @ cols[j]) for j in range(cols.shape[0])]
        positives = [j for j in range(cols.shape[0]) if pos[i][j]]
        if not positives:
            continue
        negatives = [j for j in range(cols.shape[0]) if not pos[i][j]]
        total += sum(
            -logits[p] + math.log(math.exp(logits[p]) + sum(math.exp(logits[j]) for j in negatives)) for p in positives
        ) / len(positives)
        count += 1
    return total / count


def loop_reference(images, texts, pos, scale, extra_texts=None, extra_images=None):
    x = F.normalize(images.double(), dim=1)
    y = F.normalize(texts.double(), dim=1)
    cols_t, pos_t = y, pos.tolist()
    if extra_texts is not None:
        cols_t = torch.cat([y, F.normalize(extra_texts.double(), dim=1)])
        pos_t = [row + [False] * extra_texts.shape[0] for row in pos_t]
    cols_i, pos_i = x, pos.T.tolist()
    if extra_images is not None:
        cols_i = torch.cat([x, F.normalize(extra_images.double(), dim=1)])
        pos_i = [row + [False] * extra_images.shape[0] for row in pos_i]
    return (direction(x, cols_t, pos_t, scale) + direction(y, cols_i, pos_i, scale)) / 2


def test_default_initialisation_and_declaration():
    loss = CLIPLoss()
    assert loss.logit_scale.exp().item() == pytest.approx(1 / 0.07)
    assert loss.distributed is Distributed.GATHER_CANDIDATES


def test_matches_loop_diagonal_and_extras():
    torch.manual_seed(0)
    img, txt, et, ei = torch.randn(5, 4), torch.randn(5, 4), torch.randn(3, 4), torch.randn(2, 4)
    obj = CLIPLoss(init_logit_scale=math.log(4.0))
    eye = torch.eye(5, dtype=torch.bool)
    assert obj(img, txt).item() == pytest.approx(loop_reference(img, txt, eye, 4.0), rel=1e-5)
    got = obj(img, txt, extra_texts=et, extra_images=ei).item()
    assert got == pytest.approx(loop_reference(img, txt, eye, 4.0, et, ei), rel=1e-5)


def test_matches_loop_with_labels():
    torch.manual_seed(1)
    img, txt = torch.randn(6, 4), torch.randn(6, 4)
    labels = torch.tensor([0, 0, 1, 2, 2, 3])
    pos = labels[:, None] == labels[None, :]
    got = CLIPLoss(init_logit_scale=math.log(3.0))(img, txt, labels=labels).item()
    assert got == pytest.approx(loop_reference(img, txt, pos, 3.0), rel=1e-5)


def test_hand_made_orthogonal_pairs():
    # Orthonormal pairs: l_ii = s, l_ij = 0, so each CE is -log(e^s / (e^s + N - 1)).
    n, s = 4, 2.0
    e = torch.eye(n)
    expected = -math.log(math.exp(s) / (math.exp(s) + n - 1))
    assert CLIPLoss(init_logit_scale=math.log(s))(e, e).item() == pytest.approx(expected, rel=1e-6)


def test_local_loss_recipe_matches_global_loss():
    """Each 'rank': local images and texts, the other ranks' texts/images as extras; the mean is global."""
    torch.manual_seed(2)
    img, txt = torch.randn(8, 4), torch.randn(8, 4)
    obj = CLIPLoss()
    ranks = [obj(img[r::2], txt[r::2], extra_texts=txt[1 - r :: 2], extra_images=img[1 - r :: 2]) for r in range(2)]
    assert ((ranks[0] + ranks[1]) / 2).item() == pytest.approx(obj(img, txt).item(), rel=1e-6)


def test_gradcheck_float64_inputs_scale_and_weights():
    torch.manual_seed(4)
    img = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    txt = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    ei = torch.randn(2, 3, dtype=torch.float64, requires_grad=True)
    w = (torch.rand(4, 4, dtype=torch.float64) + 0.5).requires_grad_()
    scale = torch.tensor(1.2, dtype=torch.float64, requires_grad=True)
    obj = CLIPLoss()

    def fn(img, txt, ei, w, s):
        return torch.func.functional_call(obj, {"logit_scale": s}, (img, txt), {"extra_images": ei, "neg_weight": w})

    assert torch.autograd.gradcheck(fn, (img, txt, ei, w, scale))


def test_bad_input_names_argument():
    with pytest.raises(ValueError, match="candidates"):
        CLIPLoss()(torch.randn(3, 2))
    with pytest.raises(ValueError, match="neg_weight"):
        CLIPLoss()(torch.randn(3, 2), torch.randn(3, 2), neg_weight=torch.ones(2, 3))
