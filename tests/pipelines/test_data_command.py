"""``contrasuite data``: the declared datasets cover the shipped configs; check, fetch and their errors."""

import dataclasses
import functools
import os
import shutil
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from contrasuite.core.task.errors import CorruptData
from contrasuite.pipelines import data_command
from contrasuite.pipelines.cli import main
from contrasuite.pipelines.config import config_root, is_fragment, shipped_configs

DATA = Path(os.environ["CONTRASUITE_DATA"])
SMALL = "monet-etretat"
"""A small declared dataset (two JPEGs, 0.9 MB) with a public source."""


@pytest.fixture(scope="module")
def declared():
    return data_command.declared()


@pytest.fixture
def small_copy(tmp_path, declared):
    """A data root holding a copy of :data:`SMALL`."""
    files = declared[SMALL].dataset.files
    if not all((DATA / f.path).is_file() for f in files):
        pytest.skip(f"needs {SMALL} under $CONTRASUITE_DATA")
    for f in files:
        (tmp_path / f.path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(DATA / f.path, tmp_path / f.path)
    return tmp_path


def test_every_shipped_config_reads_declared_datasets_and_every_dataset_is_read(declared, capsys):
    runs = {"/".join(p.relative_to(config_root()).with_suffix("").parts)
            for p in shipped_configs() if not is_fragment(p)}
    readers = {c for entry in declared.values() for c in entry.configs}
    assert readers == runs, f"configs reading no declared dataset: {sorted(runs - readers)}"
    assert all(entry.configs for entry in declared.values()), [n for n, e in declared.items() if not e.configs]
    assert main(["data", "list", "--data-root", str(DATA)]) == 0
    table = capsys.readouterr().out
    assert all(f"  {name} " in table for name in declared)
    docs = (Path(__file__).resolve().parents[2] / "docs" / "data.md").read_text()
    assert all(f"`{name}`" in docs for name in declared), [n for n in declared if f"`{n}`" not in docs]


def test_check_passes_on_the_real_data_and_names_a_changed_byte(small_copy, capsys):
    assert main(["data", "check", "--data-root", str(DATA)]) == 0
    assert main(["data", "check", SMALL, "--data-root", str(small_copy)]) == 0
    target = next(small_copy.rglob("monet.jpg"))
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 1
    target.write_bytes(bytes(data))
    capsys.readouterr()
    assert main(["data", "check", "--data-root", str(small_copy)]) == 1
    out = capsys.readouterr().out
    failed = [line for line in out.splitlines() if line.startswith("FAIL")]
    assert failed == [line for line in out.splitlines() if SMALL in line]
    assert "trainA/monet.jpg: SHA-256" in failed[0] and "etretat-normandy" not in failed[0]
    assert "absent  cub200" in out
    assert main(["data", "check", "--data-root", str(small_copy / "empty")]) == 1
    assert "nothing was checked" in capsys.readouterr().out


@pytest.fixture
def server(small_copy):
    """An HTTP server on localhost serving the data root ``small_copy``; yields its base URL."""

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(small_copy)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def served(monkeypatch, declared, base):
    """Point :data:`SMALL`'s downloads at ``base`` (the same relative paths)."""
    entry = declared[SMALL]
    files = tuple(dataclasses.replace(f, url=f"{base}/{f.path}") for f in entry.dataset.files)
    local = dataclasses.replace(entry, dataset=dataclasses.replace(entry.dataset, files=files))
    monkeypatch.setattr(data_command, "declared", lambda: {SMALL: local})
    return files


def test_fetch_downloads_verifies_and_writes_atomically(tmp_path, monkeypatch, declared, server, small_copy, capsys):
    files = served(monkeypatch, declared, server)
    root = tmp_path / "fetched"
    assert main(["data", "fetch", SMALL, "--data-root", str(root)]) == 0
    assert "monet.jpg" in capsys.readouterr().err  # the progress bar
    assert all((root / f.path).read_bytes() == (small_copy / f.path).read_bytes() for f in files)
    assert sorted(p.name for p in root.rglob("*") if p.is_file()) == sorted(Path(f.path).name for f in files)
    assert main(["data", "check", SMALL, "--data-root", str(root)]) == 0
    capsys.readouterr()
    assert main(["data", "fetch", SMALL, "--data-root", str(root)]) == 0
    assert capsys.readouterr().out.count("(already there)") == len(files)


def test_fetch_refuses_a_download_with_another_checksum(tmp_path, monkeypatch, declared, server, small_copy, capsys):
    files = served(monkeypatch, declared, server)
    first = small_copy / files[0].path
    first.write_bytes(first.read_bytes()[:-1] + b"\0")
    root = tmp_path / "fetched"
    with pytest.raises(CorruptData, match="SHA-256 .* was not written"):
        data_command.fetch(root, SMALL)
    assert not list((root / files[0].path).parent.iterdir())  # neither the file nor a temp file is left
    capsys.readouterr()
    assert main(["data", "fetch", SMALL, "--data-root", str(root)]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("contrasuite data: ") and files[0].url in last and "was not written" in last


def test_fetch_of_a_hand_placed_dataset_is_one_line_saying_where(tmp_path, declared, capsys):
    hand = next(e.dataset for e in declared.values() if not e.dataset.fetchable)
    assert main(["data", "fetch", hand.name, "--data-root", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "is placed by hand" in err and str(tmp_path) in err
    assert all(f.path in err for f in hand.files)
