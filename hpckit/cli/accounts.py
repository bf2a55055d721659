"""`hpckit accounts`: the blueprint's accounts, users and QOS against what slurmdbd holds."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import click

from hpckit.cli.blueprint import site_option
from hpckit.errors import InputError


@click.group("accounts")
def accounts() -> None:
    """Accounts, users and QOS as code (the blueprint's `accounting:`)."""


@accounts.command("diff")
@click.argument("blueprint", type=click.Path(dir_okay=False, path_type=Path))
@site_option
@click.option("--cluster", help="the deployed cluster to read (default: the blueprint's)")
@click.option("--json", "as_json", is_flag=True)
def diff_cmd(blueprint: Path, site_files: tuple[Path, ...], cluster: str | None, as_json: bool) -> None:
    """Show, changing nothing, the sacctmgr commands that would make the live accounts, users and QOS the
    blueprint's, in the order they would run; exit 0 when there are none, 1 when there are."""
    from hpckit.blueprint import load_blueprint
    from hpckit.deploy.accounts import diff
    from hpckit.jobs.submit import transport_for
    from hpckit.slurm.accounts import read_live

    bp = load_blueprint(blueprint, site_files)
    if bp.accounting is None:
        raise InputError(f"{blueprint}: no `accounting:` section to compare")
    transport = transport_for(cluster or bp.name)
    try:
        found = diff(bp.accounting, read_live(transport, bp.cluster_name), bp.cluster_name)
    finally:
        transport.close()
    if as_json:
        changes = [
            {"action": c.action, "kind": c.kind, "name": c.name, "account": c.account, "argv": list(c.argv),
             "tightens": c.tightens} for c in found.changes
        ]  # fmt: skip
        click.echo(json.dumps({"changes": changes, "unmanaged": list(found.unmanaged)}))
    else:
        for c in found.changes:
            click.echo(f"{c.describe()}{'  (may hold or stop jobs)' if c.tightens else ''}\n    {shlex.join(c.argv)}")
        for what in found.unmanaged:
            click.echo(f"not in the blueprint, left alone: {what}")
        click.echo(f"{len(found.changes)} change(s)" if found.changes else "no changes")
    sys.exit(1 if found.changes else 0)


COMMANDS = [accounts]
