"""``contrasuite compare metric_learning``: its arms, the page drawn from hand-made records, a quick run through the runner."""

import json
from pathlib import Path

import pytest

import contrasuite.domains.metric_learning.report as report
from contrasuite.pipelines.config import load_config

ROOT = Path(__file__).resolve().parents[3]


def record(arm, seed, r1, val, seconds, cpu=60.0, steps=288, epochs=6):
    return {"arm": arm, "group": "", "seed": seed, "metrics": {m: r1 for m in report.METRICS},
            "selected": {"checkpoint": "best", "validation": val, "validation_metric": "recall@1"},
            "timings": {"cpu_seconds": cpu, "steps_run": steps, "epochs_run": epochs},
            "machine": {"cpu": "CPU X", "cores": 2, "threads": 1, "load_average_1min": 2.0},
            "epoch_seconds": seconds}


def test_arms_are_the_losses_and_two_untrained_references():
    arms = {a.name: a for a in report.arms()}
    assert list(arms) == ["untrained", "untrained_head", *report.LOSSES]
    assert arms["untrained"].config == "configs/metric_learning/emoji_multi_similarity.yaml"
    assert arms["untrained"].overrides == ("run.epochs=0", "config.model.embedding_dim=0")
    assert arms["circle"].config == "configs/metric_learning/emoji_circle.yaml" and arms["circle"].checkpoint == "best"
    assert all(e.arm in arms and e.baseline in arms and e.metric == "recall@1" for e in report.EFFECTS)


def test_page_from_records():
    records = [record("untrained", 0, 9.3, 13.9, [], cpu=10.0, steps=0, epochs=0),
               record("circle", 0, 20.0, 34.0, [9.0, 3.0, 5.0]), record("circle", 1, 18.0, 30.0, [8.0, 4.0]),
               record("supcon", 0, 22.0, 33.0, [6.0, 2.0]), record("supcon", 1, 23.0, 35.0, [6.0, 2.0])]
    page = report.render_page(False, records, "CMD")
    rows = {line.split(" | ")[0]: line.split(" | ") for line in page.splitlines() if line.startswith("| ")}
    untrained = rows["| no training: ImageNet EfficientNet-Lite0, pooled 1280-d features"]
    assert untrained[2] == "0" and untrained[3] == "9.3" and untrained[8] == "13.9" and untrained[9] == "-"
    circle = rows["| `circle` (CircleLoss, m=0.4, gamma=80)"]
    assert circle[2] == "0, 1" and circle[3] == "19.0 ± 1.4" and circle[8] == "32.0 ± 2.8"
    assert circle[9] == "4.0" and circle[10] == "60"  # first epoch of each run dropped: mean of 3, 5 and 4
    assert "- `circle` minus `supcon`: -3.5 ± 1.1 over 2 and 2 seeds (beyond 2 standard errors)." in page
    assert "`CMD`" in page and "Not yet run: untrained_head, multi_similarity, hyperbolic, pml_circle" in page
    assert "for 6 epochs of 48 batches (64 images = 32 classes x 2" in page and "AdamW 3e-4 (head 1e-3)" in page
    assert "CPU time of all 5 runs (train and eval children): 4.2 min." in page


def test_the_protocol_text_comes_from_the_config():
    """The epochs, image size and batch on the page are the config's, not typed into the report."""
    loaded = load_config(ROOT / "configs" / "metric_learning" / "emoji_multi_similarity.yaml", [])
    text = report.protocol([])
    assert f"for {loaded.run.epochs} epochs" in text and f"{loaded.config.data.image_size}x" in text
    longer = report.protocol([], ["run.epochs=9", "config.batch_size=32"])
    assert "for 9 epochs" in longer and "(32 images = 16 classes x 2" in longer


@pytest.mark.slow
def test_a_quick_run_through_the_runner(tmp_path, emoji_root, cache_dir, monkeypatch):
    """``contrasuite compare metric_learning --quick``: an untrained reference and a loss, seed 0, records and page."""
    monkeypatch.setenv("CONTRASUITE_CACHE", str(cache_dir))  # the children extract the emoji archives there once
    assert report.main(["--quick", "--arms", "untrained", "circle", "--seeds", "0", "--cache", str(tmp_path),
                        "--data-root", str(emoji_root)]) == 0
    untrained = json.loads((tmp_path / "records" / "untrained_seed0.json").read_text())
    circle = json.loads((tmp_path / "records" / "circle_seed0.json").read_text())
    assert untrained["epoch_seconds"] == [] and untrained["timings"]["epochs_run"] == 0
    assert set(untrained["metrics"]) == set(report.METRICS) and 0.0 <= untrained["metrics"]["recall@1"] <= 100.0
    assert circle["command"].startswith("contrasuite train configs/metric_learning/emoji_circle.yaml run.resume=auto "
                                        "run.max_steps=2")
    assert circle["selected"]["checkpoint"] == "best" and circle["selected"]["validation_metric"] == "recall@1"
    assert len(circle["epoch_seconds"]) == 1 and circle["data_version"] != "undeclared"
    page = (tmp_path / "metric_learning.md").read_text()
    assert "(QUICK smoke version)" in page and "| `circle` (CircleLoss, m=0.4, gamma=80) | ours | 0 |" in page
    assert "| no training: ImageNet EfficientNet-Lite0, pooled 1280-d features | - | 0 |" in page
