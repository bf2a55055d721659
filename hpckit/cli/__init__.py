"""The `hpckit` command: a thin click layer over the rooms of the package."""

from __future__ import annotations

import sys
from typing import Any

import click

from hpckit import __version__
from hpckit.cli import bench as _bench
from hpckit.cli import blueprint as _blueprint
from hpckit.cli import deploy as _deploy
from hpckit.cli import health as _health
from hpckit.cli import jobs as _jobs
from hpckit.cli import preflight as _preflight
from hpckit.cli import results as _results
from hpckit.cli.lab import lab as _lab
from hpckit.errors import HpckitError


class HpckitGroup(click.Group):
    """Turns hpckit's own errors into a message and an exit code instead of a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except HpckitError as exc:
            click.echo(f"hpckit: error: {exc}" if "\n" not in str(exc) else str(exc), err=True)
            sys.exit(exc.exit_code)


@click.group(cls=HpckitGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="hpckit")
def cli() -> None:
    """Stand up and run Slurm GPU clusters."""


GROUPS = [_blueprint, _deploy, _results, _jobs, _bench, _health, _preflight]
for command in [*(c for g in GROUPS for c in g.COMMANDS), _lab]:
    cli.add_command(command)


def main() -> None:
    cli()
