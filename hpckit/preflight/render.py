"""The preflight report as a rich table (identical findings merged across hosts) or as JSON."""

from __future__ import annotations

import json

from rich.table import Table
from rich.text import Text

from hpckit.preflight.model import Report, Severity

STYLE = {Severity.BLOCK: "bold red", Severity.WARN: "yellow", Severity.ABSENT: "cyan", Severity.OK: "green"}


def report_table(report: Report, *, include_ok: bool = False) -> Table:
    table = Table(title="preflight: blueprint vs hosts", title_justify="left", show_lines=False)
    for column in ("severity", "hosts", "check", "expected", "found", "command"):
        table.add_column(column, overflow="fold")
    for group in report.grouped(include_ok=include_ok):
        table.add_row(
            Text(group.severity.value, style=STYLE[group.severity]),
            Text(group.hosts),
            Text(group.check),
            Text(group.expected),
            Text(group.found),
            Text(group.command, style="dim"),
        )
    return table


def summary_line(report: Report) -> str:
    counts = report.counts()
    parts = ", ".join(f"{counts[s.value]} {s.value}" for s in Severity)
    verdict = "blocking mismatches: fix them before deploying" if not report.ok else "nothing blocks a deploy"
    return f"{len(report.hosts)} hosts: {parts}; {verdict}"


def report_json(report: Report) -> str:
    return json.dumps(report.as_dict(), indent=2)
