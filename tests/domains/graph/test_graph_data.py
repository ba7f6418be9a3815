"""HeteroData building, meta-path counts against the precomputed files, DBLP's APCPA, downloads."""

import hashlib
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import torch
import yaml

from contrasuite.domains.graph.data import DatasetSpec, EdgeSpec, MetaPathSpec, NodeTypeSpec, load_hetero, metapath_counts
from contrasuite.domains.graph.graphs import apply_chain, context_chains, mean_adjacency, pathsim_topk

CONFIGS = Path(__file__).resolve().parents[3] / "configs" / "graph"


def spec_of(name: str) -> DatasetSpec:
    """The dataset block of ``configs/graph/datasets/<name>.yaml`` as a typed spec."""
    block = yaml.safe_load((CONFIGS / "datasets" / f"{name}.yaml").read_text())["config"]["dataset"]
    return DatasetSpec(
        **{
            **block,
            "node_types": [NodeTypeSpec(**t) for t in block["node_types"]],
            "edges": [EdgeSpec(**e) for e in block["edges"]],
            "metapaths": [MetaPathSpec(**m) for m in block["metapaths"]],
        }
    )


def to_scipy(t: torch.Tensor) -> sp.csr_matrix:
    t = t.coalesce()
    return sp.csr_matrix((t.values().numpy(), t.indices().numpy()), shape=t.shape)


def test_acm_heterodata_shapes_and_counts(graph_data, data_root):
    graph_data("acm")
    data = load_hetero(spec_of("acm"), data_root)
    assert data["paper"].x.shape == (4019, 1902)
    assert data["author"].num_nodes == 7167 and data["subject"].num_nodes == 60
    assert data["paper", "pa", "author"].edge_index.shape == (2, 13407)
    assert data["author", "rev_pa", "paper"].edge_index.shape == (2, 13407)
    assert data["paper", "ps", "subject"].edge_index.shape == (2, 4019)
    y = data["paper"].y
    assert y.shape == (4019,) and sorted(torch.bincount(y).tolist()) == [965, 1061, 1993]
    for n in (20, 40, 60):
        train = data["paper"][f"train_{n}"]
        assert len(train) == 3 * n and torch.equal(torch.bincount(y[train]), torch.full((3,), n))
        assert len(data["paper"][f"val_{n}"]) == 1000 and len(data["paper"][f"test_{n}"]) == 1000


def test_acm_uses_row_normalised_paper_and_author_features(graph_data, data_root):
    graph_data("acm")
    data = load_hetero(spec_of("acm"), data_root)
    assert data["author"].x.shape == (7167, 1902) and data["paper"].x.shape == (4019, 1902)
    for t in ("paper", "author"):
        sums = data[t].x.sum(1)
        assert torch.allclose(sums[sums > 0], torch.ones(int((sums > 0).sum())), atol=1e-5)
    assert data["subject"].get("x") is None  # one-hot inputs


@pytest.mark.parametrize("name", ["acm", "imdb"])
def test_metapath_counts_equal_precomputed_files(name, graph_data, data_root):
    folder = graph_data(name)
    spec = spec_of(name)
    data = load_hetero(spec, data_root)
    counts = metapath_counts(data, spec.metapaths)
    for m in spec.metapaths:
        reference = sp.load_npz(folder / m.reference).tocsr()
        built = to_scipy(counts[m.name])
        assert built.shape == reference.shape
        assert abs(built - reference).max() == 0, m.name


def test_dblp_apcpa_and_aptpa_built_from_edge_lists(graph_data, data_root):
    folder = graph_data("dblp")
    spec = spec_of("dblp")
    data = load_hetero(spec, data_root)
    counts = metapath_counts(data, spec.metapaths)

    def incidence(file, rows, cols):
        e = np.loadtxt(folder / file, dtype=np.int64)
        return sp.csr_matrix((np.ones(len(e)), (e[:, 0], e[:, 1])), shape=(rows, cols))

    pa = incidence("pa.txt", 14328, 4057)
    pc = incidence("pc.txt", 14328, 20)
    apc = pa.T @ pc
    apcpa = to_scipy(counts["apcpa"])
    assert apcpa.nnz == (apc @ apc.T).nnz and abs(apcpa - apc @ apc.T).max() == 0
    assert 4.9e6 < apcpa.nnz < 5.1e6  # about 5.0M non-zeros (research notes)
    assert 6.9e6 < counts["aptpa"]._nnz() < 7.1e6
    assert abs(to_scipy(counts["apa"]) - sp.load_npz(folder / "apa.npz")).max() == 0


