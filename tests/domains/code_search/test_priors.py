"""Soft-InfoNCE priors: BM25 values, embedding priors, and the weights they give."""

import math

import pytest
import torch

from contrasuite.core.objectives import InfoNCE, SoftInfoNCE, soft_infonce_weights
from contrasuite.domains.code_search.priors import BM25Prior, EmbeddingPrior, build_prior
from contrasuite.domains.code_search.encoder import EncoderConfig

QUERIES = ["read a csv file into rows", "write rows to a csv file", "parse json text", "sort a list of numbers"]


def test_bm25_prior_shape_and_values():
    prior = BM25Prior(QUERIES, k1=1.2, b=0.75)
    rows, cols = torch.tensor([0, 2]), torch.tensor([0, 1, 2, 3])
    sim = prior(rows, cols)
    assert sim.shape == (2, 4) and sim.dtype == torch.float32
    # query 0 shares "csv", "file", "rows" with query 1 and nothing with queries 2, 3.
    assert sim[0, 1] > 0 and sim[0, 2] == 0 and sim[0, 3] == 0 and sim[0, 0] > sim[0, 1]
    # Lucene BM25 (no (k1 + 1) factor) by hand for query 0 against document 1, stopwords removed.
    n, k1, b = 4, 1.2, 0.75
    docs = [["read", "csv", "file", "rows"], ["write", "rows", "csv", "file"], ["parse", "json", "text"], ["sort", "list", "numbers"]]
    avgdl = sum(map(len, docs)) / n
    expected = 0.0
    for term in ("read", "csv", "file", "rows"):
        df = sum(term in d for d in docs)
        tf = docs[1].count(term)
        idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
        expected += idf * tf / (tf + k1 * (1 - b + b * len(docs[1]) / avgdl))
    assert sim[0, 1].item() == pytest.approx(expected, rel=1e-4)


def test_weights_from_bm25_prior_downweight_lexical_false_negatives():
    prior = BM25Prior(QUERIES)
    idx = torch.arange(4)
    sim = prior(idx, idx)
    w = soft_infonce_weights(sim, t=1.0, alpha=1.0, beta=1.0)
    assert w.shape == (4, 4) and torch.all(w.diagonal() == 1)
    assert w[0, 1] < w[0, 2] and w[0, 2] == pytest.approx(w[0, 3].item())
    assert torch.all(w >= 0.1)


def test_uniform_prior_gives_infonce():
    torch.manual_seed(0)
    q, c = torch.randn(6, 8), torch.randn(6, 8)
    prior = EmbeddingPrior(torch.ones(6, 3), torch.ones(6, 3))(torch.arange(6), torch.arange(6))
    soft = SoftInfoNCE(similarity="cosine", temperature=0.05)(q, c, prior=prior)
    plain = InfoNCE(temperature=0.05)(q, c)
    assert soft.item() == pytest.approx(plain.item(), rel=1e-5)


def test_embedding_prior_is_dot_product_of_rows_and_columns():
    left, right = torch.randn(5, 3), torch.randn(5, 3)
    sim = EmbeddingPrior(left, right)(torch.tensor([4, 1]), torch.tensor([0, 2, 3]))
    assert torch.allclose(sim, left[[4, 1]] @ right[[0, 2, 3]].T)


def test_build_prior_errors_name_the_key(tmp_path):
    with pytest.raises(ValueError, match="config.prior.name"):
        build_prior({"name": "tfidf"}, QUERIES, QUERIES, EncoderConfig(), cache_dir=tmp_path)
    with pytest.raises(ValueError, match="unknown key"):
        build_prior({"name": "bm25", "k3": 1}, QUERIES, QUERIES, EncoderConfig(), cache_dir=tmp_path)
    with pytest.raises(ValueError, match="checkpoint"):
        build_prior({"name": "model"}, QUERIES, QUERIES, EncoderConfig(), cache_dir=tmp_path)
    assert build_prior({"name": "none"}, QUERIES, QUERIES, EncoderConfig(), cache_dir=tmp_path) is None


def test_simcse_prior_trains_and_caches(tiny_model, tmp_path):
    cfg = EncoderConfig(model=str(tiny_model), max_query_length=16)
    spec = {"name": "simcse", "epochs": 1, "batch_size": 2, "lr": 1e-3, "temperature": 0.05}
    prior = build_prior(spec, QUERIES, QUERIES, cfg, cache_dir=tmp_path, log=lambda m: None)
    sim = prior(torch.arange(4), torch.arange(4))
    assert sim.shape == (4, 4) and torch.allclose(sim.diagonal(), torch.ones(4), atol=1e-5)  # normalised embeddings
    assert len(list(tmp_path.glob("prior_simcse_*.safetensors"))) == 1
    again = build_prior(spec, QUERIES, QUERIES, cfg, cache_dir=tmp_path, log=lambda m: None)
    assert torch.equal(again(torch.arange(4), torch.arange(4)), sim)
