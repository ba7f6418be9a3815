"""The cached stem features reach the training step NCHW, whatever layout the stem ran in or the cache file holds:
otherwise a cache written by a channels-last stem decides every later run's layout (``run.memory_format``)."""

from pathlib import Path

import torch

from contrasuite.domains.metric_learning.task import MetricLearningTask
from contrasuite.pipelines.config import load_config
from contrasuite.pipelines.standalone import setup_task

CONFIG = Path(__file__).resolve().parents[3] / "configs" / "metric_learning" / "emoji_multi_similarity.yaml"


def tiny_task(cache: Path, emoji_root: Path) -> MetricLearningTask:
    tiny = [f"config.data.cache_dir={cache}", "config.data.image_size=32", "config.data.max_classes=6",
            "config.eval.batch_size=4", "config.batch_size=4"]
    loaded = load_config(CONFIG, tiny, data_root=str(emoji_root))
    return setup_task(MetricLearningTask(), loaded.config, device=torch.device("cpu"), data_root=emoji_root)


def test_stem_features_are_nchw_even_from_a_channels_last_cache_file(tmp_path, emoji_root):
    task = tiny_task(tmp_path, emoji_root)
    assert task.cache and all(t.is_contiguous() for t in task.cache.values())
    (val,) = [p for p in tmp_path.rglob("*.pt") if p.name.startswith("emoji-val")]
    features = torch.load(val, weights_only=True)
    torch.save(features.contiguous(memory_format=torch.channels_last), val)  # as a channels-last stem wrote it
    again = tiny_task(tmp_path, emoji_root)
    assert again.cache["val"].is_contiguous() and torch.equal(again.cache["val"], task.cache["val"])
    batch, _ = next(iter(again.batches(0)))
    assert batch.is_contiguous()
