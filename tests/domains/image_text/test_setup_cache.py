"""Setup's disk caches (trunk features, generated negatives): written once, reused by the next setup, missed
when a setting they depend on changes, computed by rank 0 alone under two processes; every long phase shows
progress; training on cached features gives the same losses as on freshly computed ones."""

from pathlib import Path

import numpy as np
import pytest
import torch

from contrasuite.domains.image_text import features, negatives
from contrasuite.domains.disk_cache import shared_load_or_compute
from contrasuite.domains.image_text.task import ImageTextTask
from contrasuite.pipelines.config import load_config
from contrasuite.pipelines.standalone import StepRunner, setup_task
from tests.two_ranks import gloo_group, spawn_two

CONFIG = Path(__file__).resolve().parents[3] / "configs" / "image_text" / "reduced_text_image_negatives.yaml"
TINY = ["config.data.limit=30", "config.data.unseen_style=null", "config.model.pretrained_trunks=false",
        "config.model.image_size=64", "run.precision=fp32", "config.batch_size=16"]


class Calls:
    """Counts the trunk passes (by kind) and negative generations of the setups it watches; records the bars."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.trunk: list[str] = []
        self.generated = 0
        self.bars: list[tuple[str, int | None]] = []
        run_trunk, generate = features.run_trunk, negatives.generate

        def counted_trunk(fn, *args, **kwargs):
            self.trunk.append(fn.__name__)
            return run_trunk(fn, *args, **kwargs)

        def counted_generate(*args, **kwargs):
            self.generated += 1
            return generate(*args, **kwargs)

        monkeypatch.setattr(features, "run_trunk", counted_trunk)
        monkeypatch.setattr(negatives, "generate", counted_generate)

    def progress(self, iterable, desc="", total=None):
        self.bars.append((desc, total))
        return iterable

    def reset(self) -> None:
        self.trunk, self.generated, self.bars = [], 0, []


def set_up(root: Path, cache: Path, *overrides: str, progress=None, seed: int = 0) -> ImageTextTask:
    """The task as the trainer sets it up on one process (the random trunks seeded by ``seed``)."""
    loaded = load_config(CONFIG, [*TINY, f"config.cache_dir={cache}", *overrides], data_root=str(root))
    torch.manual_seed(seed)
    return setup_task(ImageTextTask(), loaded.config, device=torch.device("cpu"), data_root=root, progress=progress)


def test_second_setup_reuses_the_caches(tmp_path, emoji_root, monkeypatch):
    calls = Calls(monkeypatch)
    first = set_up(emoji_root, tmp_path, progress=calls.progress)
    assert sorted(calls.trunk) == ["image_features", "text_features"] and calls.generated == 1
    files = sorted(p.name.split("-")[0] for p in (tmp_path / "image_text").iterdir())
    assert files == ["images", "negatives", "texts"]  # no temporary file left behind
    calls.reset()
    again = set_up(emoji_root, tmp_path, progress=calls.progress)
    assert calls.trunk == [] and calls.generated == 0
    assert torch.equal(again.text_features, first.text_features)
    assert torch.equal(again.styles["twitter"].features, first.styles["twitter"].features)
    assert again.text_records == first.text_records
    assert np.array_equal(again.styles["twitter"].images, first.styles["twitter"].images)


def test_a_changed_setting_misses_the_cache(tmp_path, emoji_root, monkeypatch):
    calls = Calls(monkeypatch)
    set_up(emoji_root, tmp_path)
    for overrides, seed, trunk, generated in [
        (["config.model.image_size=32"], 0, ["image_features"], 0),  # an image setting: the image trunk only
        (["config.model.text_segments=1"], 0, ["text_features"], 0),  # a text setting: the text trunk only
        (["config.optim.lr=0.01"], 0, [], 0),  # a setting neither depends on: both read back
        (["config.negatives.per_operation=1"], 0, ["image_features", "text_features"], 1),  # other negatives
        ([], 1, ["image_features", "text_features"], 0),  # other trunk weights
    ]:
        calls.reset()
        set_up(emoji_root, tmp_path, *overrides, seed=seed)
        assert (sorted(calls.trunk), calls.generated) == (trunk, generated), overrides or f"seed {seed}"


def test_progress_names_every_long_phase(tmp_path, emoji_root, monkeypatch):
    calls = Calls(monkeypatch)
    set_up(emoji_root, tmp_path, progress=calls.progress)
    bars = dict(calls.bars)
    assert bars["decoding twitter emoji images"] is None  # a count of archive members as they are read
    assert bars["text negatives of 30 captions"] == 30
    assert any(d.startswith("twitter image negatives of ") for d in bars)
    assert bars["loading the pretrained_towers towers"] == 1
    assert any(d.startswith("twitter image trunk of ") for d in bars)
    assert any(d.startswith("text trunk of ") for d in bars)


def test_losses_on_cached_features_equal_fresh_ones(tmp_path, emoji_root):
    def losses(cache: Path) -> list[float]:
        task = set_up(emoji_root, cache)
        run, batches = StepRunner(task, torch.device("cpu"), "fp32"), task.batches(0)
        return [run(next(batches), 0, step)["loss"] for step in range(2)]

    fresh = losses(tmp_path)
    assert losses(tmp_path) == fresh  # read back from the caches
    assert losses(tmp_path / "other") == fresh  # computed again in an empty cache


def _rank(rank: int, port: int, file: Path, out: Path) -> None:
    with gloo_group(rank, port):
        def compute():
            (out / f"computed-{rank}").touch()
            return torch.arange(3)

        value = shared_load_or_compute(file, compute, rank)
        torch.save(value, out / f"value-{rank}.pt")


def test_rank_zero_computes_the_others_read(tmp_path):
    spawn_two(_rank, tmp_path / "cache" / "x.pt", tmp_path)
    assert sorted(p.name for p in tmp_path.glob("computed-*")) == ["computed-0"]
    for rank in range(2):
        assert torch.equal(torch.load(tmp_path / f"value-{rank}.pt"), torch.arange(3))
