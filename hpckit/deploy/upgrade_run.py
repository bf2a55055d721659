"""`hpckit upgrade` without --dry-run: the plan (hpckit.deploy.upgrade) run as ansible/upgrade.yml through the
one runner module; a failure named by its step (the play), host and task with the task's own output; on
success a new deployment record at the new release, with the paths of the backups the controller holds.

No record of progress is kept: every step of upgrade.yml reads where its host stands first and does nothing
where the host is at the target, so running `hpckit upgrade` again after a failure resumes where it stopped.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from hpckit import __version__
from hpckit.blueprint.models import Blueprint
from hpckit.clusters import ACCESS, CONFIGS, VERSIONS, ClusterDir
from hpckit.deploy.apply import installable, playbook_vars, start_record
from hpckit.deploy.events import Failure, Tracker
from hpckit.deploy.inventory import host_entries
from hpckit.deploy.progress import Progress
from hpckit.deploy.record import DeploymentRecord
from hpckit.deploy.runner import PlaybookRun, RunOutcome, ansible_version, run_playbook
from hpckit.deploy.source_fetch import with_local_containers, with_local_source
from hpckit.deploy.targets import prepare_target
from hpckit.deploy.upgrade import (
    LiveCluster,
    UpgradePlan,
    backup_dir,
    pyxis_hosts,
    raised_timeouts,
    timeouts_apply,
)
from hpckit.errors import HpckitError

__all__ = ["UPGRADE_PLAYBOOK", "UpgradeProgress", "UpgradeResult", "failure_lines", "run_upgrade", "upgrade_extravars"]

UPGRADE_PLAYBOOK = "upgrade.yml"
# The verify step's task whose output names the version slurmctld and every slurmd report.
VERIFY_TASK = "Check the versions slurmctld and the nodes report"

EventSink = Callable[[Mapping[str, Any]], None]
Runner = Callable[[Mapping[str, Any], Mapping[str, Any], PlaybookRun, EventSink, Path | None], RunOutcome]


def upgrade_extravars(plan: UpgradePlan, live: LiveCluster, bp: Blueprint) -> dict[str, Any]:
    """The slurm_upgrade_* variables of upgrade.yml, from the plan (ANSIBLE-CONTRACT.md): the same batch size,
    timeouts and backup folder as the plan prints."""
    return {
        "slurm_upgrade_version": str(plan.target),
        "slurm_upgrade_batch": plan.batch_size,
        "slurm_upgrade_timeouts": dict(live.timeouts),
        "slurm_upgrade_raised_timeouts": raised_timeouts(live),
        "slurm_upgrade_timeouts_apply": timeouts_apply(live),
        "slurm_upgrade_backup_dir": backup_dir(live, plan),
        "slurm_upgrade_state_save": live.state_save,
        "slurm_upgrade_spank": plan.major and bool(pyxis_hosts(bp)),
    }


@dataclass
class UpgradeResult:
    tracker: Tracker
    outcome: RunOutcome
    record: DeploymentRecord
    backups: list[str] = field(default_factory=list)
    slurm_version: str = ""

    @property
    def ok(self) -> bool:
        return self.tracker.ok and self.outcome.status == "successful"


def failure_lines(tracker: Tracker, outcome: RunOutcome) -> list[str]:
    """Why an upgrade stopped: the step (play), host and task of each failure with the task's own output;
    Ansible's last lines when it stopped outside any task."""
    lines = [_failure_line(f) for f in tracker.failures]
    if not lines and outcome.status != "successful":
        lines.append(f"upgrade stopped: Ansible ended {outcome.status} (rc {outcome.rc}) outside any task:")
        lines.extend(tracker.output_tail)
    return lines


def _failure_line(failure: Failure) -> str:
    step = f"step {failure.play!r}" if failure.play else "a step"
    what = "unreachable (SSH)" if failure.unreachable else "failed"
    return f"upgrade stopped at {step} on {failure.host}: task {failure.task!r} {what}: {failure.message}"