def test_pathsim_topk_and_contexts_on_tiny_graph(tiny_graph):
    spec = DatasetSpec(
        **{
            **tiny_graph,
            "node_types": [NodeTypeSpec(**t) for t in tiny_graph["node_types"]],
            "edges": [EdgeSpec(**e) for e in tiny_graph["edges"]],
            "metapaths": [MetaPathSpec(**m) for m in tiny_graph["metapaths"]],
        }
    )
    data = load_hetero(spec, "/nonexistent")
    counts = metapath_counts(data, spec.metapaths)["ic0i"].to_dense()
    graph = pathsim_topk(counts, 4)
    # every node keeps at most its top 4, with their path counts
    assert torch.all(torch.bincount(graph.rows, minlength=60) <= 4)
    assert torch.equal(graph.counts, counts[graph.rows, graph.cols])
    # the kept neighbours of node 0 have the highest PathSim
    diag = counts.diagonal()
    sim = 2 * counts[0] / (diag[0] + diag)
    kept = graph.cols[graph.rows == 0]
    assert sim[kept].min() >= sim[torch.ones(60, dtype=torch.bool).index_fill_(0, kept, False)].max() - 1e-6
    # plain view: MEOW's normalize_adj (the Kipf helper) on the pruned count matrix, no self-loops added
    pruned = sp.coo_matrix((graph.counts.numpy(), (graph.rows.numpy(), graph.cols.numpy())), shape=(60, 60))
    inv_sqrt = sp.diags(np.power(np.asarray(pruned.sum(1)).ravel(), -0.5))
    official = np.asarray(pruned.dot(inv_sqrt).transpose().dot(inv_sqrt).todense())
    adj = graph.adjacency("counts", "in").to_dense()
    assert np.allclose(adj.numpy(), official, atol=1e-6)
    binary = pruned.copy()
    binary.data[:] = 1
    inv_sqrt = sp.diags(np.power(np.asarray(binary.sum(1)).ravel(), -0.5))
    assert np.allclose(graph.adjacency("binary", "out").to_dense().numpy(), (inv_sqrt @ binary @ inv_sqrt).toarray(), atol=1e-6)
    # augmented view: binary, floor(rate * E) off-diagonal edges dropped, identity added
    off = int((graph.rows != graph.cols).sum())
    dropped = graph.dropped(0.5, torch.Generator().manual_seed(0), "in").to_dense()
    assert int((dropped > 0).sum()) == off - int(0.5 * off) + 60 and torch.all(dropped.diagonal() > 0)
    assert not torch.equal(dropped, graph.dropped(0.5, torch.Generator().manual_seed(1), "in").to_dense())
    assert mean_adjacency([adj.to_sparse_csr(), dropped.to_sparse_csr()]).to_dense().allclose((adj + dropped) / 2)
    # the context of a meta-path item-ctx0-item is the mean of the item's ctx0 neighbours
    (ctx_type, chain), = context_chains(data, ["item", "ctx0", "item"])
    feats = torch.randn(15, 3)
    e = data["item", "ic0", "ctx0"].edge_index
    expected = torch.stack([feats[torch.unique(e[1][e[0] == i])].mean(0) for i in range(60)])
    assert ctx_type == "ctx0" and torch.allclose(apply_chain(chain, feats), expected, atol=1e-6)


def test_missing_file_error_names_file_and_path(tmp_path, tiny_graph):
    spec = DatasetSpec(**{**tiny_graph, "root": str(tmp_path / "empty")})
    spec.edges = [EdgeSpec(**e) for e in tiny_graph["edges"]]
    spec.node_types = [NodeTypeSpec(**t) for t in tiny_graph["node_types"]]
    spec.metapaths = [MetaPathSpec(**m) for m in tiny_graph["metapaths"]]
    with pytest.raises(FileNotFoundError, match=r"'ic0.txt' at .*empty/ic0.txt"):
        load_hetero(spec, tmp_path)


