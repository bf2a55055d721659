"""`hpckit deploy` and `hpckit plan`: blueprint -> target -> playbook run -> join watchdog -> record."""

from __future__ import annotations

import base64
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpckit import __version__
from hpckit.blueprint.models import Blueprint, LabProvider
from hpckit.blueprint.toolchain import toolchain_record
from hpckit.clusters import BLUEPRINT, INVENTORY, TOOLCHAIN, VERSIONS, ClusterAccess, ClusterDir
from hpckit.deploy.accounts import Applied, Planned, apply_accounts, plan_accounts, refuse_harm
from hpckit.deploy.build_record import install_record
from hpckit.deploy.events import Tracker, apt_reason_lost, explain_failures
from hpckit.deploy.inventory import host_entries
from hpckit.deploy.join import SLURMD_LOG, JoinReport, wait_for_join
from hpckit.deploy.limit import limit_guard
from hpckit.deploy.playvars import build_vars
from hpckit.deploy.record import RECORDED_CONFIGS, DeploymentRecord, retired_hosts, run_info
from hpckit.deploy.runner import PlaybookRun, RunOutcome, ansible_version, run_playbook
from hpckit.deploy.source_fetch import with_local_containers, with_local_source, with_local_toolchain
from hpckit.deploy.targets import Target, prepare_target
from hpckit.deploy.upgrade import release_guard, running_release
from hpckit.errors import HpckitError, InputError
from hpckit.proc import CommandResult, Transport
from hpckit.slurm.client import SlurmClient

EventSink = Callable[[Mapping[str, Any]], None]


@dataclass(frozen=True)
class DeployOptions:
    limit: str | None = None
    join_timeout: float = 120.0
    record_root: Path | None = None
    forks: int = 50
    cancel_affected_jobs: bool = False  # an accounts deletion cancels its jobs first instead of being refused


@dataclass
class DeployResult:
    tracker: Tracker
    outcome: RunOutcome
    record: DeploymentRecord
    join: JoinReport | None = None
    slurm_version: str = "unknown (the playbook did not finish)"
    timings: dict[str, float] = field(default_factory=dict)
    # Where Slurm came from (hpckit.deploy.build_record): the distribution, or which build.
    install: dict[str, Any] = field(default_factory=dict)
    accounts: Applied | None = None  # the blueprint's `accounting:`, applied after the playbook
    accounts_error: str = ""

    @property
    def ok(self) -> bool:
        joined = self.join is None or self.join.ok
        return self.tracker.ok and self.outcome.status == "successful" and joined and not self.accounts_error


def _timed(timings: dict[str, float], name: str, start: float) -> None:
    timings[name] = round(time.monotonic() - start, 3)


def installable(bp: Blueprint) -> None:
    """InputError, before any host is touched, for a Slurm the roles cannot install yet: the distribution's
    packages anywhere, SchedMD's release built on the lab (from a path or a URL); a cluster of other packages with
    a slurm.conf written for another release would not start."""
    mode, slurm = bp.slurm.install_mode, bp.slurm
    where = f"slurm.install: {mode} (Slurm {slurm.version})"
    if mode == "packages":
        raise InputError(f"not yet supported: {where}; use install: build (the lab) or install: distro")
    if mode == "build" and not isinstance(bp.provider, LabProvider):
        raise InputError(f"not yet supported: {where} outside the lab; use install: distro on real hosts for now")