class _Watch:
    """Passes every event on, keeping what the record needs: the backups upgrade.yml reports through
    set_stats, and the version the verify step read."""

    def __init__(self, sink: EventSink) -> None:
        self.sink = sink
        self.backups: list[str] = []
        self.version = ""

    def __call__(self, event: Mapping[str, Any]) -> None:
        data: Mapping[str, Any] = event.get("event_data") or {}
        if event.get("event") == "playbook_on_stats":
            found = (data.get("artifact_data") or {}).get("slurm_upgrade_backups") or []
            self.backups = [str(path) for path in found]
        elif event.get("event") == "runner_on_ok" and data.get("task") == VERIFY_TASK:
            lines = str((data.get("res") or {}).get("stdout", "")).splitlines()
            self.version = next((line.split()[1] for line in lines if line.startswith("slurmctld ")), "")
        self.sink(event)


def run_upgrade(
    bp: Blueprint,
    plan: UpgradePlan,
    live: LiveCluster,
    tracker: Tracker,
    sink: EventSink,
    runner: Runner | None = None,
) -> UpgradeResult:
    """Run upgrade.yml for ``plan`` (one that has steps) with ``runner`` (run_playbook unless given); the record
    becomes current only when it succeeded."""
    installable(bp)
    bp = with_local_source(bp)
    if any(step.kind == "spank" for step in plan.steps):  # the one step that reads a container input
        bp = with_local_containers(bp, enroot=False)
    target = prepare_target(bp, bring_up_lab=False)
    if target.not_started:
        raise HpckitError(
            f"lab {bp.cluster_name!r}: {', '.join(target.not_started)} not running; an upgrade starts no "
            "machine: bring the lab up with the running release first (`hpckit deploy`)"
        )
    inventory, extravars = playbook_vars(bp, target)
    extravars.update(upgrade_extravars(plan, live, bp))
    record = start_record(bp, inventory, extravars)
    tracker.expect_hosts([e.name for e in host_entries(bp)])
    watch = _Watch(sink)
    started = time.monotonic()
    run = PlaybookRun(playbook=UPGRADE_PLAYBOOK, fact_cache=record.cluster_dir.facts)
    outcome = (runner or run_playbook)(inventory, extravars, run, watch, record.events_file)
    result = UpgradeResult(tracker, outcome, record, watch.backups, watch.version or str(plan.target))
    _finish_record(plan, live, result, round(time.monotonic() - started, 3))
    return result


def _finish_record(plan: UpgradePlan, live: LiveCluster, result: UpgradeResult, seconds: float) -> None:
    """summary.json and upgrade.json always; on success the previous record's access and configs (the
    upgrade changes neither), the new version, and the record made current."""
    rec = result.record
    rec.write_json(
        "upgrade.json",
        {**plan.as_dict(), "backups": result.backups, "seconds": seconds, "ok": result.ok},
    )
    rec.write_json(
        "summary.json",
        {
            "ok": result.ok,
            "status": result.outcome.status,
            "rc": result.outcome.rc,
            "hosts": {h: t.as_dict() for h, t in result.tracker.hosts.items()},
            "failures": failure_lines(result.tracker, result.outcome),
            "timings_s": {"playbook": seconds},
        },
    )
    if not result.ok:
        return
    before = ClusterDir.of(live.cluster).current
    if (before / ACCESS).is_file():
        shutil.copy2(before / ACCESS, rec.path / ACCESS)
    if (before / CONFIGS).is_dir():
        shutil.copytree(before / CONFIGS, rec.path / CONFIGS, dirs_exist_ok=True)
    rec.write_json(VERSIONS, {"hpckit": __version__, "ansible-core": ansible_version(), "slurm": result.slurm_version})
    rec.mark_current()


class UpgradeProgress(Progress):
    """Deploy's display, plus a line for each wait (a step retrying until a daemon answers: slurmdbd's
    database conversion can take minutes)."""

    def __init__(self, tracker: Tracker, console: Console, enabled: bool = True) -> None:
        super().__init__(tracker, console, enabled, title="upgrading")

    def __call__(self, event: Mapping[str, Any]) -> None:
        super().__call__(event)
        if event.get("event") != "runner_retry" or not self.enabled:
            return
        data: Mapping[str, Any] = event.get("event_data") or {}
        res: Mapping[str, Any] = data.get("res") or {}
        line = f"{data.get('host', '?')}: {data.get('task', '')}: waiting (try {res.get('attempts', '?')} of "
        line += f"{res.get('retries', '?')})"
        (self.live.console if self.live is not None else self.console).print(line, highlight=False, markup=False)
