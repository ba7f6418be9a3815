"""Every page under docs/results is drawn from its kept records: re-rendered here, it must come out identical.

- a comparison page ``<page>.md`` has ``records/<page>/page.json`` (its domain and flags): ``contrasuite
  compare <domain> <flags> --report-only`` re-renders it, and none of its records may be stale;
- ``bench_pipelines.md``: each record under ``records/bench_pipelines/`` rendered by its bench's ``--report``;
- ``bench_gpu.md``: the kept ``contrasuite bench gpu`` results under ``records/bench_gpu/`` (``--report``);
- ``README.md``: the effects table (``contrasuite compare effects``);
- a page under ``archive/`` says on its first line why it cannot be reproduced.
"""

import importlib
import json
import re

import pytest

from contrasuite.pipelines import effects
from contrasuite.pipelines.catalog import benches, reports
from contrasuite.pipelines.compare import PAGE_FILE, RESULTS

BENCH_PAGES = {"bench_pipelines.md", "bench_gpu.md"}
PAGES = sorted(p.name for p in RESULTS.glob("*.md") if p.name != "README.md" and p.name not in BENCH_PAGES)


def test_every_results_page_has_records_or_is_archived():
    missing = [p for p in PAGES if not (RESULTS / "records" / p.removesuffix(".md") / PAGE_FILE).is_file()]
    assert not missing, f"pages without records (re-run them, or move them to docs/results/archive/): {missing}"


@pytest.mark.parametrize("page", PAGES)
def test_a_comparison_page_re_renders_identically_from_its_records(page, tmp_path, capsys):
    records = RESULTS / "records" / page.removesuffix(".md")
    spec = json.loads((records / PAGE_FILE).read_text())
    main = importlib.import_module(reports()[spec["domain"]].module).main
    out = tmp_path / page
    assert main([*spec["args"], "--report-only", "--out", str(out)]) == 0
    assert "left out of the page" not in capsys.readouterr().err, "stale records: re-run the page's command"
    assert out.read_text() == (RESULTS / page).read_text(), f"{page} differs from what its records render"


REPORT_MODE = {"objectives+compile": ["--compile"]}
"""The flags that make a section's bench render its record, where they are not ``--against peer``."""


def test_the_bench_pipelines_page_re_renders_from_its_records(tmp_path):
    page = RESULTS / "bench_pipelines.md"
    order = re.findall(r"<!-- section:([^ ]+) -->", page.read_text())
    records = {json.loads(f.read_text())["section"]: f for f in (RESULTS / "records" / "bench_pipelines").glob("*.json")}
    assert sorted(order) == sorted(records), "every section has one record and every record a section"
    out = tmp_path / "bench_pipelines.md"
    for section in order:
        bench = importlib.import_module(benches()[section.split("+")[0]].module)
        mode = REPORT_MODE.get(section, ["--against", "peer"])
        assert bench.main([*mode, "--report", "--output", str(records[section]), "--page", str(out)]) == 0
    assert out.read_text() == page.read_text()


def test_the_gpu_page_re_renders_from_its_kept_results(tmp_path):
    from contrasuite.pipelines.bench import gpu

    kept = sorted((RESULTS / "records" / "bench_gpu").glob("*.json"))
    assert kept and gpu.main(["--report", *map(str, kept), "--page", str(tmp_path / "page.md")]) == 0
    assert (tmp_path / "page.md").read_text() == (RESULTS / "bench_gpu.md").read_text()


def test_the_effects_table_is_rendered_from_the_records():
    assert (RESULTS / "README.md").read_text() == effects.render(effects.declared()), \
        "docs/results/README.md is stale: run `contrasuite compare effects`"


def test_an_archived_page_says_why_on_its_first_line():
    for page in sorted((RESULTS / "archive").glob("*.md")):
        first = page.read_text().splitlines()[0]
        assert first.startswith("Archived"), f"{page.name}: first line must say why it is archived: {first!r}"


def test_no_page_links_to_a_page_that_moved_to_the_archive():
    archived = {p.name for p in (RESULTS / "archive").glob("*.md")}
    root = RESULTS.parents[1]
    texts = [root / "README.md", *sorted((root / "docs").rglob("*.md"))]
    for path in texts:
        if "archive" in path.parts:
            continue
        for link in re.findall(r"results/([A-Za-z0-9_]+\.md)", path.read_text()):
            assert link not in archived or (RESULTS / link).is_file(), f"{path}: links results/{link}, now archived"