def test_download_checks_sha256(tmp_path, tiny_graph):
    """A missing file comes from ``url`` (a file:// URL here) and must match its SHA-256."""
    source = Path(tiny_graph["root"])
    target = tmp_path / "copy"
    sums = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in source.iterdir()}
    spec = DatasetSpec(
        **{**tiny_graph, "root": str(target), "url": source.as_uri(), "sha256": sums},
    )
    spec.edges = [EdgeSpec(**e) for e in tiny_graph["edges"]]
    spec.node_types = [NodeTypeSpec(**t) for t in tiny_graph["node_types"]]
    spec.metapaths = [MetaPathSpec(**m) for m in tiny_graph["metapaths"]]
    data = load_hetero(spec, tmp_path)
    assert data["item"].x.shape == (60, 8) and (target / "labels.npy").is_file()
    bad = tmp_path / "bad"
    spec.root = str(bad)
    spec.sha256 = {**sums, "labels.npy": "0" * 64}
    with pytest.raises(FileNotFoundError, match="SHA-256"):
        load_hetero(spec, tmp_path)
    assert not (bad / "labels.npy").exists()


def test_pathsim_ties_numpy_keeps_the_official_choice_among_tied_nodes():
    """ACM's PSP ties every paper of a subject at PathSim 1; with more tied nodes than ``nei_max``
    the official code keeps ``np.argsort(sim, axis=1)[:, ::-1][:, :k]`` of the float64 PathSim matrix."""
    group = torch.zeros(12, dtype=torch.long)
    group[7:] = 1  # two subjects: 7 and 5 papers, each paper linked to one subject
    counts = (group[:, None] == group[None, :]).float()
    k = 4
    graph = pathsim_topk(counts, k, ties="numpy")
    a = counts.double().numpy()
    sim = np.zeros_like(a)
    for i, j in zip(*a.nonzero()):  # the official loop: PathSim on the non-zero entries only
        sim[i, j] = 2 * a[i, j] / (a[i, i] + a[j, j])
    expected = np.argsort(sim, axis=1)[:, ::-1][:, :k]
    kept = {(int(i), int(j)) for i, j in zip(graph.rows, graph.cols)}
    assert kept == {(i, int(j)) for i in range(12) for j in expected[i] if a[i, j] > 0}
    assert torch.all(torch.bincount(graph.rows, minlength=12) == k)
    default = pathsim_topk(counts, k)  # torch.topk: the same number of ties kept, its own choice
    assert torch.equal(torch.bincount(default.rows, minlength=12), torch.bincount(graph.rows, minlength=12))
    with pytest.raises(ValueError, match="ties"):
        pathsim_topk(counts, k, ties="stable")


def test_pathsim_ties_random_draws_tied_nodes_evenly_and_by_seed():
    """``torch`` and ``numpy`` keep the same tied nodes whatever the seed (their choice follows the node
    numbering); ``random`` draws them from the seed: the same draw for one seed, every tied node about
    equally often over seeds, never a node of PathSim 0."""
    n, k, seeds = 400, 40, 30
    counts = torch.ones(n, n)  # every node tied with every other at PathSim 1
    counts[:, -1] = 0.0
    counts[-1] = 0.0
    counts[-1, -1] = 1.0       # but the last node, linked to itself only
    for ties in ("torch", "numpy"):
        first, second = (pathsim_topk(counts, k, ties=ties, seed=s) for s in (0, 1))
        assert torch.equal(first.cols, second.cols)
    times_kept = torch.zeros(n)
    for seed in range(seeds):
        graph = pathsim_topk(counts, k, ties="random", seed=seed)
        assert torch.all(torch.bincount(graph.rows, minlength=n)[: n - 1] == k)
        kept = graph.cols[graph.rows == 0]
        assert n - 1 not in kept.tolist()
        times_kept[kept] += 1
    again = pathsim_topk(counts, k, ties="random", seed=seeds - 1)
    assert torch.equal(again.cols, graph.cols)
    assert not torch.equal(pathsim_topk(counts, k, ties="random", seed=seeds).cols, graph.cols)
    # each tied node is kept k / (n - 1) * seeds = 3.0 times on average (sd 1.7), and 96 % of them at least
    # once; a rule by numbers keeps the same 40 nodes all 30 times
    tied = times_kept[: n - 1]
    assert tied.max() <= 12 and (tied > 0).double().mean() > 0.9


