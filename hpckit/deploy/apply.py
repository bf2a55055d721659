"""`hpckit deploy` and `hpckit plan`: blueprint -> target -> playbook run -> join watchdog -> record."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpckit import __version__
from hpckit.blueprint.models import Blueprint
from hpckit.deploy.events import Tracker
from hpckit.deploy.inventory import host_entries
from hpckit.deploy.join import SLURMD_LOG, JoinReport, wait_for_join
from hpckit.deploy.playvars import build_vars
from hpckit.deploy.record import RECORDED_CONFIGS, ClusterAccess, DeploymentRecord
from hpckit.deploy.runner import PlaybookRun, RunOutcome, ansible_version, run_playbook
from hpckit.deploy.targets import Target, prepare_target
from hpckit.errors import HpckitError
from hpckit.slurm.client import SlurmClient

EventSink = Callable[[Mapping[str, Any]], None]


@dataclass(frozen=True)
class DeployOptions:
    limit: str | None = None
    join_timeout: float = 120.0
    record_root: Path | None = None
    forks: int = 50


@dataclass
class DeployResult:
    tracker: Tracker
    outcome: RunOutcome
    record: DeploymentRecord
    join: JoinReport | None = None
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.tracker.ok and self.outcome.status == "successful" and (self.join is None or self.join.ok)


def _timed(timings: dict[str, float], name: str, start: float) -> None:
    timings[name] = round(time.monotonic() - start, 3)


def deploy(bp: Blueprint, tracker: Tracker, sink: EventSink, opts: DeployOptions | None = None) -> DeployResult:
    opts = opts or DeployOptions()
    timings: dict[str, float] = {}
    t0 = time.monotonic()
    target = prepare_target(bp)
    _timed(timings, "target", t0)
    record = DeploymentRecord.create(bp.cluster_name, opts.record_root)
    inventory, extravars = build_vars(bp, target.access)
    extravars.update(target.runtime_extravars())
    record.write_json("blueprint.json", bp.model_dump(mode="json"))
    record.write_yaml("inventory.yml", inventory)
    record.write_yaml("extravars.yml", extravars)
    tracker.expect_hosts([e.name for e in host_entries(bp)])
    t1 = time.monotonic()
    run = PlaybookRun(limit=opts.limit, forks=opts.forks, fact_cache=record.path.parent.parent / "facts")
    outcome = run_playbook(inventory, extravars, run, sink, keep_events=record.events_file)
    _timed(timings, "playbook", t1)
    result = DeployResult(tracker, outcome, record, timings=timings)
    if tracker.ok and outcome.status == "successful":
        t2 = time.monotonic()
        result.join = _join(bp, target, opts.join_timeout)
        _timed(timings, "join", t2)
        _fetch_configs(bp, target, record)
    _timed(timings, "total", t0)
    _finish_record(bp, target, result)
    return result


def plan(bp: Blueprint, tracker: Tracker, sink: EventSink) -> RunOutcome:
    """A check + diff run: what deploy would change, file by file, changing nothing."""
    target = prepare_target(bp, bring_up_lab=False)
    inventory, extravars = build_vars(bp, target.access)
    extravars.update(target.runtime_extravars())
    tracker.expect_hosts([e.name for e in host_entries(bp)])
    return run_playbook(inventory, extravars, PlaybookRun(check=True, diff=True), sink)


def _join(bp: Blueprint, target: Target, timeout: float) -> JoinReport:
    compute = [host for _, host, _ in bp.compute_hosts()]
    controller = target.transport(bp.controller.host)
    try:
        report = wait_for_join(SlurmClient(controller), compute, timeout=timeout)
    finally:
        controller.close()
    for node in report.missing:
        report.log_tails[node] = _log_tail(target, node)
    return report


def _log_tail(target: Target, node: str, lines: int = 15) -> str:
    conn = target.transport(node)
    try:
        done = conn.run(["tail", "-n", str(lines), SLURMD_LOG], timeout=15)
        return done.stdout if done.ok else done.describe()
    except HpckitError as exc:
        return f"(no log: {exc})"
    finally:
        conn.close()


def _fetch_configs(bp: Blueprint, target: Target, record: DeploymentRecord) -> None:
    hosts = [bp.controller.host, *{p.hostnames()[0] for p in bp.partitions}]
    for host in hosts:
        conn = target.transport(host)
        try:
            for path in RECORDED_CONFIGS:
                done = conn.run(["cat", path], timeout=15)
                if done.ok:
                    record.write_config(host, path, done.stdout)
        except HpckitError:
            continue  # the record notes what it has; a missing copy is not a failed deploy
        finally:
            conn.close()


def _slurm_version(bp: Blueprint, target: Target) -> str:
    conn = target.transport(bp.controller.host)
    try:
        return SlurmClient(conn).version()
    except HpckitError as exc:
        return f"unknown ({exc})"
    finally:
        conn.close()


def _finish_record(bp: Blueprint, target: Target, result: DeployResult) -> None:
    rec, tracker = result.record, result.tracker
    rec.write_json(
        "versions.json",
        {"hpckit": __version__, "ansible-core": ansible_version(), "slurm": _slurm_version(bp, target)},
    )
    rec.write_json(
        "summary.json",
        {
            "ok": result.ok,
            "status": result.outcome.status,
            "rc": result.outcome.rc,
            "hosts": {h: t.as_dict() for h, t in tracker.hosts.items()},
            "failures": [str(f) for f in tracker.failures],
            "join": None
            if result.join is None
            else {"joined": result.join.joined, "missing": result.join.missing, "seconds": result.join.seconds},
            "timings_s": result.timings,
        },
    )
    login = bp.login[0].host
    rec.write_access(
        ClusterAccess(
            cluster=bp.cluster_name,
            login_host=login,
            login_address=target.addresses[login],
            controller_host=bp.controller.host,
            addresses=target.addresses,
            access=target.access,
            lab=target.lab,
        )
    )
    if result.ok:
        rec.mark_current()
