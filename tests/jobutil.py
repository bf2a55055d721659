"""Helpers for the job-layer tests: the `hpckit` command with the job commands registered."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import click

from tests.labutil import REPO, CliRun

# The job commands live in hpckit.cli.jobs; the top-level group registers them. Until it does, the
# tests add them themselves, so they exercise the same commands either way.
_BOOT = (
    "import sys\n"
    "from hpckit.cli import cli, main\n"
    "from hpckit.cli.jobs import COMMANDS\n"
    "for c in COMMANDS:\n"
    "    cli.commands.get(c.name) or cli.add_command(c)\n"
    "sys.argv[0] = 'hpckit'\n"
    "main()\n"
)


def cli_with_jobs() -> click.Group:
    from hpckit.cli import cli
    from hpckit.cli.jobs import COMMANDS

    for command in COMMANDS:
        if command.name not in cli.commands:
            cli.add_command(command)
    return cli


def hpckit_jobs(*args: str, state: Path | None = None, timeout: float = 600) -> CliRun:
    """`hpckit ARGS...` in a fresh process (so exit codes and stdout/stderr are the real ones)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    if state is not None:
        env["HPCKIT_STATE"] = str(state)
    done = subprocess.run(
        [sys.executable, "-c", _BOOT, *args], capture_output=True, text=True, env=env, timeout=timeout, check=False
    )
    return CliRun(done.returncode, done.stdout, done.stderr)
