"""m-per-class batches: balanced, seeded by (seed, epoch), replacement only for small classes."""

from collections import Counter

import pytest

from contrasuite.domains.metric_learning.sampler import MPerClassBatches

LABELS = [c for c in range(10) for _ in range(4)] + [10]  # class 10 has a single image


def test_every_batch_has_distinct_classes_m_times_each():
    batches = list(MPerClassBatches(LABELS, m=2, batch_size=8, seed=0))
    assert len(batches) == len(LABELS) // 8
    for idx in batches:
        counts = Counter(LABELS[i] for i in idx)
        assert len(idx) == 8 and len(counts) == 4 and set(counts.values()) == {2}
        for c in counts:
            picked = [i for i in idx if LABELS[i] == c]
            assert c == 10 or len(set(picked)) == 2  # without replacement when the class is large enough


def test_seeded_per_epoch():
    s = MPerClassBatches(LABELS, m=2, batch_size=8, seed=3)
    first = list(s)
    assert list(s) == first
    s.set_epoch(1)
    assert list(s) != first
    assert list(MPerClassBatches(LABELS, m=2, batch_size=8, seed=4)) != first


def test_all_classes_visited_over_an_epoch():
    labels = [c for c in range(8) for _ in range(2)]
    seen = {labels[i] for idx in MPerClassBatches(labels, m=2, batch_size=4, seed=0) for i in idx}
    assert seen == set(range(8))


def test_bad_sizes_name_the_key():
    with pytest.raises(ValueError, match=r"config\.batch_size \(8\) must be a multiple of config\.sampler\.m_per_class"):
        MPerClassBatches(LABELS, m=3, batch_size=8)
    with pytest.raises(ValueError, match="only 11 classes"):
        MPerClassBatches(LABELS, m=1, batch_size=12)


def test_whole_groups_share_a_batch():
    labels = [c for c in range(24) for _ in range(2)]
    groups = [f"g{c // 3}" for c in labels]  # 8 groups of 3 classes; 6 classes per batch = 2 whole groups
    batches = list(MPerClassBatches(labels, m=2, batch_size=12, seed=0, groups=groups))
    assert len(batches) == 4
    for idx in batches:
        classes = {labels[i] for i in idx}
        assert len(classes) == 6 and len({c // 3 for c in classes}) == 2
    ungrouped = list(MPerClassBatches(labels, m=2, batch_size=12, seed=0))
    assert any(len({labels[i] // 3 for i in idx}) > 2 for idx in ungrouped)


def test_a_group_larger_than_the_batch_is_subsampled():
    labels = [c for c in range(10) for _ in range(2)]
    groups = ["big"] * 16 + ["a", "a", "b", "b", "c", "c", "d", "d"][:4]
    for idx in MPerClassBatches(labels, m=2, batch_size=8, seed=1, groups=groups):
        counts = Counter(labels[i] for i in idx)
        assert len(idx) == 8 and len(counts) == 4 and set(counts.values()) == {2}
    with pytest.raises(ValueError, match="group names"):
        MPerClassBatches(labels, m=2, batch_size=8, groups=["a"])
