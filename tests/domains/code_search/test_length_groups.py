"""Training batches padded in length groups: the cheapest split, and the same embeddings and gradients as one
padded batch."""

import itertools
import random

import pytest
import torch

from contrasuite.domains.code_search.encoder import length_groups


def split_cost(lengths, groups, cost):
    return sum(len(g) * max(lengths[i] for i in g) + cost for g in groups)


def brute_force(lengths, cost):
    """The least cost over every split of the length-sorted items into consecutive runs."""
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    best = float("inf")
    for cuts in itertools.product((False, True), repeat=len(order) - 1):
        groups, current = [], [order[0]]
        for item, cut in zip(order[1:], cuts):
            if cut:
                groups.append(current)
                current = []
            current.append(item)
        best = min(best, split_cost(lengths, groups + [current], cost))
    return best


@pytest.mark.parametrize("seed", range(6))
def test_the_split_is_the_cheapest_and_covers_the_batch(seed):
    rng = random.Random(seed)
    lengths = [rng.randint(3, 256) for _ in range(rng.randint(2, 10))]
    cost = rng.choice([0, 64, 512, 4096])
    groups = length_groups(lengths, cost)
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    assert split_cost(lengths, groups, cost) == brute_force(lengths, cost)


def test_equal_lengths_stay_one_group_and_a_free_split_separates_every_length():
    assert length_groups([7] * 5, 0) == [[0, 1, 2, 3, 4]]
    assert length_groups([10, 200, 10, 200], 10**6) == [[0, 1, 2, 3]]
    assert length_groups([30, 10, 20, 10], 0) == [[1, 3], [2], [0]]


@pytest.mark.parametrize("cost", [0, 10**6])
def test_grouped_training_embeddings_and_gradients_equal_one_padded_batch(make_task, cost):
    task = make_task("reduced_infonce", [f"config.encoder.group_cost_tokens={cost}", "config.batch_size=8"])
    task.encoder.eval()  # no dropout: both forms see the same network
    pairs = next(iter(task.batches(0))).tolist()
    code = [task.train.code[i] for i in pairs]
    groups = task._grouped(code, "code")
    assert (len(groups) > 1) == (cost == 0)  # the mined code differs in length: a free split separates it
    grouped = task.net(groups=groups)
    torch.testing.assert_close(task.embed_pairs(torch.tensor(pairs))[1], grouped.detach(), atol=0, rtol=0)
    grouped.square().sum().backward()
    grads = {n: p.grad.clone() for n, p in task.encoder.named_parameters() if p.grad is not None}
    task.encoder.zero_grad()
    padded = task.encoder(**task.encoder.tokenize(code, task.encoder.max_length("code")))
    padded.square().sum().backward()
    torch.testing.assert_close(grouped, padded, atol=1e-5, rtol=1e-5)
    assert len(grads) > 10
    for n, p in task.encoder.named_parameters():
        if n in grads:
            torch.testing.assert_close(grads[n], p.grad, atol=1e-5, rtol=1e-4, msg=n)


def test_grouping_off_pads_the_whole_batch(make_task):
    task = make_task("reduced_infonce", ["config.encoder.group_cost_tokens=null"])
    texts = ["a", "much longer text than the first one"]
    ((index, tokens),) = task.encoder.tokenize_groups(texts, 64)
    assert index.tolist() == [0, 1] and tokens["input_ids"].shape[0] == 2
