"""The shared cells of the results pages."""

import pytest

from contrasuite.pipelines.tables import difference, mean_std


def test_mean_std_over_seeds():
    assert mean_std([]) == "-"
    assert mean_std([0.5], scale=100) == "50.00"
    assert mean_std([1.0, 2.0, 3.0], digits=1) == "2.0 ± 1.0"


def test_a_difference_of_means_has_the_welch_standard_error():
    d = difference([3.0, 4.0], [1.0, 2.0, 3.0])
    assert d.mean == pytest.approx(1.5) and d.se == pytest.approx((0.5 / 2 + 1.0 / 3) ** 0.5) and d.seeds == (2, 3)
    assert not d.beyond and difference([10.0, 10.1], [1.0, 1.1]).beyond
    with pytest.raises(ValueError, match="two values a side"):
        difference([1.0], [1.0, 2.0])