def deploy(bp: Blueprint, tracker: Tracker, sink: EventSink, opts: DeployOptions | None = None) -> DeployResult:
    installable(bp)
    release_guard(bp)
    opts = opts or DeployOptions()
    limit_guard(bp, opts.limit)
    bp = with_local_toolchain(with_local_containers(with_local_source(bp)))
    timings: dict[str, float] = {}
    t0 = time.monotonic()
    target = prepare_target(bp)
    _timed(timings, "target", t0)
    _accounts_guard(bp, target, opts.cancel_affected_jobs)
    retired = {} if target.lab else retired_hosts(bp, opts.record_root)
    inventory, extravars = playbook_vars(bp, target)
    inventory["all"]["children"]["slurm_retired"]["hosts"] = retired
    tracker.tolerate(retired)
    record = start_record(bp, inventory, extravars, opts.record_root)
    tracker.expect_hosts([e.name for e in host_entries(bp)])
    t1 = time.monotonic()
    run = PlaybookRun(limit=opts.limit, forks=opts.forks, fact_cache=record.cluster_dir.facts)
    outcome = run_playbook(inventory, extravars, run, sink, keep_events=record.events_file)
    _timed(timings, "playbook", t1)
    if not tracker.ok:
        _explain_failures(target, tracker)
    result = DeployResult(tracker, outcome, record, timings=timings)
    if tracker.ok and outcome.status == "successful":
        t2 = time.monotonic()
        result.join, result.slurm_version = _after_playbook(bp, target, record, opts.join_timeout)
        result.install = _read_install(target, extravars)
        _timed(timings, "join", t2)
        if bp.accounting is not None and bp.accounting.declares:
            t3 = time.monotonic()
            _apply_accounts(bp, target, result, opts.cancel_affected_jobs)
            _timed(timings, "accounts", t3)
    _timed(timings, "total", t0)
    _finish_record(bp, target, result)
    return result


def _accounts_guard(bp: Blueprint, target: Target, cancel_jobs: bool) -> None:
    """On a cluster that runs, the accounting changes that would be refused after the playbook (a deletion
    that reaches running or waiting jobs, a user the hosts do not know) are refused before it, exit 2: the
    playbook would otherwise converge every host first, and the deploy fail at its end with the cluster
    changed. Where slurmdbd cannot be read yet (accounting just turned on), the apply after the playbook judges."""
    if bp.accounting is None or not bp.accounting.declares or running_release(bp.cluster_name) is None:
        return
    if bp.controller.host in target.not_started or ClusterDir.of(bp.cluster_name).destroyed() is not None:
        return
    controller, login = target.transport(bp.controller.host), target.transport(bp.login[0].host)
    try:
        try:
            planned = plan_accounts(bp.accounting, bp.cluster_name, controller)
        except (HpckitError, ValueError):  # not readable yet (AccountsError is a ValueError)
            return
        refuse_harm(planned, controller, login, cancel_jobs=cancel_jobs)
    finally:
        controller.close()
        login.close()


def _apply_accounts(bp: Blueprint, target: Target, result: DeployResult, cancel_jobs: bool) -> None:
    """sacctmgr on the controller (where slurmdbd answers once the playbook ran), users checked on the login
    node; a refusal or a failed command fails the deploy with its reason, the cluster otherwise converged."""
    assert bp.accounting is not None
    controller, login = target.transport(bp.controller.host), target.transport(bp.login[0].host)
    try:
        result.accounts = apply_accounts(bp.accounting, bp.cluster_name, controller, login, cancel_jobs=cancel_jobs)
    except HpckitError as exc:
        result.accounts_error = str(exc)
    finally:
        controller.close()
        login.close()


def start_record(
    bp: Blueprint, inventory: dict[str, Any], extravars: dict[str, Any], root: Path | None = None
) -> DeploymentRecord:
    """A new record of a run on the cluster (deploy or upgrade): the blueprint, who ran it, and the two files
    the playbook runs with (neither holds a secret)."""
    record = DeploymentRecord.create(bp.cluster_name, root)
    expanded = bp.model_dump(mode="json")
    record.write_json(BLUEPRINT, expanded)
    record.write_json("run.json", run_info(expanded))
    record.write_yaml(INVENTORY, inventory)
    record.write_yaml("extravars.yml", extravars)
    return record


@dataclass
class PlanResult:
    outcome: RunOutcome
    # Lab hosts whose machine does not run yet (added to the blueprint): deploy starts them and builds
    # them from scratch; the check run leaves them out, as there is nothing on them to compare with.
    new_hosts: tuple[str, ...] = ()
    accounts: Planned | None = None  # the blueprint's `accounting:` against slurmdbd's, when it declares any
    accounts_error: str = ""


