"""`hpckit accounts`: the blueprint's accounts, users and QOS against what slurmdbd holds."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import click

from hpckit.cli.blueprint import site_option
from hpckit.deploy.accounts import Planned
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
    from hpckit.deploy.accounts import plan_accounts
    from hpckit.jobs.submit import transport_for

    bp = load_blueprint(blueprint, site_files)
    if bp.accounting is None:
        raise InputError(f"{blueprint}: no `accounting:` section to compare")
    transport = transport_for(cluster or bp.name)
    try:
        planned = plan_accounts(bp.accounting, bp.cluster_name, transport)
    finally:
        transport.close()
    if as_json:
        click.echo(json.dumps(planned_json(planned)))
    else:
        for line in planned_lines(planned):
            click.echo(line)
        click.echo(f"{len(planned.changes)} change(s)" if planned.changes else "no changes")
    sys.exit(1 if planned.changes else 0)


@accounts.command("export")
@click.option("--cluster", required=True, help="the deployed cluster to read")
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path), help="file to write (default: stdout)")
def export_cmd(cluster: str, output: Path | None) -> None:
    """Write the cluster's live accounts, users and QOS as a blueprint's `accounting:` section: deploying a
    blueprint with it changes nothing; what it cannot say exactly is printed on stderr."""
    import yaml

    from hpckit.deploy.accounts_export import export_accounting
    from hpckit.jobs.submit import transport_for
    from hpckit.slurm.accounts import read_live

    transport = transport_for(cluster)
    try:
        exported = export_accounting(read_live(transport, cluster))
    finally:
        transport.close()
    head = f"# `hpckit accounts export --cluster {cluster}`: Slurm's accounts, users and QOS as a blueprint section\n"
    text = head + yaml.safe_dump({"accounting": exported.accounting}, sort_keys=False, default_flow_style=False)
    for note in exported.notes:
        click.echo(f"note: {note}", err=True)
    if output is None:
        click.echo(text, nl=False)
    else:
        output.write_text(text)
        click.echo(f"{output}: {sum(len(v) for v in exported.accounting.values() if isinstance(v, dict))} entries")


def planned_json(planned: Planned) -> dict[str, object]:
    changes = [
        {"action": c.action, "kind": c.kind, "name": c.name, "account": c.account, "argv": list(c.argv),
         "tightens": c.tightens, "jobs": [j.__dict__ for j in planned.jobs.get(c, ())]}
        for c in planned.changes
    ]  # fmt: skip
    return {"changes": changes, "unmanaged": list(planned.unmanaged)}


def planned_lines(planned: Planned) -> list[str]:
    """Each change with its sacctmgr command and, for a deletion or a stricter limit, the jobs it reaches."""
    lines = []
    for c in planned.changes:
        lines += [f"{c.describe()}{'  (may hold or stop jobs)' if c.tightens else ''}", f"    {shlex.join(c.argv)}"]
        jobs = planned.jobs.get(c, ())
        if jobs:
            lines.append(f"    affects {len(jobs)} job(s): {', '.join(j.describe() for j in jobs)}")
    lines += [f"not in the blueprint, left alone: {what}" for what in planned.unmanaged]
    return lines


COMMANDS = [accounts]
