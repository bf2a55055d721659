"""`hpckit deploy`, `hpckit plan`, `hpckit destroy`, `hpckit expand`, `hpckit upgrade`."""

from __future__ import annotations

import difflib
import json
import sys
from collections import defaultdict
from pathlib import Path

import click
from rich.console import Console

from hpckit.blueprint import Blueprint, load_blueprint
from hpckit.blueprint.models import LabProvider, VmProvider
from hpckit.blueprint.release import slurm_release_of
from hpckit.cli.accounts import planned_json, planned_lines
from hpckit.cli.blueprint import site_option
from hpckit.deploy.apply import DeployOptions, DeployResult, deploy, installable, plan
from hpckit.deploy.changes import overall, plan_changes
from hpckit.deploy.events import ConfigDiff, Tracker
from hpckit.deploy.progress import Progress, tally_table
from hpckit.deploy.record import mark_destroyed
from hpckit.deploy.upgrade import (
    DEFAULT_BATCH,
    UpgradePlan,
    live_cluster,
    plan_upgrade,
    release_guard,
    running_release,
)
from hpckit.deploy.upgrade_run import UpgradeProgress, UpgradeResult, failure_lines, run_upgrade
from hpckit.errors import InputError
from hpckit.lab.provider import lab_down

blueprint_arg = click.argument("blueprint", type=click.Path(dir_okay=False, path_type=Path))


def _load(path: Path, site_files: tuple[Path, ...]) -> Blueprint:
    return load_blueprint(path, site_files)


@click.command("deploy")
@blueprint_arg
@site_option
@click.option("--limit", help="only these hosts (Ansible pattern)")
@click.option("--join-timeout", default=120.0, show_default=True, help="seconds to wait for nodes to go idle")
@click.option("--json", "as_json", is_flag=True, help="print the summary as JSON")
@click.option("--quiet", "-q", is_flag=True, help="no progress display")
@click.option("--verify", is_flag=True, help="then prove every node's allreduce and each partition's fabric")
@click.option("--verify-timeout", default=600.0, show_default=True, help="time box of --verify, seconds")
@click.option(
    "--cancel-affected-jobs",
    is_flag=True,
    help="an `accounting:` deletion whose account, user or QOS has jobs running or waiting cancels those jobs "
    "first (without it the deploy refuses the deletion)",
)
def deploy_cmd(
    blueprint: Path,
    site_files: tuple[Path, ...],
    limit: str | None,
    join_timeout: float,
    as_json: bool,
    quiet: bool,
    verify: bool,
    verify_timeout: float,
    cancel_affected_jobs: bool,
) -> None:
    """Build (or converge) the cluster a blueprint describes; a lab blueprint brings the lab up first."""
    bp = _load(blueprint, site_files)
    release_guard(bp, str(blueprint))
    console = Console(stderr=as_json)
    tracker = Tracker()
    with Progress(tracker, console, enabled=not quiet) as progress:
        opts = DeployOptions(limit=limit, join_timeout=join_timeout, cancel_affected_jobs=cancel_affected_jobs)
        result = deploy(bp, tracker, progress, opts)
    if not as_json:
        _print_summary(console, result)
    verified = _verify(bp, result, verify_timeout, quiet, as_json) if verify and result.ok else None
    if as_json:
        click.echo((result.record.path / "summary.json").read_text())
    if result.outcome.status == "canceled":
        click.echo(
            "deploy interrupted (Ctrl-C): Ansible stopped mid-run, so hosts may be part-way through a task; "
            "run `hpckit deploy` again to converge them",
            err=True,
        )
        sys.exit(130)  # 128 + SIGINT, as a shell reports a command Ctrl-C ended
    sys.exit(0 if result.ok and (verified is None or verified["status"] == "passed") else 1)


def _verify(bp: Blueprint, result: DeployResult, timeout: float, quiet: bool, as_json: bool) -> dict[str, object]:
    """hpckit verify on the new cluster; its result goes into the record (verify.json and summary.json)."""
    from hpckit.cli.bench import run_verify

    verified = run_verify(bp, timeout, progress=not quiet, evidence=not as_json)
    result.record.write_json("verify.json", verified)
    summary_path = result.record.path / "summary.json"
    summary = json.loads(summary_path.read_text())
    summary["verify"] = {k: verified[k] for k in ("status", "failures", "slow_nodes", "jobs", "seconds")}
    result.record.write_json("summary.json", summary)
    return verified


