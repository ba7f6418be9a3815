"""Every shipped config trains a few steps on a tiny subset through the engine; retrieve on its run."""

import json
import math
from pathlib import Path

import pytest
import torch
from PIL import Image

from contrasuite.pipelines import trainer
from contrasuite.pipelines.config import load_config
from contrasuite.domains.metric_learning.retrieve import main as retrieve_main
from tests.domains.metric_learning.conftest import emoji_gallery

CONFIGS = sorted((Path(__file__).resolve().parents[3] / "configs" / "metric_learning").glob("*.yaml"))


def tiny_overrides(path: Path, tmp: Path, cache: Path) -> list[str]:
    m = 5 if "cub200" in path.name else 2
    health = 1 if path.stem == "emoji_multi_similarity" else 0  # health metrics and plots once
    return [
        "run.epochs=1", "run.max_steps=2", "run.progress=false", f"run.health_every_steps={health}",
        f"run.output_root={tmp}", f"config.data.cache_dir={cache}", "config.data.image_size=32",
        "config.data.max_classes=6", f"config.batch_size={2 * m}", "config.eval.batch_size=16",
    ]


def smoke_run(path: Path, tmp: Path, cache: Path, data_root: Path) -> tuple[Path, int | None]:
    """Train ``path`` for the tiny schedule; returns its run folder and ``run.max_steps``."""
    loaded = load_config(path, tiny_overrides(path, tmp, cache), data_root=str(data_root))
    return trainer.train(loaded), loaded.run.max_steps


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_config_trains_and_evaluates(path, tmp_path_factory, cache_dir, emoji_root, tiny_cub_session):
    data_root = tiny_cub_session if "cub200" in path.name else emoji_root
    run_dir, max_steps = smoke_run(path, tmp_path_factory.mktemp(path.stem), cache_dir, data_root)
    val = json.loads((run_dir / "eval_val.json").read_text())["metrics"]
    test = trainer.evaluate(run_dir, "best")["metrics"]
    for metrics in (val, test):
        assert set(metrics) == {"recall@1", "recall@2", "recall@4", "recall@8", "map@r"}
        assert all(0.0 <= v <= 100.0 for v in metrics.values())  # percent
    assert (run_dir / "epoch_seconds.jsonl").is_file() or max_steps is not None


def test_the_optimizer_of_a_shipped_config_follows_its_optim_section(tmp_path, cache_dir, emoji_root):
    """emoji_multi_similarity: AdamW, the head at its group's lr, the trainable backbone blocks at optim.lr, one weight
    decay; every lr decays on a cosine to 0 at run.epochs (computed here from the config)."""
    path = next(p for p in CONFIGS if p.stem == "emoji_multi_similarity")
    loaded = load_config(path, [*tiny_overrides(path, tmp_path, cache_dir), "run.epochs=3"], data_root=str(emoji_root))
    run = trainer.Trainer(loaded)
    task, o = run.task, loaded.config.optim
    opt = task.optimizers()["model"]
    head, backbone = opt.param_groups  # the multi-similarity loss learns nothing: no objective group
    assert isinstance(opt, torch.optim.AdamW)
    assert head["params"] == list(task.model.head.parameters()) and head["initial_lr"] == o.groups["head"].lr
    assert backbone["params"] == [p for p in task.model.backbone.parameters() if p.requires_grad]
    assert backbone["initial_lr"] == o.lr and head["weight_decay"] == backbone["weight_decay"] == o.weight_decay
    end = loaded.run.epochs * len(task.sampler)
    for s in range(end + 2):
        for group in (head, backbone):
            want = group["initial_lr"] * 0.5 * (1 + math.cos(math.pi * min(s, end) / end))
            assert group["lr"] == pytest.approx(want, rel=1e-12, abs=1e-15)
        task.schedulers()["model"].step()
    run.close()


def test_retrieve_prints_top_matches_and_writes_strip(tmp_path, cache_dir, emoji_root, capsys):
    config = next(p for p in CONFIGS if p.stem == "emoji_hyperbolic")
    run_dir, _ = smoke_run(config, tmp_path / "runs", cache_dir, emoji_root)
    gallery = tmp_path / "gallery"
    query = emoji_gallery(cache_dir, gallery)
    (gallery / "broken.png").write_text("not an image")  # skipped with one warning
    out = tmp_path / "strip.png"
    assert retrieve_main([str(run_dir), str(query), str(gallery), "--top", "3", "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert "broken.png: not a readable image" in captured.err and "skipped 1 of 6 files" in captured.err
    lines = [line.split("\t") for line in captured.out.splitlines() if "\t" in line]
    assert [int(r[0]) for r in lines] == [1, 2, 3]
    scores = [float(r[1]) for r in lines]
    assert scores == sorted(scores, reverse=True)
    assert all(Path(r[2]).parent == gallery for r in lines)
    assert Image.open(out).size[0] == 4 * 96
    assert retrieve_main([str(run_dir), str(tmp_path / "nope.png"), str(gallery)]) == 2
    assert retrieve_main([str(run_dir), str(gallery / "broken.png"), str(gallery)]) == 2
    assert "QUERY_IMAGE " in capsys.readouterr().err


def test_the_shipped_network_is_channels_last_on_the_cpu_unless_told(tmp_path, cache_dir, emoji_root):
    """``run.memory_format: auto``: metric_learning declares ``channels_last_on_cpu``, so the trainer lays the
    wrapped network's convolution weights out channels-last (pipelines/memory_format.py); ``contiguous`` keeps
    NCHW. One training step runs either way, and the trained weights keep their layout."""
    path = next(p for p in CONFIGS if p.stem == "emoji_multi_similarity")
    for setting, layout in (("auto", torch.channels_last), ("contiguous", torch.contiguous_format)):
        loaded = load_config(path, [*tiny_overrides(path, tmp_path / setting, cache_dir), "run.max_steps=1",
                                    f"run.memory_format={setting}"], data_root=str(emoji_root))
        run = trainer.Trainer(loaded)
        convs = [p for p in run.task.model.parameters() if p.dim() == 4]
        assert convs and all(p.is_contiguous(memory_format=layout) for p in convs), setting
        before = [p.detach().clone() for p in convs]
        run.fit()
        assert any(not torch.equal(p, b) for p, b in zip(convs, before))  # trained
        assert all(p.is_contiguous(memory_format=layout) for p in convs), setting
