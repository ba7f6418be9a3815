"""Named mined sets: the reduced configs read where ``code-search mine --name`` writes, a missing set is mined
on first use (atomically, with progress, once), and without a source the error gives the command in one line."""

import json
from pathlib import Path

import pytest

import contrasuite.domains.code_search.mined_sets as mined_sets
from contrasuite.domains.code_search.commands import main as code_search_main
from contrasuite.domains.code_search.mine import MineConfig
from contrasuite.pipelines.cli import main as cli_main
from contrasuite.pipelines.config import load_config
from tests.two_ranks import gloo_group, spawn_two

CONFIGS = Path(__file__).resolve().parents[3] / "configs" / "code_search"
REDUCED = sorted(CONFIGS.glob("reduced_*.yaml"))
TINY = MineConfig(max_per_package=500, max_pairs=20000, split_fractions=(0.5, 0.25, 0.25))
"""The reduced set's caps, with a split that gives each of the tiny tree's packages' splits a pair."""


@pytest.fixture()
def cache(tmp_path, monkeypatch) -> Path:
    """A fresh cache root; the reduced set mines the tiny source tree (TINY's split) instead of the stdlib."""
    monkeypatch.setenv("CONTRASUITE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setitem(mined_sets.MINED_SETS, "reduced", TINY)
    return tmp_path / "cache"


@pytest.fixture()
def mine_calls(monkeypatch) -> list[Path]:
    """Every folder the miner writes into: a temporary sibling ``.NAME.mining-*`` of its target, which must not
    hold a finished set while mining runs."""
    calls, real = [], mined_sets.mine

    def spy(sources, out, cfg, **kwargs):
        out = Path(out)
        calls.append(out)
        target = out.parent / out.name[1:].split(".mining-")[0]
        assert out.name.startswith(".") and not mined_sets.is_mined(target), "the set appeared before mining finished"
        return real(sources, out, cfg, **kwargs)

    monkeypatch.setattr(mined_sets, "mine", spy)
    return calls


def _tiny_run(tiny_model) -> list[str]:
    return [f"config.encoder.model={tiny_model}", "config.data.train_limit=0", "config.data.val_limit=0",
            "config.data.test_limit=0", "config.batch_size=4", "config.eval.cosqa=false"]


def test_every_reduced_config_reads_the_folder_the_mine_command_writes(cache, source_tree, tiny_model, make_task,
                                                                       mine_calls, capsys):
    argv = ["mine", "--name", "reduced", "--source", str(source_tree), "--no-stdlib", "--no-site-packages"]
    assert code_search_main(argv) == 0
    written = Path(capsys.readouterr().out.splitlines()[-1].removeprefix("mine: wrote "))
    assert written == cache / "code_search" / "mined" / "reduced" and mined_sets.is_mined(written)
    assert len(REDUCED) >= 4
    for config in REDUCED:
        data = load_config(config).config.data
        assert (data.folder, data.mined) == ("", "reduced"), config.name
    task = make_task("reduced_infonce", ["config.data.folder="])
    assert task._folder == written and len(mine_calls) == 1  # read from there, not mined again
    from contrasuite.domains.code_search.report import arms, data_folder

    assert {data_folder(arm)[0] for arm in arms("reduced") if arm.config.endswith(".yaml")} == {written}  # compare too


def test_missing_set_without_a_source_is_one_line_with_the_mine_command(cache, tmp_path, monkeypatch, capsys, tiny_model):
    monkeypatch.setattr(mined_sets, "set_sources", lambda name: [])
    argv = ["train", "code_search/reduced_infonce", f"run.output_root={tmp_path / 'runs'}", *_tiny_run(tiny_model)]
    assert cli_main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("contrasuite train: config.data.mined: mined set 'reduced' not found at ")
    assert err[0].endswith("create it with: contrasuite code-search mine --name reduced")
    assert not (cache / "code_search" / "mined" / "reduced").exists()


def test_first_use_mines_atomically_with_progress_and_the_second_setup_reuses_it(
        cache, source_tree, monkeypatch, make_task, mine_calls, capsys, tmp_path):
    monkeypatch.setattr(mined_sets, "set_sources", lambda name: [source_tree])
    bars = []

    def progress(iterable, desc="", total=None):
        bars.append((desc, total))
        return iterable

    first = make_task("reduced_infonce", ["config.data.folder="], progress=progress)
    folder = cache / "code_search" / "mined" / "reduced"
    assert first._folder == folder and mined_sets.is_mined(folder)
    assert len(mine_calls) == 1 and mine_calls[0].parent == folder.parent and mine_calls[0].name.startswith(".reduced.mining-")
    assert [p.name for p in folder.parent.iterdir()] == ["reduced"]  # the temporary folder was renamed
    assert bars == [(f"mine: scanning {source_tree.name}", len(list(source_tree.rglob("*.py"))))]
    out = capsys.readouterr().out
    assert "mined set 'reduced' not found" in out and "mining it now" in out and f"mine: wrote {folder}" in out
    assert "documented functions" in out and "split by package" in out and "dataset version" in out

    second = make_task("reduced_infonce", ["config.data.folder="], progress=progress)
    assert len(mine_calls) == 1 and len(bars) == 1 and "mining" not in capsys.readouterr().out
    assert second.train.queries == first.train.queries

    # The command mines the same set (same files, same dataset version) wherever it writes it.
    other = tmp_path / "by_command"
    argv = ["mine", "--name", "reduced", "--out", str(other), "--source", str(source_tree), "--no-stdlib", "--no-site-packages"]
    assert code_search_main(argv) == 0
    manifest = json.loads((folder / "manifest.json").read_text())
    assert json.loads((other / "manifest.json").read_text()) == manifest
    assert len(manifest["dataset_version"]) == 12


def test_interrupted_mining_leaves_no_folder(cache, source_tree, monkeypatch):
    def interrupted(sources, out, cfg, **kwargs):
        (Path(out) / "train.jsonl").write_text("{}\n")
        raise KeyboardInterrupt

    monkeypatch.setattr(mined_sets, "set_sources", lambda name: [source_tree])
    monkeypatch.setattr(mined_sets, "mine", interrupted)
    with pytest.raises(KeyboardInterrupt):
        mined_sets.ensure_mined("reduced", log=lambda m: None)
    assert list((cache / "code_search" / "mined").iterdir()) == []


def test_mining_again_into_a_finished_set_replaces_it(tmp_path, source_tree):
    out = tmp_path / "set"
    mined_sets.mine_into([source_tree], out, TINY, log=lambda m: None)
    first = (out / "manifest.json").read_text()
    mined_sets.mine_into([source_tree], out, MineConfig(max_pairs=10, split_fractions=(0.5, 0.25, 0.25)), log=lambda m: None)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["counts"]["pairs"] == 10 and (out / "manifest.json").read_text() != first
    assert sum(len((out / f"{s}.jsonl").read_text().splitlines()) for s in ("train", "val", "test")) == 10
    assert [p.name for p in tmp_path.iterdir()] == ["set"]


def test_mine_needs_a_name_or_a_folder(capsys):
    assert code_search_main(["mine"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == ("contrasuite code-search mine: give --name (reduced or full or smoke: the set a config's "
                    "config.data.mined reads) or --out DIR")


def test_smoke_set_is_a_few_stdlib_modules_with_pairs_in_every_split(cache):
    folder = mined_sets.ensure_mined("smoke", log=lambda m: None)
    manifest = json.loads((folder / "manifest.json").read_text())
    assert folder == cache / "code_search" / "mined" / "smoke"
    assert len(manifest["sources"]) == len(mined_sets.SMOKE_MODULES)
    assert manifest["counts"]["train"] >= 64 and manifest["counts"]["val"] >= 16 and manifest["counts"]["test"] >= 16
    assert len(manifest["splits"]["val"]["packages"]) >= 1 and len(manifest["splits"]["test"]["packages"]) >= 1


def _ensure_on_rank(rank: int, port: int, cache: Path, out: Path) -> None:
    import os

    os.environ["CONTRASUITE_CACHE"] = str(cache)
    with gloo_group(rank, port):
        lines: list[str] = []
        folder = mined_sets.ensure_mined("smoke", log=lines.append, rank=rank)
        (out / f"rank{rank}.json").write_text(json.dumps({"folder": str(folder), "lines": lines}))


def test_on_two_processes_rank_zero_mines_while_the_other_waits(tmp_path):
    spawn_two(_ensure_on_rank, tmp_path / "cache", tmp_path)
    first, second = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2))
    assert first["folder"] == second["folder"] and mined_sets.is_mined(Path(first["folder"]))
    assert any("mining it now" in line for line in first["lines"]) and second["lines"] == []
