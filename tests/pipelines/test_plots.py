"""Run plots: a similarity histogram of a batch without negatives is drawn without numpy's 0/0 warning."""

import warnings

import torch

from contrasuite.pipelines.plots import similarity_histogram


def test_a_histogram_without_negatives_is_written_without_a_warning(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's "invalid value encountered in divide" for the empty negatives
        path = similarity_histogram(torch.tensor([0.4]), torch.empty(0), tmp_path / "sim.png", "one pair")
    assert path.stat().st_size > 0
