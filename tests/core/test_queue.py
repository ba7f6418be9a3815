"""The MoCo FIFO queue: order, wrap-around, checkpointing, use as extra negative columns."""

import pytest
import torch

from contrasuite.core.negatives.queue import NegativeQueue
from contrasuite.core.objectives import InfoNCE


def rows(start, count, dim=2):
    return torch.arange(start, start + count, dtype=torch.float32)[:, None].repeat(1, dim)


def test_fifo_order_and_wrap_around():
    q = NegativeQueue(size=5, dim=2)
    q.enqueue(rows(0, 3))
    assert q.negatives()[:, 0].tolist() == [0, 1, 2]
    q.enqueue(rows(3, 3))  # 3 does not divide 5: wraps, overwrites the oldest (0)
    assert q.negatives()[:, 0].tolist() == [1, 2, 3, 4, 5]
    assert int(q.ptr) == 1
    q.enqueue(rows(6, 2))
    assert q.negatives()[:, 0].tolist() == [3, 4, 5, 6, 7]


def test_batch_larger_than_queue_keeps_newest():
    q = NegativeQueue(size=4, dim=2)
    q.enqueue(rows(0, 7))
    assert sorted(q.negatives()[:, 0].tolist()) == [3, 4, 5, 6]


def test_state_dict_round_trip_and_detached():
    q = NegativeQueue(size=4, dim=3)
    keys = torch.randn(3, 3, requires_grad=True)
    q.enqueue(keys)
    assert not q.negatives().requires_grad
    other = NegativeQueue(size=4, dim=3)
    other.load_state_dict(q.state_dict())
    assert torch.equal(other.negatives(), q.negatives()) and int(other.ptr) == 3
    assert set(q.state_dict()) == {"keys", "ptr", "filled"}


def test_extend_adds_negative_columns_for_objectives():
    torch.manual_seed(0)
    q = NegativeQueue(size=6, dim=4)
    q.enqueue(torch.randn(6, 4))
    a, k = torch.randn(3, 4), torch.randn(3, 4)
    cands, pos = q.extend(k)
    assert cands.shape == (9, 4) and pos.shape == (3, 9) and not pos[:, 3:].any() and pos[:, :3].diagonal().all()
    loss_q = InfoNCE(0.5)(a, cands, pos_mask=pos)
    loss_plain = InfoNCE(0.5)(a, k)
    assert loss_q > loss_plain  # more negatives, larger denominator


def test_bad_shape_names_keys():
    with pytest.raises(ValueError, match="keys must be"):
        NegativeQueue(4, 3).enqueue(torch.randn(2, 5))
