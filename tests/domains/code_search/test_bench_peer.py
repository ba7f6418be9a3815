"""``contrasuite bench code_search --against peer`` on the tiny model: one step per side, a record with both."""

import json

import pytest

import contrasuite.domains.code_search.bench as bench


def test_against_peer_records_both_timings_and_equal_first_losses(tiny_model, mined, tmp_path):
    pytest.importorskip("sentence_transformers")
    out, page = tmp_path / "cs.json", tmp_path / "page.md"
    argv = ["--against", "peer", "--threads", "1", "--batches", "1", "--steps", "1", "--repeats", "1",
            "--grad-cache-chunk", "2", "--override", f"config.encoder.model={tiny_model}",
            "--override", f"config.data.folder={mined}", "--override", "config.batch_size=4",
            "--override", "config.data.train_limit=0", "--override", "config.data.val_limit=0",
            "--override", "config.data.test_limit=0", "--output", str(out), "--profile"]
    assert bench.main(argv) == 0
    record = json.loads(out.read_text())
    plain, cached = record["comparisons"]
    assert (plain["grad_cache_chunk"], cached["grad_cache_chunk"]) == (0, 2) and plain["batch"] == 4
    for c in (plain, cached):
        (row,) = c["rounds"]
        assert row["ours_cpu_s"] > 0 and row["peer_cpu_s"] > 0 and row["ratio"] == c["ratio_median"]
        assert c["loss_check"]["equal"], c["loss_check"]  # same model, pooling, loss: the same work
    assert bench.main(["--report", "--output", str(out), "--page", str(page)]) == 0
    text = page.read_text()
    assert "<!-- section:code_search -->" in text and f"**{cached['ratio_median']:.2f}**" in text
    assert text.count("| all operators |") == 2 and text.count("Compute bound") == 2
    assert "GradCache, chunk 2: The operators of the engine's checks" in text
    # ours on the pipeline's default fused AdamW, the peer on PyTorch's per-tensor loop, and the section says so
    assert record["ours_optimizer"] == "fused" and "ours on PyTorch's fused kernel" in text
    ops = plain["profile"]
    assert "aten::_fused_adamw_" in ops["ours"]["ops"] and "aten::_fused_adamw_" not in ops["peer"]["ops"]
    # our plain step pads in length groups: never more padded tokens than the peer's, and the section says how many
    tokens = plain["padded_tokens"]
    assert plain["group_cost_tokens"] == 512 and 0 < tokens["ours"] <= tokens["peer"]
    assert f"{tokens['ours']:,.0f} padded tokens a step" in text


def test_another_config_gets_its_own_record_section(tiny_model, mined, tmp_path):
    pytest.importorskip("sentence_transformers")
    out, page = tmp_path / "full.json", tmp_path / "page.md"
    argv = ["--against", "peer", "--config", "code_search/infonce", "--threads", "1", "--batches", "1", "--steps", "1",
            "--repeats", "1", "--grad-cache-chunk", "0", "--override", f"config.encoder.model={tiny_model}",
            "--override", f"config.data.folder={mined}", "--override", "config.batch_size=4",
            "--override", "config.encoder.group_cost_tokens=0", "--output", str(out)]
    assert bench.main(argv) == 0 and bench.main(["--report", "--output", str(out), "--page", str(page)]) == 0
    record = json.loads(out.read_text())
    assert record["section"] == "code_search+infonce" and len(record["comparisons"]) == 1
    assert record["command"].startswith("contrasuite bench code_search --against peer --config code_search/infonce")
    text = page.read_text()
    assert "<!-- section:code_search+infonce -->" in text and "config `code_search/infonce`" in text



def test_to_checkpoint_alternates_our_training_with_the_peers_run_and_its_evaluator(tiny_model, mined, tmp_path):
    """``--to-checkpoint``: ours trains the config as a user does, the peer runs its loop for as many steps and at
    the epoch's end sentence-transformers' evaluator on the same validation pairs, then saves the better model."""
    pytest.importorskip("sentence_transformers")
    out, page = tmp_path / "cs.json", tmp_path / "page.md"
    argv = ["--against", "peer", "--threads", "1", "--batches", "1", "--steps", "1", "--repeats", "2",
            "--grad-cache-chunk", "0", "--override", f"config.encoder.model={tiny_model}",
            "--override", f"config.data.folder={mined}", "--override", "config.batch_size=4",
            "--override", "config.eval.cosqa=false", "--output", str(out), "--to-checkpoint"]
    assert bench.main(argv) == 0 and bench.main(["--report", "--output", str(out), "--page", str(page)]) == 0
    (plain,) = json.loads(out.read_text())["comparisons"]
    trained = plain["to_checkpoint"]
    assert trained["checkpoint"] == "best" and 0 < trained["selected_step"] <= trained["steps_run"]
    assert f"config.data.folder={mined}" in trained["command"] and len(trained["rounds"]) == 2
    for row in trained["rounds"]:  # one epoch: one evaluation, and the first is always the best so far (a save)
        ends = row["peer_epoch_ends"]
        assert ends["count"] == 1 and 0 < ends["cpu_s"] < row["peer_cpu_s"] and ends["bytes"] > 0
    text = page.read_text()
    assert "To the checkpoint it selects" in text and "`InformationRetrievalEvaluator` on our validation" in text
