"""``contrasuite compare effects``: the effects table, ``docs/results/README.md``, from the run records.

Each domain's ``report.py`` declares ``EFFECTS``, a tuple of :class:`Effect`: a method, what its paper
claims, and which two arms of which results page measure it here. For each, the table gives the mean
difference over seeds of ``metric`` between the method's arm and its baseline's, its standard error
``sqrt(var_a/n_a + var_b/n_b)`` and a verdict:

- ``shown``: the difference has the paper's sign and is at least two standard errors;
- ``opposite``: the other sign, at least two standard errors;
- ``not shown``: within two standard errors;
- ``not measured``: fewer than two seeds a side (or no records: the page is archived or not run).
"""

from __future__ import annotations

import argparse
import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

from contrasuite.pipelines.compare import RESULTS, load_records
from contrasuite.pipelines.tables import difference


NOT_EITHER = "official code does not show it on this protocol either"
FIXED = "official code shows it and ours now does"
NO_OFFICIAL = "no official code runs here"
NOT_RUN = "official code not run on this dataset (time)"
SETTLED = (NOT_EITHER, FIXED, NO_OFFICIAL, NOT_RUN)
"""Issue 39's answers to "bug or budget" for an effect ours does not show (the last one where the official code
runs here but a run outlasts this machine's sessions); a shown effect reads ``effect shown``."""


@dataclass(frozen=True)
class Effect:
    """One claimed effect and the two arms of a results page that measure it."""

    method: str
    claim: str
    """The paper's claim: the number, the dataset and protocol, and the source."""
    page: str
    arm: str
    baseline: str
    metric: str
    """A key of the records' ``metrics``."""
    measure: str
    """What ``metric`` is, in words (``test Macro-F1, 20 labels per class, ACM``)."""
    protocol: str
    """Our protocol, in a few words."""
    higher_is_better: bool = True
    official: str = ""
    """What running the official code on this protocol showed, or why none ran (issue 39)."""
    settled: str = ""
    """Where the effect is missing, what running or reading the official code settled: one of :data:`SETTLED`."""
    official_arm: tuple[str, str] | None = None
    """``(arm, group)`` of the official code's runs among the page's records, when they sit there: the cell then
    adds their mean of ``metric`` and its difference from our ``arm`` with the standard error."""


def values(records: list[dict[str, Any]], metric: str, arm: str, group: str | None = None) -> list[float]:
    """``metric`` of each record of ``arm`` (and of ``group``, when given) that has it."""
    return [r["metrics"][metric] for r in records
            if r.get("arm") == arm and (group is None or r.get("group") == group) and metric in r["metrics"]]


def measured(effect: Effect, records: list[dict[str, Any]]) -> tuple[str, str, str]:
    """``(difference ± standard error, seeds, verdict)`` of ``effect`` from its page's ``records``."""
    a, b = values(records, effect.metric, effect.arm), values(records, effect.metric, effect.baseline)
    seeds = f"{len(a)} / {len(b)}"
    if len(a) < 2 or len(b) < 2:
        return "-", seeds, "not measured"
    d = difference(a, b)
    sign = 1 if effect.higher_is_better else -1
    verdict = "not shown" if not d.beyond else "shown" if sign * d.mean > 0 else "opposite"
    return f"{d.mean:+.2f} ± {d.se:.2f}", seeds, verdict


def bug_or_budget(effect: Effect, verdict: str) -> str:
    """``effect shown`` for a shown effect, else the effect's :attr:`Effect.settled` (``-`` when it has none)."""
    return "effect shown" if verdict == "shown" else effect.settled or "-"


def official_cell(effect: Effect, records: list[dict[str, Any]]) -> str:
    """The effect's ``official`` words, then the official runs' mean and official minus ours (two seeds a side)."""
    text = effect.official or "-"
    if effect.official_arm is None:
        return text
    official, ours = values(records, effect.metric, *effect.official_arm), values(records, effect.metric, effect.arm)
    if len(official) < 2 or len(ours) < 2:
        return text
    d = difference(official, ours)
    return (f"{text}: official {sum(official) / len(official):.2f} over {len(official)} seeds, official minus "
            f"`{effect.arm}` {d.mean:+.2f} ± {d.se:.2f}" + (" (beyond 2 standard errors)" if d.beyond else ""))


def declared() -> list[Effect]:
    """Every report's ``EFFECTS``, in the order of the reports."""
    from contrasuite.pipelines.catalog import reports

    effects: list[Effect] = []
    for name, entry in reports().items():
        if name != "effects":
            effects += getattr(importlib.import_module(entry.module), "EFFECTS", ())
    return effects


def with_records(effects: Sequence[Effect], results: Path = RESULTS) -> Iterator[tuple[Effect, list[dict[str, Any]]]]:
    """Each effect with the records of its page under ``results/records/``, each page's read once."""
    pages: dict[str, list[dict[str, Any]]] = {}
    for e in effects:
        if e.page not in pages:
            pages[e.page] = load_records(results / "records" / e.page)
        yield e, pages[e.page]


def render(effects: Sequence[Effect], results: Path = RESULTS) -> str:
    """The Markdown table of ``effects`` from the records under ``results/records/``."""
    lines = [
        "# What the papers claim and what we measured",
        "",
        "Rendered by `contrasuite compare effects` from the run records under `docs/results/records/` and the",
        "effects each domain's `report.py` declares (`EFFECTS`); nothing here is typed by hand. Difference: the",
        "method's arm minus its baseline's, mean over seeds ± the standard error of that difference; seeds: runs",
        "of the method / of the baseline. Verdict: `shown` (the paper's sign, at least two standard errors),",
        "`opposite` (the other sign, at least two standard errors), `not shown` (within two standard errors),",
        "`not measured` (fewer than two seeds a side: the page is archived, see `archive/`, or not yet run). A row",
        "whose page is archived but whose records are kept (its data cannot be remade here) says so in `page`.",
        "Bug or budget: `effect shown`, or for an effect ours does not show what the official code settled (its",
        "numbers and reasons in the next column).",
        "",
        "| method | paper's claim | our measure | our protocol | difference | seeds | verdict | bug or budget | "
        "official code on our protocol | page |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for e, records in with_records(effects, results):
        diff, seeds, verdict = measured(e, records)
        page = (f"[{e.page}]({e.page}.md)" if (results / f"{e.page}.md").is_file() else
                f"[{e.page}](archive/{e.page}.md) (archived; its records kept)" if (results / "archive" / f"{e.page}.md").is_file()
                else f"{e.page} (not published)")
        lines.append(f"| {e.method} | {e.claim} | {e.measure}: `{e.arm}` - `{e.baseline}` | {e.protocol} | {diff} | "
                     f"{seeds} | {verdict} | {bug_or_budget(e, verdict)} | {official_cell(e, records)} | {page} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Write the effects table."""
    p = argparse.ArgumentParser(prog="contrasuite compare effects", description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=RESULTS / "README.md")
    args = p.parse_args(list(argv) if argv is not None else None)
    args.out.write_text(render(declared()))
    print(f"wrote {args.out}")
    return 0