def plan(bp: Blueprint, tracker: Tracker, sink: EventSink) -> PlanResult:
    """A check + diff run: what deploy would change, file by file, changing nothing."""
    release_guard(bp)
    target = prepare_target(bp, bring_up_lab=False)
    inventory, extravars = playbook_vars(bp, target)
    hosts = [e.name for e in host_entries(bp)]
    new = target.not_started
    if set(hosts) <= set(new):
        raise HpckitError(
            f"lab {bp.cluster_name!r} is not up: there is nothing to compare with (`hpckit deploy` builds it)"
        )
    tracker.expect_hosts([h for h in hosts if h not in new])
    limit = ",".join(["all", *(f"!{h}" for h in new)]) if new else None
    facts = ClusterDir.of(bp.cluster_name).facts  # the cluster's own, as deploy's
    outcome = run_playbook(
        inventory, extravars, PlaybookRun(check=True, diff=True, limit=limit, fact_cache=facts), sink
    )
    result = PlanResult(outcome, new)
    if bp.accounting is not None and bp.accounting.declares and bp.controller.host not in new:
        controller = target.transport(bp.controller.host)
        try:
            result.accounts = plan_accounts(bp.accounting, bp.cluster_name, controller)
        except (HpckitError, ValueError) as exc:  # AccountsError is a ValueError: an answer it cannot read
            result.accounts_error = str(exc)
        finally:
            controller.close()
    return result


def playbook_vars(bp: Blueprint, target: Target) -> tuple[dict[str, Any], dict[str, Any]]:
    """The blueprint's inventory and extravars, plus what depends on the machine that deploys."""
    inventory, extravars = build_vars(bp, target.access)
    extravars.update(target.runtime_extravars())
    inventory["all"]["children"]["slurm_retired"] = {"hosts": {}}  # filled by deploy (see retired_hosts)
    return inventory, extravars


def _after_playbook(bp: Blueprint, target: Target, record: DeploymentRecord, timeout: float) -> tuple[JoinReport, str]:
    """Join watchdog, Slurm version and copies of the configs: one connection to the controller for the first
    three, and one per partition's first node, in parallel (each SSH handshake costs a few tenths of a second,
    which is most of a no-op deploy's time after the playbook)."""
    others = sorted({p.hostnames()[0] for p in bp.partitions} - {bp.controller.host})
    with ThreadPoolExecutor(max_workers=1 + len(others)) as pool:
        copies = [pool.submit(_copy_configs, target, host, record) for host in others]
        controller = target.transport(bp.controller.host)
        try:
            report = _join(bp, controller, timeout)
            version = _slurm_version(controller)
            _fetch_configs(controller, bp.controller.host, record)
        finally:
            controller.close()
        for done in copies:
            done.result()
    for node in report.missing:
        report.log_tails[node] = _log_tail(target, node)
    return report, version


def _read_install(target: Target, extravars: dict[str, Any]) -> dict[str, Any]:
    """The record's word on where Slurm came from; a build's manifest is read on its build host."""
    if extravars.get("slurm_install") != "build":
        return install_record(extravars, None)
    try:
        conn = target.transport(str(extravars["slurm_build_host"]))
    except HpckitError:
        return install_record(extravars, None)
    try:
        return install_record(extravars, conn)
    finally:
        conn.close()


def _join(bp: Blueprint, controller: Transport, timeout: float) -> JoinReport:
    compute = [host for _, host, _ in bp.compute_hosts()]
    return wait_for_join(SlurmClient(controller), compute, timeout=timeout)


def _log_tail(target: Target, node: str, lines: int = 15) -> str:
    done = _run_on(target, node, ["tail", "-n", str(lines), SLURMD_LOG], timeout=15)
    if isinstance(done, HpckitError):
        return f"(no log: {done})"
    return done.stdout if done.ok else done.describe()


