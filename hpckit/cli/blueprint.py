"""`hpckit validate` and `hpckit schema`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from hpckit.blueprint import BlueprintError, Problem, blueprint_schema_json, load_blueprint, load_site_vars

site_option = click.option(
    "--vars",
    "-V",
    "site_files",
    multiple=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="per-site file whose `vars:` override the blueprint's (repeatable)",
)


@click.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path))
@site_option
@click.option("--json", "as_json", is_flag=True, help="print the problems as JSON")
def validate(files: tuple[Path, ...], site_files: tuple[Path, ...], as_json: bool) -> None:
    """Check blueprints; print every problem as FILE:LINE:COL: field.path: message (exit 2 if any)."""
    problems: list[Problem] = []
    try:
        site_vars = load_site_vars(site_files)
    except BlueprintError as exc:
        site_vars, problems = {}, list(exc.problems)
    for path in files:
        try:
            load_blueprint(path, site_vars=site_vars)
        except BlueprintError as exc:
            problems.extend(exc.problems)
    _report(files, problems, as_json)


def _report(files: tuple[Path, ...], problems: list[Problem], as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps({"ok": not problems, "problems": [p.__dict__ for p in problems]}, indent=2))
    else:
        for problem in problems:
            click.echo(str(problem), err=True)
        if not problems:
            click.echo(f"{len(files)} blueprint(s) valid")
    if problems:
        sys.exit(2)


@click.command()
def schema() -> None:
    """Print the blueprint's JSON Schema (for yaml-language-server and other editors)."""
    click.echo(blueprint_schema_json(), nl=False)


COMMANDS = [validate, schema]
