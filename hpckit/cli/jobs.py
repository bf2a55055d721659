"""`hpckit templates list|show`, `hpckit render`, `hpckit submit`, `hpckit cancel`."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from hpckit.jobs.library import Library, Template, local_site_defaults
from hpckit.jobs.params import parse_sets
from hpckit.jobs.submit import Submitted, check_accepted, library_for, render, submit, transport_for
from hpckit.slurm.jobs import CliBackend, JobOutcome, Jobs, cancel_jobs, describe_failure, failure_status, failure_tail

if TYPE_CHECKING:
    from rich.table import Table

    from hpckit.proc import Transport

template_arg = click.argument("template")
set_option = click.option(
    "--set", "-s", "sets", multiple=True, metavar="KEY=VALUE", help="set a template parameter (repeatable)"
)
cluster_option = click.option(
    "--cluster", help="a cluster deployed by hpckit: run Slurm commands on its login node (default: this machine)"
)


@click.group("templates")
def templates_group() -> None:
    """The sbatch templates hpckit ships (and those in $HPCKIT_TEMPLATE_PATH)."""


@templates_group.command("list")
def templates_list() -> None:
    """Each template's name and what it runs."""
    from rich.console import Console  # only the listing commands draw tables; submit should not load rich
    from rich.table import Table

    table = Table("template", "description", box=None, header_style="bold")
    for template in Library(site_defaults=local_site_defaults()):
        table.add_row(template.name, template.description)
    Console().print(table)


@templates_group.command("show")
@template_arg
@click.option("--source", is_flag=True, help="print the template file instead of its parameters")
def templates_show(template: str, source: bool) -> None:
    """A template's parameters: name, type, default, help."""
    found = Library(site_defaults=local_site_defaults()).get(template)
    if source:
        click.echo(found.path.read_text(), nl=False)
        return
    from rich.console import Console

    Console().print(_params_table(found))


def _params_table(template: Template) -> Table:
    from rich.table import Table

    table = Table("parameter", "type", "default", "help", title=f"{template.name}: {template.description}")
    for spec in template.params.values():
        default = str(spec.default).lower() if isinstance(spec.default, bool) else str(spec.default)
        table.add_row(spec.name, spec.describe_type(), default or "-", spec.help)
    return table


@click.command("render")
@template_arg
@set_option
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path), help="write the script here")
@cluster_option
def render_cmd(template: str, sets: tuple[str, ...], output: Path | None, cluster: str | None) -> None:
    """Print (or write) the batch script TEMPLATE makes with these parameters (and the site's defaults)."""
    library = library_for(Jobs(CliBackend(transport), transport)) if (transport := _maybe(cluster)) else None
    rendered = render(template, parse_sets(sets), library)
    if output is None:
        click.echo(rendered.script, nl=False)
    else:
        output.write_text(rendered.script)
        output.chmod(0o755)


def _maybe(cluster: str | None) -> Transport | None:
    return transport_for(cluster) if cluster else None


@click.command("submit")
@template_arg
@set_option
@cluster_option
@click.option("--wait", is_flag=True, help="wait for the job, print its output, exit with its exit status")
@click.option("--timeout", type=float, help="with --wait: give up waiting after this many seconds")
@click.option(
    "--test-only", "test_only_", is_flag=True, help="ask Slurm whether it would accept the job, submitting nothing"
)
@click.option("--hold", is_flag=True, help="submit the job held: it starts once released (scontrol release ID)")
@click.option(
    "--backend",
    type=click.Choice(["auto", "cli", "pyslurm"]),
    default="auto",
    show_default=True,
    help="how job states are read while waiting (sbatch submits either way); auto: pyslurm where it matches Slurm",
)
@click.option("--json", "as_json", is_flag=True, help="print the result as JSON")
def submit_cmd(
    template: str,
    sets: tuple[str, ...],
    cluster: str | None,
    wait: bool,
    timeout: float | None,
    test_only_: bool,
    hold: bool,
    backend: str,
    as_json: bool,
) -> None:
    """Render TEMPLATE and submit it with sbatch."""
    jobs = Jobs.on(transport_for(cluster), backend)
    rendered = render(template, parse_sets(sets), library_for(jobs))
    if wait and (hold or rendered.values.get("array")):
        raise click.UsageError("--wait follows one job that runs: not a held job, nor a job array")
    if test_only_:
        estimate = check_accepted(rendered, jobs)
        text = f"Slurm accepts it: would start at {estimate.start} on {estimate.nodes or '?'}"
        click.echo(json.dumps(estimate.__dict__) if as_json else text)
        return
    done = submit(rendered, jobs, wait=wait, timeout=timeout, check=False, hold=hold)
    if done.outcome is None:
        click.echo(json.dumps({"job_id": done.job_id, "template": rendered.template}) if as_json else done.job_id)
        return
    _report(done, done.outcome, as_json)


def _report(done: Submitted, outcome: JobOutcome, as_json: bool) -> None:
    record = outcome.record
    if as_json:
        click.echo(json.dumps(_outcome_json(done, outcome)))
    else:
        click.echo(outcome.output or "", nl=False)
        state = f"job {done.job_id} {record.state} (exit code {record.exit_code}) in {outcome.seconds:.1f} s"
        click.echo(state, err=True)
    if not record.ok:
        # The output is printed in full above (or is in the JSON): name the log, and with a first failed
        # task show the lines up to it, which the other ranks' dying words have pushed up the log.
        first = outcome.first_failure
        failure = describe_failure(record, None, "", first)
        click.echo(f"hpckit: error: {failure}; output: {outcome.output_path or 'unknown'}", err=True)
        if first is not None and not as_json:
            tail = failure_tail(outcome.output or "", first)
            click.echo(f"hpckit: the output at that failure:\n{tail}", err=True)
        sys.exit(failure_status(record, first))


def _outcome_json(done: Submitted, outcome: JobOutcome) -> dict[str, object]:
    record = outcome.record
    first = outcome.first_failure
    return {
        "job_id": done.job_id,
        "template": done.rendered.template,
        "state": record.state,
        "exit_code": record.exit_code,
        "signal": record.signal,
        "status": record.status,
        "nodes": list(record.nodes),
        "first_failure": None if first is None else dataclasses.asdict(first),
        "output_path": outcome.output_path,
        "output": outcome.output,
        "seconds": round(outcome.seconds, 3),
    }


@click.command("cancel")
@click.argument("job_ids", nargs=-1)
@click.option("--name", "-n", help="cancel every live job with this name (your own, unless --user is given)")
@click.option("--user", "-u", help="cancel every live job of this user (with --name: only those with that name)")
@cluster_option
def cancel_cmd(job_ids: tuple[str, ...], name: str | None, user: str | None, cluster: str | None) -> None:
    """Cancel jobs by id, by name or by user; says what it cancelled, exits 1 when any was not found."""
    if not (job_ids or name or user):
        raise click.UsageError("name the jobs to cancel: JOB_ID..., --name NAME or --user USER")
    done = cancel_jobs(CliBackend(transport_for(cluster)), job_ids, name=name, user=user)
    for job in done.cancelled:
        click.echo(f"cancelled {job.describe()}")
    for what, why in done.missed:
        click.echo(f"hpckit: error: {what} {why}", err=True)
    if done.missed or not done.cancelled:
        sys.exit(1)


COMMANDS = [templates_group, render_cmd, submit_cmd, cancel_cmd]