def _print_summary(console: Console, result: DeployResult) -> None:
    console.print(tally_table(result.tracker, f"deploy {result.outcome.status}"))
    for failure in result.tracker.failures:
        console.print(f"[red]FAILED[/red] {failure}", highlight=False)
    for note in result.tracker.notes:
        console.print(f"note: {note}", highlight=False, markup=False)
    if result.accounts is not None:
        if result.accounts.cancelled:
            console.print(f"accounting: cancelled jobs {', '.join(result.accounts.cancelled)}", highlight=False)
        for change in result.accounts.changes:
            console.print(f"accounting: {change.describe()}", highlight=False, markup=False)
        for what in result.accounts.unmanaged:
            console.print(f"accounting: not in the blueprint, left alone: {what}", highlight=False, markup=False)
    if result.accounts_error:
        console.print(f"[red]FAILED[/red] {result.accounts_error}", highlight=False)
    if result.outcome.status != "successful" and not result.tracker.failures:
        console.print(f"[red]Ansible stopped ({result.outcome.status}, rc {result.outcome.rc}):[/red]")
        console.print("\n".join(result.tracker.output_tail), highlight=False, markup=False)
    join = result.join
    if join is not None:
        if join.ok:
            done = len(join.expected) - len(join.held)
            console.print(f"{done} of {len(join.expected)} compute nodes idle in Slurm after {join.seconds:.1f} s")
        for node, state in join.held.items():
            console.print(
                f"[yellow]HELD[/yellow] {node}: {state}: taken out on purpose, not waited for", highlight=False
            )
        for node, state in join.missing.items():
            console.print(f"[red]NOT JOINED[/red] {node}: {state}", highlight=False)
            console.print(join.log_tails.get(node, ""), highlight=False, markup=False)
    console.print(f"record: {result.record.path}", highlight=False)


@click.command("plan")
@blueprint_arg
@site_option
@click.option("--json", "as_json", is_flag=True)
def plan_cmd(blueprint: Path, site_files: tuple[Path, ...], as_json: bool) -> None:
    """Show, changing nothing, how every rendered config differs from what is live."""
    bp = _load(blueprint, site_files)
    release_guard(bp, str(blueprint))
    tracker = Tracker()
    result = plan(bp, tracker, lambda event: tracker.feed(event))
    # The labels are a release's (hpckit/data/slurm-releases.yaml): the running one's, whose daemons take the
    # change, as the record saw it; the blueprint's where the record does not say (a blueprint naming another
    # release was refused above: an upgrade is `hpckit upgrade`'s business).
    release = running_release(bp.cluster_name) or slurm_release_of(bp)
    changes = plan_changes(tracker.diffs, release)
    if as_json:
        report: dict[str, object] = {
            "status": result.outcome.status,
            "slurm_release": release.series,
            "action": overall(changes).label,
            "changes": [{"file": c.file, "what": c.what, "action": c.action.label} for c in changes],
            "new_hosts": list(result.new_hosts),
            "diffs": [d.__dict__ for d in tracker.diffs],
            "failures": [str(f) for f in tracker.failures],
        }
        if result.accounts is not None or result.accounts_error:
            accounting = planned_json(result.accounts) if result.accounts is not None else {}
            report["accounting"] = {**accounting, "error": result.accounts_error}
        click.echo(json.dumps(report))
    else:
        _print_diffs(tracker.diffs)
        for change in changes:
            click.echo(f"{change.action.label:<26} {change.file}: {change.what}")
        for host in result.new_hosts:
            click.echo(f"{'new host':<26} {host}: not running yet; deploy starts it and builds it from scratch")
        if changes:
            click.echo(f"applying this plan needs: {overall(changes).label} (Slurm {release.series})")
        if result.accounts is not None:
            for line in planned_lines(result.accounts) or ["no changes"]:
                click.echo(f"accounting: {line}")
        for failure in tracker.failures:
            click.echo(f"cannot plan {failure}", err=True)
    if result.accounts_error:
        click.echo(f"cannot plan accounting: {result.accounts_error}", err=True)
    sys.exit(0 if tracker.ok and not result.accounts_error else 1)


def _print_diffs(diffs: list[ConfigDiff]) -> None:
    if not diffs:
        click.echo("no changes: every rendered config matches what is live")
        return
    grouped: dict[tuple[str, str, str], list[str]] = defaultdict(list)
    for d in diffs:
        grouped[(d.path, d.before, d.after)].append(d.host)
    for (path, before, after), hosts in grouped.items():
        click.echo(f"--- {path} on {', '.join(sorted(hosts))}")
        lines = difflib.unified_diff(before.splitlines(), after.splitlines(), "live", "rendered", lineterm="")
        click.echo("\n".join(lines))


@click.command("destroy")
@blueprint_arg
@site_option
def destroy_cmd(blueprint: Path, site_files: tuple[Path, ...]) -> None:
    """Take a lab or VM blueprint's machines down (a real cluster is never destroyed by hpckit)."""
    bp = _load(blueprint, site_files)
    if not isinstance(bp.provider, LabProvider | VmProvider):
        raise InputError(f"{blueprint}: destroy is only for `provider: lab` and `provider: vm` blueprints")
    lab_down(bp.name)  # namespace machines or VMs, whichever the lab of that name has
    mark_destroyed(bp.cluster_name)
    click.echo(f"lab {bp.name!r} is down")


