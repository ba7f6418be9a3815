"""``contrasuite compare metric_learning``: the untrained reference runs and the page from stored runs."""

import json
from pathlib import Path

import contrasuite.domains.metric_learning.report as report

CONFIG = Path(__file__).resolve().parents[3] / "configs" / "metric_learning" / "emoji_multi_similarity.yaml"


def test_untrained_reference_runs_through_the_pipeline(tmp_path, cache_dir, emoji_root):
    tiny = [f"config.data.cache_dir={cache_dir}", "config.data.image_size=32", "config.data.max_classes=6",
            "config.sampler.batch_size=4", "config.eval.batch_size=16"]
    extra = report.BASELINES["untrained"][1]
    out = report.run_one(CONFIG, 0, str(tmp_path), str(emoji_root), [*tiny, *extra])
    assert out["epoch_seconds"] == [] and out["best_checkpoint_epoch"] == 0
    assert set(out["test"]) == set(report.METRICS) and 0.0 <= out["test"]["recall@1"] <= 100.0
    assert out["percent"] is True  # the stored run says its unit (runs stored before issue 42 hold fractions)
    assert (Path(out["run_dir"]) / "checkpoints" / "best.pt").is_file()


def stored(test_r1: float, val: float, seconds: list[float]) -> dict:
    return {"seed": 0, "test": {m: test_r1 for m in report.METRICS}, "best_val": val, "epoch_seconds": seconds}


def test_page_from_stored_runs(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    runs = {"untrained_seed0": stored(0.093, 0.139, []),
            "circle_seed0": stored(0.20, 0.34, [9.0, 3.0, 5.0]),
            "circle_seed1": {**stored(0.18, 0.30, [8.0, 4.0]), "seed": 1}}
    for name, data in runs.items():
        (results / f"{name}.json").write_text(json.dumps(data))
    page = tmp_path / "page.md"
    argv = ["--table-only", "--losses", "untrained", "circle", "--results-dir", str(results), "--out", str(page)]
    assert report.main(argv) == 0
    rows = {line.split(" | ")[0]: line.split(" | ") for line in page.read_text().splitlines() if line.startswith("| ")}
    untrained = rows["| no training: ImageNet EfficientNet-Lite0, pooled 1280-d features"]
    assert untrained[3] == "9.3" and untrained[8] == "13.9" and untrained[9] == "-"
    circle = rows["| `circle` (CircleLoss, m=0.4, gamma=80)"]
    assert circle[2] == "0,1" and circle[3] == "19.0 ± 1.4" and circle[8] == "32.0 ± 2.8"
    assert circle[9] == "4.0"  # first epoch of each run dropped: mean of 3, 5 and 4
    assert "--table-only" not in page.read_text()  # the page names the command that trains its runs


def test_runs_stored_in_percent_render_like_runs_stored_as_fractions(tmp_path):
    """Runs stored before recall became a percent (fractions, no ``percent`` key) and after render the same page."""
    pages = []
    for scale, marker in ((1.0, {}), (100.0, {"percent": True})):
        results = tmp_path / f"results{scale:.0f}"
        results.mkdir()
        for seed, (r1, val) in enumerate(((0.20, 0.34), (0.18, 0.30))):
            run = {**stored(scale * r1, scale * val, [9.0, 3.0]), "seed": seed, **marker}
            (results / f"circle_seed{seed}.json").write_text(json.dumps(run))
        page = results / "page.md"
        assert report.main(["--table-only", "--losses", "circle", "--results-dir", str(results), "--out", str(page)]) == 0
        pages.append(page.read_text().replace(str(results), "RESULTS"))
    assert pages[0] == pages[1] and "| 19.0 ± 1.4 |" in pages[0]
