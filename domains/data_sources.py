"""What each dataset the shipped configs read is, where it comes from, and whether a copy of it is good.

Each domain declares its datasets in ``domains/<d>/datasets.py``: ``DATASETS``, a tuple of :class:`Dataset`,
and ``uses(config)``, the names of those a config (its YAML mapping with ``extends`` merged) reads.
``contrasuite data`` (``pipelines/data_command.py``) collects them through the task registry to list, fetch
and check them under the data root; ``docs/data.md`` describes each one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from contrasuite.domains.archives import sha256_of


@dataclass(frozen=True)
class DataFile:
    """One file of a dataset, ``path`` relative to the data root; a path ending in ``/`` is a folder that
    must hold files (a dataset of many images, checked for presence only)."""

    path: str
    sha256: str | None = None
    size: int | None = None
    """Bytes; checked before the hash (a cheap first test)."""
    url: str | None = None
    """Its public download, or None when it must be placed by hand."""


@dataclass(frozen=True)
class Dataset:
    """A dataset as ``contrasuite data`` shows, fetches and checks it."""

    name: str
    files: tuple[DataFile, ...]
    source: str
    """Where the files come from (a repository, a site)."""
    licence: str
    layout: str
    """What the files hold, in one or two sentences."""
    by_hand: str = ""
    """How to get the files that have no ``url``: where to download them and how to pack them."""
    total_bytes: int | None = None
    """The dataset's size when its files declare none."""

    @property
    def size(self) -> int | None:
        """Bytes: ``total_bytes``, else the sum of the files' sizes; None when unknown."""
        if self.total_bytes is not None or any(f.size is None for f in self.files):
            return self.total_bytes
        return sum(f.size for f in self.files)

    @property
    def fetchable(self) -> bool:
        """Whether every file has a public download and a SHA-256 to verify it."""
        return all(f.url and f.sha256 for f in self.files)


def is_there(root: Path, data_file: DataFile) -> bool:
    """Whether ``data_file`` exists under ``root`` (a folder: and holds something); nothing is read."""
    path = root / data_file.path
    return path.is_dir() and any(path.iterdir()) if data_file.path.endswith("/") else path.is_file()


def file_problem(root: Path, data_file: DataFile) -> str | None:
    """What is wrong with ``data_file`` under ``root`` (``"missing"``, a wrong size or SHA-256), or None."""
    if not is_there(root, data_file):
        return "missing"
    path = root / data_file.path
    if path.is_dir():
        return None
    size = path.stat().st_size
    if data_file.size is not None and size != data_file.size:
        return f"{size} bytes, expected {data_file.size}"
    if data_file.sha256 is not None and (got := sha256_of(path)) != data_file.sha256:
        return f"SHA-256 {got}, expected {data_file.sha256}"
    return None


_EMOJI_BY_HAND = ("download the npm packages emoji-datasource-twitter and emoji-datasource-google 16.0.0 "
                  "(npm pack), pack each one's img/<style>/64/*.png as emoji-<style>-64.tar.gz (top folder "
                  "emoji-<style>-64/), and copy emoji.json and categories.json from either package")

EMOJI = Dataset(
    name="emoji",
    files=(
        DataFile("emoji/emoji-twitter-64.tar.gz",
                 "c6c8e931144584735998305e1ec3d87aa59c1bef5db9d5b5ad56ca3d7a87bddd", 10190208),
        DataFile("emoji/emoji-google-64.tar.gz",
                 "af5b7092fd3c372cc20a7aa4bdbe479abfdf717004ab44361f7d66241faef934", 13523956),
        DataFile("emoji/emoji.json", "1d602e65be88772bf8cc368ce16b855d719eeddbafe128d471b80203f494d29f", 1313457),
        DataFile("emoji/categories.json", "05b7c3b10440d2c111064c72f047f22d242675feabf208e89df4494c36ca1ad7", 54394),
    ),
    source="npm emoji-datasource-twitter and emoji-datasource-google 16.0.0 (img/*/64/, emoji.json)",
    licence="Twemoji graphics CC-BY 4.0; Noto emoji Apache-2.0; metadata MIT",
    layout="3,786 emoji as 64x64 RGBA PNG in two styles that share file names (Twemoji, Noto), with their "
           "names, categories and skin-tone variations (emoji.json) and the category tree (categories.json)",
    by_hand=_EMOJI_BY_HAND,
)
"""The emoji sets, read by several domains (each lists it in its ``DATASETS``)."""
