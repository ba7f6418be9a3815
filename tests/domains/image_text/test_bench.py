"""``contrasuite bench image_text --against peer`` end to end on tiny towers (random trunks, a few emoji), and
``--report`` rendering its record into a page."""

import json

import pytest

from contrasuite.domains.image_text import bench

TINY = ["config.model.pretrained_trunks=false", "config.model.image_size=32", "config.model.head_hidden=16",
        "config.model.embed_dim=8", "config.data.limit=30", "config.batch_size=8", "config.eval_batch_size=64"]


@pytest.mark.parametrize("frozen", [True, False], ids=["cached_features", "whole_towers"])
def test_the_bench_runs_and_its_record_renders(tmp_path, emoji_root, frozen):
    record, page = tmp_path / "record.json", tmp_path / "page.md"
    overrides = [*TINY, f"config.cache_dir={tmp_path / 'cache'}"]
    argv = ["--data-root", str(emoji_root), "--batches", "2", "--steps", "1", "--repeats", "2", "--profile",
            "--output", str(record), "--page", str(page), *(f"--override={o}" for o in overrides),
            *([] if frozen else ["--towers"])]
    assert bench.main(argv) == 0
    kept = json.loads(record.read_text())
    assert kept["section"] == ("image_text" if frozen else "image_text+towers") and kept["frozen_trunks"] is frozen
    assert kept["loss_check"]["equal"], kept["loss_check"]
    # whole towers: Adam's first steps move a weight by about lr whatever the size of its gradient, so rounding-level
    # differences of the random trunks' near-zero gradients move some weights apart
    assert kept["weights_gap_after"] < (1e-4 if frozen else 0.1)
    assert len(kept["rounds"]) == 2 and kept["profile"]["peer"]
    assert not page.exists()  # the run writes its record; --report renders it
    assert bench.main(["--report", "--output", str(record), "--page", str(page)]) == 0
    text = page.read_text()
    assert f"<!-- section:{kept['section']} -->" in text and "open_clip_train.train.train_one_epoch" in text
    assert "Where the time goes" in text
    assert ("cached trunk features" if frozen else "train the same two towers end to end") in text
    assert kept["command"].startswith("contrasuite bench image_text --")


def test_a_config_with_hard_negatives_is_refused(tmp_path, emoji_root):
    overrides = [*TINY, f"config.cache_dir={tmp_path / 'cache'}", "config.hard_negatives.texts=true"]
    with pytest.raises(SystemExit, match="hard_negatives"):
        bench.main(["--data-root", str(emoji_root), "--output", str(tmp_path / "r.json"),
                    *(f"--override={o}" for o in overrides)])
