"""`hpckit results parse FILE...`: print, export and plot parsed benchmark and training logs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
import pandas as pd
from rich.console import Console
from rich.table import Table

from hpckit.results import KINDS, ParseError, ParseResult, parse_file
from hpckit.results.report import Figure, compact, figures

OutPath = click.Path(dir_okay=False, writable=True, path_type=Path)


@click.group("results")
def results() -> None:
    """Parse nccl-tests, NeMo, Megatron and sacct output into tables."""


@results.command("parse")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--kind", default="auto", show_default=True, type=click.Choice(["auto", *KINDS]))
@click.option("--collective", default=None, help="nccl-tests collective when the log does not name it")
@click.option("--csv", "csv_out", type=OutPath, help="write all rows as CSV")
@click.option("--parquet", "parquet_out", type=OutPath, help="write all rows as Parquet")
@click.option("--plot", "plot_out", type=OutPath, help="write a PNG: busbw vs size, step time vs step")
@click.option("--json", "as_json", is_flag=True, help="print JSON (rows, meta, figures) instead of tables")
@click.option("--exact", is_flag=True, help="read with the exact line-by-line parsers only (slower; to check a parse)")
def parse(
    files: tuple[Path, ...],
    kind: str,
    collective: str | None,
    csv_out: Path | None,
    parquet_out: Path | None,
    plot_out: Path | None,
    as_json: bool,
    exact: bool,
) -> None:
    """Parse FILE... (exit 2 on unreadable input, with FILE:LINE: message on stderr; exit 1 when a
    log says its test failed, e.g. nccl-tests' "Test NCCL failure", after printing what was read)."""
    parsed = _parse_all(files, kind, collective, exact)
    if as_json:
        click.echo(json.dumps([_as_dict(src, r) for src, r in parsed], indent=2, default=str))
    else:
        _print(parsed)
    _write(parsed, csv_out, parquet_out, plot_out)
    failed = [(src, r.meta.get("cause")) for src, r in parsed if r.failed]
    for src, cause in failed:
        # the log's own words for why (its line number first, as in meta), else the warnings
        why = f": {str(cause).split(': ', 1)[-1]}" if cause else " (see its warnings)"
        click.echo(f"hpckit: error: {src}: the test failed{why}", err=True)
    if failed:
        sys.exit(1)


def _parse_all(
    files: tuple[Path, ...], kind: str, collective: str | None, exact: bool
) -> list[tuple[str, ParseResult]]:
    parsed, errors = [], []
    for path in files:
        try:
            parsed.append((str(path), parse_file(path, kind, collective, exact=exact)))
        except ParseError as exc:
            errors.append(str(exc))
    if errors:
        for line in errors:
            click.echo(f"hpckit: error: {line}", err=True)
        sys.exit(2)
    return parsed


# Output that is not a terminal (a pipe, a file) is never cut or wrapped: a table of 21 columns or
# a long path is as wide as it is (rich would cut to 80 columns).
PIPE_WIDTH = 10_000


def _print(parsed: list[tuple[str, ParseResult]]) -> None:
    console = Console(highlight=False, width=None if sys.stdout.isatty() else PIPE_WIDTH, soft_wrap=True)
    for source, result in parsed:
        state = " [FAILED]" if result.failed else " [partial]" if result.partial else ""
        console.print(f"[bold]{source}[/bold]: {result.kind}, {len(result.frame)} rows{state}")
        for warning in result.warnings:
            click.echo(f"hpckit: warning: {source}: {warning}", err=True)
        console.print(_table(compact(result)))
        console.print(_figures_table(figures(result)))


def _table(frame: pd.DataFrame) -> Table:
    table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
    for col in frame.columns:
        table.add_column(str(col), justify="left" if frame[col].dtype == object else "right")
    for row in frame.itertuples(index=False):
        table.add_row(*(_cell(v) for v in row))
    return table


def _cell(value: object) -> str:
    if value is None or (isinstance(value, float) and value != value) or value is pd.NA:
        return ""
    if isinstance(value, float):
        return f"{value:.0f}" if abs(value) >= 1000 else f"{value:.4g}"
    return str(value)


def _figures_table(figs: list[Figure]) -> Table:
    table = Table(show_header=False, box=None, pad_edge=False)
    for fig in figs:
        value = f"{fig.value:.2f}" if isinstance(fig.value, float) else str(fig.value)
        table.add_row(f"  {fig.name}", f"{value} {fig.unit}".strip(), f"[dim]{fig.note}[/dim]")
    return table


def _as_dict(source: str, result: ParseResult) -> dict[str, object]:
    return {
        "source": source,
        "kind": result.kind,
        "partial": result.partial,
        "failed": result.failed,
        "warnings": result.warnings,
        "figures": {f.name: {"value": f.value, "unit": f.unit} for f in figures(result)},
        "meta": result.meta,
        "rows": json.loads(result.frame.to_json(orient="records", date_format="iso")),
    }


def _write(
    parsed: list[tuple[str, ParseResult]],
    csv_out: Path | None,
    parquet_out: Path | None,
    plot_out: Path | None,
) -> None:
    try:
        if csv_out or parquet_out:
            frame = pd.concat([r.frame.assign(source=s) for s, r in parsed], ignore_index=True)
            if csv_out:
                frame.to_csv(csv_out, index=False)
            if parquet_out:
                frame.to_parquet(parquet_out, index=False)
        if plot_out:
            from hpckit.results.plot import plot  # matplotlib only when asked for

            if plot(parsed, plot_out) == 0:
                click.echo("hpckit: warning: nothing to plot (no nccl-tests or training rows)", err=True)
    except OSError as exc:
        click.echo(f"hpckit: error: cannot write output: {exc}", err=True)
        sys.exit(1)


COMMANDS = [results]
