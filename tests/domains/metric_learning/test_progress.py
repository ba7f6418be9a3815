"""Every long stage of setup and evaluation is a bar through ``ctx.progress`` (issue 42)."""

from pathlib import Path

import torch

from contrasuite.domains.metric_learning.task import MetricLearningTask
from contrasuite.pipelines.config import load_config
from contrasuite.pipelines.standalone import setup_task

CONFIG = Path(__file__).resolve().parents[3] / "configs" / "metric_learning" / "emoji_multi_similarity.yaml"


def test_decoding_stem_cache_and_embedding_stages_are_bars(cache_dir, emoji_root):
    bars = []

    def progress(iterable, desc="", total=None):
        bars.append((desc, total))
        return iterable

    tiny = [f"config.data.cache_dir={cache_dir}", "config.data.image_size=32", "config.data.max_classes=6",
            "config.eval.batch_size=4", "config.batch_size=4"]
    loaded = load_config(CONFIG, tiny, data_root=str(emoji_root))
    task = setup_task(MetricLearningTask(), loaded.config, device=torch.device("cpu"), data_root=emoji_root,
                      progress=progress)
    n_val = len(task.sets["val"])
    assert bars[:3] == [(f"decoding the {len(task.sets[s])} {s} images", len(task.sets[s])) for s in ("train", "val", "test")]
    bars.clear()  # the stem cache may be on disk already: compute it again
    task._stem_all("val")
    assert bars == [(f"frozen stem of the {n_val} val images", -(-n_val // 4))]
    bars.clear()
    cached = task.evaluate("val")
    task.cache = {}  # the path without the stem cache (cache_frozen: false) embeds the images themselves
    whole = task.evaluate("val")
    assert bars == [(f"embedding the {n_val} val images", -(-n_val // 4))] * 2
    assert whole["recall@1"] == cached["recall@1"]
