"""The `hpckit` command: a thin click layer over the rooms of the package."""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click

from hpckit import __version__
from hpckit.errors import HpckitError

# The modules under hpckit.cli that define commands, each in a list named COMMANDS.
GROUPS = ["blueprint", "deploy", "accounts", "results", "jobs", "bench", "health", "preflight", "lab", "metrics"]
# Which of them defines each command. A command's module is imported when that command runs, not at
# start-up: `hpckit submit` would otherwise pay for pandas and matplotlib (results, bench) on every call.
# Only a shortcut: a command missing here is still found, by loading every module (tests/test_cli.py
# keeps the table complete).
HOMES = {
    "validate": "blueprint",
    "schema": "blueprint",
    "deploy": "deploy",
    "plan": "deploy",
    "destroy": "deploy",
    "expand": "deploy",
    "upgrade": "deploy",
    "accounts": "accounts",
    "results": "results",
    "templates": "jobs",
    "render": "jobs",
    "submit": "jobs",
    "cancel": "jobs",
    "bench": "bench",
    "verify": "bench",
    "health": "health",
    "preflight": "preflight",
    "lab": "lab",
    "metrics": "metrics",
}


class HpckitGroup(click.Group):
    """Loads each command's module on first use, and turns hpckit's own errors into a message and an
    exit code instead of a traceback."""

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in HOMES:
            self._register(HOMES[cmd_name])
        if cmd_name not in self.commands:
            self.load_all()
        return super().get_command(ctx, cmd_name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        self.load_all()
        return super().list_commands(ctx)

    def load_all(self) -> None:
        for module in GROUPS:
            self._register(module)

    def _register(self, module: str) -> None:
        for command in importlib.import_module(f"hpckit.cli.{module}").COMMANDS:
            if command.name not in self.commands:
                self.add_command(command)

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


def main() -> None:
    cli()
