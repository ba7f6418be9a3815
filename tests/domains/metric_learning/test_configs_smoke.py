"""Every shipped config trains a few steps on a tiny subset through the engine; retrieve on its run."""

import json
from pathlib import Path

import pytest
from PIL import Image

from contrasuite.pipelines import trainer
from contrasuite.pipelines.config import load_config
from contrasuite.domains.metric_learning.retrieve import main as retrieve_main

CONFIGS = sorted((Path(__file__).resolve().parents[3] / "configs" / "metric_learning").glob("*.yaml"))
RUNS: dict[str, Path] = {}


def tiny_overrides(path: Path, tmp: Path, cache: Path) -> list[str]:
    m = 5 if "cub200" in path.name else 2
    health = 1 if path.stem == "emoji_multi_similarity" else 0  # health metrics and plots once
    return [
        "run.epochs=1", "run.max_steps=2", "run.progress=false", f"run.health_every_steps={health}",
        f"run.output_root={tmp}", f"config.data.cache_dir={cache}", "config.data.image_size=32",
        "config.data.max_classes=6", f"config.sampler.batch_size={2 * m}", "config.eval.batch_size=16",
    ]


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_config_trains_and_evaluates(path, tmp_path_factory, cache_dir, emoji_root, tiny_cub_session):
    data_root = tiny_cub_session if "cub200" in path.name else emoji_root
    tmp = tmp_path_factory.mktemp(path.stem)
    loaded = load_config(path, tiny_overrides(path, tmp, cache_dir), data_root=str(data_root))
    run_dir = trainer.train(loaded)
    val = json.loads((run_dir / "eval_val.json").read_text())["metrics"]
    test = trainer.evaluate(run_dir, "best")["metrics"]
    for metrics in (val, test):
        assert set(metrics) == {"recall@1", "recall@2", "recall@4", "recall@8", "map@r"}
        assert all(0.0 <= v <= 1.0 for v in metrics.values())
    assert (run_dir / "epoch_seconds.jsonl").is_file() or loaded.run.max_steps is not None
    RUNS[path.stem] = run_dir


def test_retrieve_prints_top_matches_and_writes_strip(tmp_path, cache_dir, capsys):
    run_dir = RUNS.get("emoji_hyperbolic") or RUNS.get("emoji_multi_similarity")
    if run_dir is None:
        pytest.skip("needs the emoji smoke runs of this module")
    gallery = tmp_path / "gallery"
    gallery.mkdir()
    sources = sorted(next((cache_dir / "emoji").glob("google-64-*")).glob("1f34*.png"))[:5]
    for p in sources:
        (gallery / p.name).write_bytes(p.read_bytes())
    query = next((cache_dir / "emoji").glob("twitter-64-*")) / sources[0].name
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
