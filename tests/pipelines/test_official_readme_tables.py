"""The official MEOW README's per-seed tables are written from the kept records by its tables.py."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "docs" / "results" / "records" / "official" / "meow" / "tables.py"


def test_the_official_meow_readme_tables_re_render_from_the_records():
    spec = importlib.util.spec_from_file_location("official_meow_tables", SCRIPT)
    tables = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tables)
    text = tables.README.read_text()
    assert tables.written(text) == text, "run: python docs/results/records/official/meow/tables.py --write"
    assert "| **mean ± std (5 seeds)** |" in tables.table("imdb")  # every dataset has its five seeds