def test_a_context_chain_runs_in_fp32_under_bf16_autocast():
    """Autocast sends a sparse product to bf16, which has no sparse kernel (``addmm_sparse_cuda`` on an H200,
    ``addmm_out_sparse_csr_impl_mkl`` on the CPU): the chain turns autocast off and gives fp32."""
    hop = torch.eye(4).to_sparse_csr()
    x = torch.randn(4, 3)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = apply_chain([hop, hop], x)
    assert out.dtype == torch.float32 and torch.equal(out, x)


def test_reach_contexts_are_meows_nei_files_and_walk_contexts_are_not(graph_data, data_root):
    """DBLP: the ``reach`` context of APCPA's paper, conference and term positions is MEOW's shipped ``nei_ap``,
    ``nei_apc`` and ``nei_apt`` (binary "reached through the path") averaged per author; the ``walk`` context of the
    conference position weights each conference by its papers instead, so it is another matrix."""
    folder = graph_data("dblp")
    data = load_hetero(spec_of("dblp"), data_root)
    reach = {m: context_chains(data, path, "reach") for m, path in
             (("apcpa", ["author", "paper", "conference", "paper", "author"]),
              ("aptpa", ["author", "paper", "term", "paper", "author"]))}
    shipped = {name: sp.load_npz(folder / f"{name}.npz").tocsr() for name in ("nei_ap", "nei_apc", "nei_apt")}
    for name, (node_type, chain) in (("nei_ap", reach["apcpa"][0]), ("nei_apc", reach["apcpa"][1]),
                                     ("nei_apt", reach["aptpa"][1])):
        (hop,) = chain
        ours, theirs = to_scipy(hop.to_sparse() if hop.layout == torch.strided else hop), shipped[name]
        mean = sp.diags(1.0 / np.maximum(theirs.sum(axis=1).A1, 1)) @ theirs
        assert ours.shape == theirs.shape and abs(ours - mean).max() < 1e-6, name
    walk = context_chains(data, ["author", "paper", "conference", "paper", "author"], "walk")
    assert len(walk[1][1]) == 2 and len(walk[2][1]) == 3  # conference: two hops in turn; second paper: three
    features = torch.eye(data["conference"].num_nodes)
    walked = apply_chain(walk[1][1], features)
    reached = apply_chain(reach["apcpa"][1][1], features)
    sums = walked.sum(1)
    assert torch.allclose(sums[sums > 0], torch.ones(int((sums > 0).sum())), atol=1e-5)  # a mean, as reached is
    assert (walked - reached).abs().max() > 0.1  # weighted by papers, not the set of conferences
    one_hop = context_chains(data, ["author", "paper", "author"], "walk")
    assert torch.equal(one_hop[0][1][0].to_dense(), reach["apcpa"][0][1][0].to_dense())  # one hop: the same


def test_full_context_incidences_are_dense_and_give_the_sparse_products(graph_data, data_root):
    """DBLP's reach incidences past 5 % full (APCPA's conference and second paper, APTPA's second paper) are kept
    dense (graphs.DENSE_FROM); the product is the sparse one's up to rounding."""
    graph_data("dblp")
    data = load_hetero(spec_of("dblp"), data_root)
    chains = context_chains(data, ["author", "paper", "term", "paper", "author"], "reach")
    assert [chain[0].layout == torch.strided for _, chain in chains] == [False, False, True]
    (dense,) = chains[2][1]
    features = torch.randn(dense.shape[1], 8, generator=torch.Generator().manual_seed(0))
    assert torch.allclose(apply_chain([dense], features), apply_chain([dense.to_sparse()], features), atol=1e-5)
