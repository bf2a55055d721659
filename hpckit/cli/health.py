"""`hpckit health`: check this node (the quick tier is Slurm's HealthCheckProgram), sweep the fleet,
report, list the checks. Thin: every decision lives in hpckit.health; imports are lazy so that the
quick tier starts fast."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from hpckit.health.config import NodeConfig

config_option = click.option(
    "--config", "config_path", type=click.Path(dir_okay=False), help="health config (default /etc/hpckit/health.json)"
)
store_option = click.option("--store", help="shared health store (default: the config's)")
disable_option = click.option("--disable", multiple=True, metavar="CHECK", help="skip a check or area (repeatable)")
cluster_option = click.option(
    "--cluster",
    help="a cluster deployed by hpckit: run this command on its login node, where its health store is",
)
# Where the hpckit_health role puts the launcher on every host (hpckit_health_config_dir).
REMOTE_LAUNCHER = "/etc/hpckit/hpckit-health"


def _forward(cluster: str | None) -> None:
    """With --cluster, run the same command with the same options on the cluster's login node (the sweep
    needs its Slurm, and the store lives on its shared filesystem), print what it prints, exit as it exits."""
    if cluster is None:
        return
    from hpckit.jobs.submit import transport_for

    ctx = click.get_current_context()
    argv = [REMOTE_LAUNCHER, str(ctx.info_name), *_options_argv(ctx)]
    transport = transport_for(cluster)
    try:
        done = transport.run(argv, timeout=None)
    finally:
        transport.close()
    if done.stdout:
        click.echo(done.stdout, nl=False)
    if done.stderr:
        click.echo(done.stderr, nl=False, err=True)
    sys.exit(done.rc)


def _options_argv(ctx: click.Context) -> list[str]:
    """The command's options as given (those left at their default are left out), --cluster excepted."""
    argv: list[str] = []
    for param in ctx.command.params:
        value = ctx.params.get(param.name or "")
        if not isinstance(param, click.Option) or param.name == "cluster" or value in (None, (), param.default):
            continue
        flag = max(param.opts, key=len)
        if param.is_flag:
            argv += [flag] if value is True else []
        else:
            for item in value if param.multiple else (value,):
                argv += [flag, str(item)]
    return argv


def _config(path: str | None, store: str | None) -> NodeConfig:
    from dataclasses import replace

    from hpckit.health.config import load_config

    config = load_config(path)
    return replace(config, store=store) if store else config


@click.group("health")
def health() -> None:
    """Node health checks, the nightly sweep, and the drain policy."""


@health.command("check")
@click.option("--tier", type=click.Choice(["quick", "nightly"]), default="quick", show_default=True)
@config_option
@store_option
@disable_option
@click.option("--only", multiple=True, metavar="CHECK", help="run only these checks or areas")
@click.option("--act", is_flag=True, help="apply the drain policy to this node (as HealthCheckProgram)")
@click.option("--dry-run", is_flag=True, help="change nothing: no drain, no stored verdict, no cursor moved")
@click.option("--no-store", is_flag=True, help="do not write the verdict to the shared store")
@click.option("--json", "as_json", is_flag=True, help="print the rows as one JSON line")
@click.option("--verbose", "-v", is_flag=True, help="list OK measurements too")
@click.option("--quiet", "-q", is_flag=True, help="print nothing (HealthCheckProgram)")
def check_cmd(
    tier: str,
    config_path: str | None,
    store: str | None,
    disable: tuple[str, ...],
    only: tuple[str, ...],
    act: bool,
    dry_run: bool,
    no_store: bool,
    as_json: bool,
    verbose: bool,
    quiet: bool,
) -> None:
    """Check this node. Exit 1 when a check FAILs, except with --act (the drain is the answer then)."""
    from hpckit.health.model import Status
    from hpckit.health.node import NodeRunOptions, check_node
    from hpckit.health.report import render_node

    config = _config(config_path, store)
    options = NodeRunOptions(tier, disable, only, act, dry_run, not no_store)  # type: ignore[arg-type]
    report = check_node(config, options)
    if as_json:
        click.echo(json.dumps(_node_json(report), separators=(",", ":")))
    elif not quiet:
        click.echo(render_node(report, verbose=verbose, threshold=config.policy.circuit_breaker))
    failed = any(r.status == Status.FAIL for r in report.rows)
    sys.exit(1 if failed and not act else 0)


def _node_json(report: object) -> dict[str, object]:
    from hpckit.health.node import NodeReport

    assert isinstance(report, NodeReport)
    decision = report.decision
    return {
        "node": report.node,
        "tier": report.tier,
        "seconds": round(report.seconds, 3),
        "rows": [r.to_dict() for r in report.rows],
        "decision": None
        if decision is None
        else {"action": decision.action.value, "reason": decision.reason, "why": decision.why},
        "applied": None if report.applied is None else report.applied.message,
        "notes": report.notes,
    }