def _explain_failures(target: Target, tracker: Tracker) -> None:
    """Failures whose message lost its cause, completed from their hosts (in parallel: a broken mirror fails
    every host at once, and apt may wait on it for a while on each)."""
    hosts = sorted({f.host for f in tracker.failures if apt_reason_lost(f)})
    if not hosts:
        return
    with ThreadPoolExecutor(max_workers=min(16, len(hosts))) as pool:
        found = dict(zip(hosts, pool.map(lambda host: _apt_update(target, host), hosts), strict=True))
    tracker.failures[:] = explain_failures(tracker.failures, found.__getitem__)


def _apt_update(target: Target, host: str) -> str:
    """What apt says when it updates its cache on ``host``, for a failed apt task whose message lost it."""
    done = _run_on(target, host, ["env", "LANG=C", "apt-get", "-q", "update"], timeout=120)
    return f"(not read: {done})" if isinstance(done, HpckitError) else done.stdout + done.stderr


def _run_on(target: Target, host: str, argv: list[str], timeout: float) -> CommandResult | HpckitError:
    try:
        conn = target.transport(host)
    except HpckitError as exc:
        return exc
    try:
        return conn.run(argv, timeout=timeout)
    except HpckitError as exc:
        return exc
    finally:
        conn.close()


def _copy_configs(target: Target, host: str, record: DeploymentRecord) -> None:
    try:
        conn = target.transport(host)
    except HpckitError:
        return  # the record notes what it has; a missing copy is not a failed deploy
    try:
        _fetch_configs(conn, host, record)
    finally:
        conn.close()


# Every readable config as two lines, its path and its bytes in base64: one round trip for all of them,
# exact whatever they hold.
_CAT_CONFIGS = 'for f; do if [ -r "$f" ]; then printf "%s\\n" "$f"; base64 -w0 "$f"; echo; fi; done'


def _fetch_configs(conn: Transport, host: str, record: DeploymentRecord) -> None:
    try:
        done = conn.run(["sh", "-c", _CAT_CONFIGS, "sh", *RECORDED_CONFIGS], timeout=15)
    except HpckitError:
        return
    lines = done.stdout.splitlines() if done.ok else []
    for path, data in zip(lines[::2], lines[1::2], strict=False):
        if path in RECORDED_CONFIGS:
            record.write_config(host, path, base64.b64decode(data).decode(errors="replace"))


def _slurm_version(controller: Transport) -> str:
    try:
        return SlurmClient(controller).version()
    except HpckitError as exc:
        return f"unknown ({exc})"


def _accounts_json(result: DeployResult) -> dict[str, Any]:
    applied = result.accounts
    return {
        "changes": [c.describe() for c in applied.changes] if applied else [],
        "unmanaged": list(applied.unmanaged) if applied else [],
        "cancelled_jobs": list(applied.cancelled) if applied else [],
        "error": result.accounts_error,
    }


def _finish_record(bp: Blueprint, target: Target, result: DeployResult) -> None:
    rec, tracker = result.record, result.tracker
    # What `hpckit bench` and `verify` run on each partition, and where the deploy put it.
    rec.write_json(TOOLCHAIN, toolchain_record(bp))
    rec.write_json(
        VERSIONS,
        {
            "hpckit": __version__,
            "ansible-core": ansible_version(),
            "slurm": result.slurm_version,
            "slurm_install": result.install or {"mode": bp.slurm.install_mode},
        },
    )
    rec.write_json(
        "summary.json",
        {
            "ok": result.ok,
            "status": result.outcome.status,
            "rc": result.outcome.rc,
            "hosts": {h: t.as_dict() for h, t in tracker.hosts.items()},
            "failures": [str(f) for f in tracker.failures],
            "restarts": [{"host": h, "what": w} for h, w in tracker.restarts],
            "notes": tracker.notes,
            "join": None
            if result.join is None
            else {
                "joined": result.join.joined,
                "missing": result.join.missing,
                "held": result.join.held,
                "seconds": result.join.seconds,
            },
            "timings_s": result.timings,
            **({"accounting": _accounts_json(result)} if bp.accounting is not None else {}),
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