@click.command("expand")
@blueprint_arg
@site_option
@click.option("--output", "-o", required=True, type=click.Path(file_okay=False, path_type=Path), help="folder to write")
@click.option(
    "--fabric",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="ibnetdiscover output of the fabric: writes topology.conf (and TopologyPlugin) as a deploy would",
)
@click.option("--no-configs", is_flag=True, help="only the inventory and the variables")
@click.option("--json", "as_json", is_flag=True, help="print what was written as JSON")
def expand_cmd(
    blueprint: Path, site_files: tuple[Path, ...], output: Path, fabric: Path | None, no_configs: bool, as_json: bool
) -> None:
    """Write the inventory, the variables and every config the roles would write (slurm.conf, gres.conf,
    cgroup.conf, topology.conf, nccl.conf ...) into a folder, contacting no host: for review and GitOps."""
    from hpckit.deploy.expand import expand

    bp = _load(blueprint, site_files)
    fabric_text = fabric.read_text(errors="replace") if fabric else None
    done = expand(bp, output, fabric=fabric_text, configs=not no_configs)
    if as_json:
        files = [{"path": f"files/{f.path}", "dest": f.dest, "hosts": f.hosts} for f in done.files]
        report = {"folder": str(output), "hosts": done.hosts, "files": files, "timings_s": done.timings_s}
        click.echo(json.dumps(report))
        return
    click.echo(f"{output}/inventory.yml, extravars.yml ({done.hosts} compute nodes)")
    for item in done.files:
        click.echo(f"{output}/files/{item.path}  -> {item.dest} on {item.hosts}")
    click.echo(f"{len(done.files)} configs; what each assumes is in {output}/files.yml")


@click.command("upgrade")
@blueprint_arg
@site_option
@click.option("--dry-run", is_flag=True, help="print the plan and change nothing")
@click.option(
    "--batch",
    default=DEFAULT_BATCH,
    show_default=True,
    help="nodes whose slurmd restarts at once: a count (4) or a share of the nodes (25%)",
)
@click.option("--yes", "-y", is_flag=True, help="upgrade without asking (needed where no one can answer)")
@click.option("--json", "as_json", is_flag=True, help="print the plan as JSON")
@click.option("--quiet", "-q", is_flag=True, help="no progress display")
def upgrade_cmd(
    blueprint: Path,
    site_files: tuple[Path, ...],
    dry_run: bool,
    batch: str,
    yes: bool,
    as_json: bool,
    quiet: bool,
) -> None:
    """Upgrade the deployed cluster's Slurm, rolling, to the blueprint's slurm.version: SchedMD's order
    (backups, slurmdbd, slurmctld, slurmd in batches, clients, SPANK plugins), running jobs kept. Refused,
    before anything is touched, where Slurm does not support the jump. Run again after a failure, it resumes."""
    bp = _load(blueprint, site_files)
    live = live_cluster(bp.cluster_name)
    plan = plan_upgrade(live, bp, batch)
    if as_json:
        click.echo(json.dumps({**plan.as_dict(), "version_seen": live.version_seen}))
    else:
        if not live.version_seen:
            click.echo(f"note: the record does not say which Slurm runs; its blueprint's {live.version} stands in")
        click.echo("\n".join(plan.lines()))
    if not plan.steps or dry_run:
        return
    installable(bp)  # a Slurm the roles cannot install yet: refused before the question
    _confirm_upgrade(plan, yes)
    console = Console(stderr=as_json)
    tracker = Tracker()
    with UpgradeProgress(tracker, console, enabled=not quiet) as progress:
        result = run_upgrade(bp, plan, live, tracker, progress)
    _print_upgrade(console, result)
    if result.outcome.status == "canceled":
        click.echo("upgrade interrupted (Ctrl-C): run `hpckit upgrade` again to resume it", err=True)
        sys.exit(130)
    sys.exit(0 if result.ok else 1)


def _confirm_upgrade(plan: UpgradePlan, yes: bool) -> None:
    if yes:
        return
    question = f"upgrade {plan.cluster} to Slurm {plan.target} as planned above?"
    if not sys.stdin.isatty():
        raise InputError(f"{question} no one can answer here: add --yes to upgrade, or --dry-run to only plan")
    click.confirm(question, abort=True)


def _print_upgrade(console: Console, result: UpgradeResult) -> None:
    console.print(tally_table(result.tracker, f"upgrade {result.outcome.status}"))
    lines = failure_lines(result.tracker, result.outcome)
    if result.ok:
        lines.append(f"Slurm {result.slurm_version} on every host")
    lines.extend(f"backup on the controller: {path}" for path in result.backups)
    lines.append(f"record: {result.record.path}")
    for line in lines:  # whole: a path or a task's output cut at the terminal's width would mislead
        console.print(line, highlight=False, markup=False, soft_wrap=True)


COMMANDS = [deploy_cmd, plan_cmd, destroy_cmd, expand_cmd, upgrade_cmd]
