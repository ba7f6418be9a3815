"""``contrasuite bench image_text --against peer`` end to end on tiny towers (random trunks, a few emoji), and
``--report`` rendering its record into a page."""

import json

import pytest
import torch
from torch import nn

from contrasuite.domains.image_text import bench

TINY = ["config.model.pretrained_trunks=false", "config.model.image_size=32", "config.model.head_hidden=16",
        "config.model.embed_dim=8", "config.data.limit=30", "config.batch_size=8", "config.eval_batch_size=64"]


MODES = {"cached_features": ([], "image_text", "cached trunk features"),
         "whole_towers": (["--towers"], "image_text+towers", "train the same two towers end to end"),
         "locked_trunks": (["--locked"], "image_text+locked", "runs the frozen trunks forward"),
         "to_checkpoint": (["--to-checkpoint", "--override=run.epochs=2"], "image_text", "To the checkpoint it selects")}


@pytest.mark.parametrize("mode", MODES)
def test_the_bench_runs_and_its_record_renders(tmp_path, emoji_root, mode):
    flags, section, words = MODES[mode]
    record, page = tmp_path / "record.json", tmp_path / "page.md"
    overrides = [*TINY, f"config.cache_dir={tmp_path / 'cache'}"]
    argv = ["--data-root", str(emoji_root), "--batches", "2", "--steps", "1", "--repeats", "2", "--profile",
            "--output", str(record), "--page", str(page), *(f"--override={o}" for o in overrides), *flags]
    assert bench.main(argv) == 0
    kept = json.loads(record.read_text())
    assert kept["section"] == section and kept["frozen_trunks"] is (mode != "whole_towers")
    assert kept["peer_runs_trunks"] is (mode in ("whole_towers", "locked_trunks"))
    assert kept["loss_check"]["equal"], kept["loss_check"]
    # whole towers: Adam's first steps move a weight by about lr whatever the size of its gradient, so rounding-level
    # differences of the random trunks' near-zero gradients move some weights apart; locked trunks: ours trains on
    # their features rounded to fp16
    assert kept["weights_gap_after"] < {"whole_towers": 0.1, "locked_trunks": 0.05}.get(mode, 1e-4)
    assert len(kept["rounds"]) == 2 and kept["profile"]["peer"]
    assert not page.exists()  # the run writes its record; --report renders it
    assert bench.main(["--report", "--output", str(record), "--page", str(page)]) == 0
    text = page.read_text()
    assert f"<!-- section:{kept['section']} -->" in text and "open_clip_train.train.train_one_epoch" in text
    assert "Where the time goes" in text
    assert ("Compute bound" in text) is (kept["compute"]["flop_per_step"] > 0)  # fp32 on the CPU: every mode
    assert words in text
    assert kept["command"].startswith("contrasuite bench image_text --")
    if mode == "locked_trunks":  # ours' setup filled an empty feature cache, and the projection counts it
        assert kept["ours_setup_s"] > 0 and kept["feature_cache_inputs"]["images"] > 0
        assert "to the config's checkpoint" in text and "with an empty feature cache" in text
    if mode == "to_checkpoint":  # the config as shipped (its last epoch's weights), the bench's device and precision
        trained = kept["to_checkpoint"]
        assert trained["checkpoint"] == "last" and trained["selected_step"] == trained["steps_run"] > 0
        assert trained["command"].endswith("run.epochs=2 run.device=cpu run.precision=fp32")
        assert len(trained["rounds"]) == 2  # --repeats, alternating with the peer's run
        for row in trained["rounds"]:  # open_clip's main saves every epoch: 2 here, each with the optimizer's state
            saves = row["peer_epoch_ends"]
            assert saves["count"] == 2 and 0 < saves["cpu_s"] < row["peer_cpu_s"]
            assert saves["bytes"] > 3 * 4 * kept["trainable_parameters"] and row["ours_cpu_s"] > 0
        assert "2 epoch end(s) as open_clip's `main` runs them" in text and "over the 2 rounds" in text


def test_locked_trunks_stay_in_eval_mode_in_the_peers_training_loop():
    towers = nn.Module()
    towers.image_trunk, towers.text_trunk, towers.image_head = nn.BatchNorm2d(2), nn.Dropout(), nn.Dropout()
    locked = bench.OpenCLIPTowers(towers, torch.tensor(1.0), cached=False, locked=True).train()
    assert not towers.image_trunk.training and not towers.text_trunk.training and towers.image_head.training
    bench.OpenCLIPTowers(towers, torch.tensor(1.0), cached=False).train()  # whole towers: all of them train
    assert towers.image_trunk.training and towers.text_trunk.training and locked.training


def test_locked_needs_frozen_trunks(tmp_path, emoji_root):
    overrides = [*TINY, "config.model.freeze_trunks=false"]
    with pytest.raises(SystemExit, match="freeze_trunks false"):
        bench.main(["--data-root", str(emoji_root), "--locked", "--output", str(tmp_path / "r.json"),
                    *(f"--override={o}" for o in overrides)])


def test_a_config_with_hard_negatives_is_refused(tmp_path, emoji_root):
    overrides = [*TINY, f"config.cache_dir={tmp_path / 'cache'}", "config.hard_negatives.texts=true"]
    with pytest.raises(SystemExit, match="hard_negatives"):
        bench.main(["--data-root", str(emoji_root), "--output", str(tmp_path / "r.json"),
                    *(f"--override={o}" for o in overrides)])
