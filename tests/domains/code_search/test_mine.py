"""The miner: filters, exact and near dedup, package-disjoint splits, manifest."""

import json

import numpy as np
import pytest

from contrasuite.domains.code_search.mine import (
    FILTERS,
    MineConfig,
    MinHasher,
    code_tokens,
    functions_in_file,
    mine,
    split_packages,
    summary,
)


def rows(folder, split):
    return [json.loads(line) for line in (folder / f"{split}.jsonl").read_text().splitlines()]


def test_summary_is_first_paragraph_collapsed():
    assert summary("  Read a   CSV\n   file.\n\n   Details here.\n") == "Read a CSV file."


def test_docstring_removed_from_code_and_query_from_summary(tmp_path):
    (tmp_path / "m.py").write_text('class A:\n    @property\n    def f(self):\n        """Return the value of f here.\n\n        More.\n        """\n        return 1\n')
    (fn,) = functions_in_file(tmp_path / "m.py", tmp_path)
    assert fn.name == "A.f" and fn.package == "m" and fn.lineno == 3
    assert fn.code == "def f(self):\n    return 1\n"
    assert summary(fn.docstring) == "Return the value of f here."


def test_filters_and_dedup_counts(mined):
    manifest = json.loads((mined / "manifest.json").read_text())
    dropped = manifest["dropped"]
    assert set(dropped) == set(FILTERS)
    for reason in ("syntax_error", "test_code", "dunder", "short_doc", "doctest_only", "auto_generated", "url",
                   "trivial_body", "exact_duplicate", "near_duplicate"):
        assert dropped[reason] >= 1, reason
    kept = [r for s in ("train", "val", "test") for r in rows(mined, s)]
    names = {r["name"] for r in kept}
    assert not names & {"short", "doctest_only", "generated", "has_url", "stub", "test_reads_file", "Thing.__repr__", "check_rows"}
    assert "Thing.method" in names
    assert sum(r["name"] == "helper_0_read" for r in kept) == 1  # the copies in pkgb are gone
    for r in kept:
        assert '"""' not in r["code"] and r["code"].startswith("def ")
        assert len(r["query"].split()) >= 3 and "\n" not in r["query"]


def test_splits_are_package_disjoint_and_manifest_is_complete(mined):
    manifest = json.loads((mined / "manifest.json").read_text())
    seen = {}
    for split in ("train", "val", "test"):
        packages = {r["package"] for r in rows(mined, split)}
        assert packages == set(manifest["splits"][split]["packages"])
        assert manifest["splits"][split]["pairs"] == manifest["counts"][split] == len(rows(mined, split))
        for p in packages:
            assert seen.setdefault(p, split) == split, f"package {p} in two splits"
    assert manifest["format_version"] == 1 and len(manifest["dataset_version"]) == 12
    assert manifest["config"]["min_query_words"] == 3 and set(manifest["files"]) == {"train.jsonl", "val.jsonl", "test.jsonl"}
    assert manifest["counts"]["pairs"] == sum(manifest["counts"][s] for s in ("train", "val", "test"))


def test_mining_is_deterministic_and_capped(source_tree, tmp_path):
    a = mine([source_tree], tmp_path / "a", MineConfig(max_pairs=10), log=lambda m: None)
    b = mine([source_tree], tmp_path / "b", MineConfig(max_pairs=10), log=lambda m: None)
    assert a.counts["pairs"] == 10 and a.counts["capped_total"] > 0
    assert (tmp_path / "a" / "train.jsonl").read_bytes() == (tmp_path / "b" / "train.jsonl").read_bytes()
    assert b.counts == a.counts
    c = mine([source_tree], tmp_path / "c", MineConfig(max_per_package=3), log=lambda m: None)
    assert c.counts["capped_per_package"] > 0
    counts = {}
    for split in ("train", "val", "test"):
        for r in rows(tmp_path / "c", split):
            counts[r["package"]] = counts.get(r["package"], 0) + 1
    assert max(counts.values()) <= 3


def test_missing_source_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope"):
        mine([tmp_path / "nope"], tmp_path / "out")


def test_minhash_estimates_jaccard():
    hasher = MinHasher(num_perm=256, shingle=1, seed=0)
    a = [f"t{i}" for i in range(100)]
    b = [f"t{i}" for i in range(50, 150)]  # Jaccard 50/150
    est = float((hasher.signature(a) == hasher.signature(b)).mean())
    assert abs(est - 1 / 3) < 0.1
    assert np.array_equal(hasher.signature(a), hasher.signature(list(reversed(a))))


def test_code_tokens_ignore_comments_and_layout():
    assert code_tokens("x = 1  # hi\n\n") == code_tokens("x=1\n")


def test_split_packages_balances_and_is_disjoint():
    sizes = {f"p{i}": 10 for i in range(20)}
    assignment = split_packages(sizes, (0.8, 0.1, 0.1), seed=0)
    per = {s: sum(sizes[p] for p, a in assignment.items() if a == s) for s in ("train", "val", "test")}
    assert per == {"train": 160, "val": 20, "test": 20}
    with pytest.raises(ValueError, match="split_fractions"):
        split_packages(sizes, (1.0, -1.0, 0.0), seed=0)