@health.command("job", hidden=True, context_settings={"ignore_unknown_options": True})
@click.argument("argv", nargs=-1, type=click.UNPROCESSED)
def job_cmd(argv: tuple[str, ...]) -> None:
    """The nightly tier on this node as one JSON line: what the sweep runs on each node."""
    from hpckit.health.job import main as job_main

    sys.exit(job_main(argv))


@health.command("sweep")
@config_option
@store_option
@disable_option
@click.option("--nodes", help="only these nodes (hostlist, e.g. node[1-4])")
@click.option("--dry-run", is_flag=True, help="run and report, but drain, resume and store nothing")
@click.option("--textfile", type=click.Path(dir_okay=False), help="also write the Prometheus textfile here")
@click.option("--time-limit", default=15, show_default=True, help="minutes per node job")
@click.option("--parallel", default=64, show_default=True, help="node jobs at once")
@click.option("--no-ssh", is_flag=True, help="no out-of-band checks over SSH, even where the config allows them")
@click.option("--json", "as_json", is_flag=True, help="print the run summary as JSON")
@cluster_option
def sweep_cmd(
    config_path: str | None,
    store: str | None,
    disable: tuple[str, ...],
    nodes: str | None,
    dry_run: bool,
    textfile: str | None,
    time_limit: int,
    parallel: int,
    no_ssh: bool,
    as_json: bool,
    cluster: str | None,
) -> None:
    """Run the nightly tier on every idle node (one exclusive job each) and apply the drain policy."""
    _forward(cluster)
    from hpckit.health import history, report
    from hpckit.health.store import Store
    from hpckit.health.sweep import SweepOptions, detach_from_job, sweep
    from hpckit.proc import LocalTransport

    config = _config(config_path, store)
    detach_from_job()
    options = SweepOptions(
        _hosts(nodes), dry_run, disable, time_limit, parallel=parallel, textfile=textfile, probe=not no_ssh
    )
    result = sweep(config, options, LocalTransport())
    if as_json:
        click.echo(json.dumps(report.run_summary(result), indent=2))
        return
    past = history.load_history(Store(config.store), last=30)
    click.echo(report.render_sweep(result, past, config.policy.circuit_breaker))


def _hosts(expr: str | None) -> list[str] | None:
    if not expr:
        return None
    from hpckit.blueprint.models import expand_hosts
    from hpckit.errors import InputError

    try:
        return expand_hosts(expr)
    except ValueError as exc:
        raise InputError(str(exc)) from None


@health.command("schedule")
@config_option
@store_option
@click.option("--cron", help="when (default: the config's nightly schedule)")
@click.option("--partition", help="partition the sweep job runs in (default: Slurm's default)")
@click.option("--time-limit", default=120, show_default=True, help="minutes for the whole sweep")
@cluster_option
def schedule_cmd(
    config_path: str | None,
    store: str | None,
    cron: str | None,
    partition: str | None,
    time_limit: int,
    cluster: str | None,
) -> None:
    """Queue the next nightly sweep as a Slurm job held until its time (for clusters without scrontab or
    systemd); the job queues its successor before it sweeps."""
    _forward(cluster)
    import datetime as dt

    from hpckit.cron import parse_cron
    from hpckit.health.schedule import ensure_chain
    from hpckit.health.sweep import detach_from_job
    from hpckit.proc import LocalTransport
    from hpckit.slurm.nodes import JobOps

    config = _config(config_path, store)
    detach_from_job()
    message = ensure_chain(
        JobOps(LocalTransport()),
        parse_cron(cron or config.nightly),
        config.command,
        output=f"{config.store}/logs/sweep-%j.out",
        time_limit_min=time_limit,
        partition=partition,
        now=dt.datetime.now(),
    )
    click.echo(message)


@health.command("report")
@config_option
@store_option
@click.option("--run", "run_id", help="a stored run (default: the last)")
@cluster_option
def report_cmd(config_path: str | None, store: str | None, run_id: str | None, cluster: str | None) -> None:
    """Print the report of a stored sweep: failing nodes first, fleet medians, drift."""
    _forward(cluster)
    from hpckit.health import history, report
    from hpckit.health.store import Store

    config = _config(config_path, store)
    st = Store(config.store)
    result = report.load_result(st, run_id)
    click.echo(report.render_sweep(result, history.load_history(st, last=30), config.policy.circuit_breaker))


@health.command("list")
@click.option("--tier", type=click.Choice(["quick", "nightly"]), default="nightly", show_default=True)
def list_cmd(tier: str) -> None:
    """The registered checks."""
    from hpckit.health.registry import select

    for chk in select(tier):  # type: ignore[arg-type]
        click.echo(f"{chk.name:18} {chk.tier:8} {chk.description}")


COMMANDS = [health]


def main() -> None:
    """`python -m hpckit.health`: the same commands without loading the rest of hpckit's CLI."""
    from hpckit.errors import HpckitError

    try:
        health(standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        sys.exit(130)
    except HpckitError as exc:
        click.echo(f"hpckit: error: {exc}", err=True)
        sys.exit(exc.exit_code)
