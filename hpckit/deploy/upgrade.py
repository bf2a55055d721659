"""`hpckit upgrade`: the plan of a rolling Slurm upgrade, from what the deployment record says runs and the
blueprint that names the new version.

SchedMD's order (its upgrade guide): back up the accounting database and StateSaveLocation; raise
SlurmctldTimeout and SlurmdTimeout so that no node is marked down while its daemon restarts; slurmdbd first (a
new release's slurmdbd serves older slurmctlds, never the reverse; across a major release it converts the
database), then slurmctld, then slurmd a batch of nodes at a time (running jobs keep running: their slurmstepd
stays), then the client tools; across a major release the SPANK plugins (pyxis) are rebuilt against the new
headers; then the timeouts go back and every daemon's version is checked. Throughout, slurmdbd is never older
than slurmctld, nor slurmctld older than any slurmd.

``plan_upgrade`` is pure and refuses, before anything is touched, what Slurm does not support (a downgrade, a jump
over more releases than the target reads) and a blueprint whose hosts are not the deployed ones; ``live_cluster``
reads what it needs from the record.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from hpckit.blueprint.models import Blueprint, LabProvider
from hpckit.blueprint.release import slurm_release_of
from hpckit.clusters import ClusterDir, RecordError
from hpckit.errors import InputError
from hpckit.slurm_releases import ReleaseError, Version, apply_for, upgrade_problem

__all__ = [
    "LiveCluster",
    "Step",
    "UpgradePlan",
    "UpgradeRefused",
    "backup_dir",
    "batch_size",
    "live_cluster",
    "plan_upgrade",
    "pyxis_hosts",
    "raised_timeouts",
    "timeouts_apply",
]

# What the upgrade raises both timeouts to, seconds: longer than any daemon restart or database conversion it
# waits for, so that no node is set DOWN (and its jobs killed) meanwhile.
UPGRADE_TIMEOUT_S = 3600
TIMEOUT_KEYS = ("SlurmctldTimeout", "SlurmdTimeout")
DEFAULT_TIMEOUTS = {"SlurmctldTimeout": 120, "SlurmdTimeout": 300}  # slurm.conf.j2's values
DEFAULT_STATE_SAVE = "/var/spool/slurmctld"  # the slurm role's slurm_state_save_location
ACCOUNTING_DB = "slurm_acct_db"  # the slurm_accounting role's database; hpckit does not rename it
BACKUP_ROOT = "/var/backups/hpckit"
DEFAULT_BATCH = "10%"


class UpgradeRefused(InputError):
    """An upgrade hpckit will not start: nothing was touched."""


@dataclass(frozen=True)
class LiveCluster:
    """What the record says of the running cluster."""

    cluster: str
    version: Version
    hosts: frozenset[str]
    timeouts: dict[str, int]
    state_save: str
    version_seen: bool = True  # False: the record's blueprint stands in for a version nobody saw running


@dataclass(frozen=True)
class Step:
    kind: str  # backup, raise_timeouts, slurmdbd, slurmctld, slurmd, clients, spank, restore_timeouts, verify
    hosts: tuple[str, ...]
    action: str
    restarts: str | None = None  # the daemon the step restarts

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "hosts": list(self.hosts), "action": self.action, "restarts": self.restarts}


@dataclass(frozen=True)
class UpgradePlan:
    cluster: str
    current: Version
    target: Version
    install: str
    batch_size: int
    packages: str = ""  # where the new release's packages come from
    steps: tuple[Step, ...] = field(default_factory=tuple)

    @property
    def major(self) -> bool:
        """A new release series: slurmdbd converts the database and the SPANK plugins are rebuilt."""
        return self.current.series != self.target.series

    @property
    def batches(self) -> list[tuple[str, ...]]:
        return [s.hosts for s in self.steps if s.kind == "slurmd"]

    def as_dict(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "from": str(self.current),
            "to": str(self.target),
            "major": self.major,
            "install": self.install,
            "packages": self.packages,
            "batch_size": self.batch_size,
            "steps": [s.as_dict() for s in self.steps],
        }

    def lines(self) -> list[str]:
        """The plan as `hpckit upgrade --dry-run` prints it."""
        if not self.steps:
            return [f"{self.cluster}: Slurm {self.current} is what the blueprint names; nothing to upgrade"]
        kind = "a new release series: slurmdbd converts the database" if self.major else "a micro release"
        out = [
            f"upgrade {self.cluster}: Slurm {self.current} -> {self.target} ({kind}; install: {self.install})",
            f"packages: {self.packages}",
        ]
        for n, step in enumerate(self.steps, 1):
            out.append(f"{n:>3}. {step.kind:<16} {_hosts(step.hosts):<24} {step.action}")
        return out


def _hosts(hosts: tuple[str, ...]) -> str:
    return ",".join(hosts) if len(hosts) <= 3 else f"{hosts[0]} .. {hosts[-1]} ({len(hosts)} hosts)"


# --- the deploy's guard -----------------------------------------------------------------------------------

_SOURCE = {"distro": "the distribution's packages", "build": "built from SchedMD's source"}


class ReleaseChangeRefused(InputError):
    """`hpckit deploy` (or plan) of a blueprint whose Slurm is not the one running: nothing was touched."""


def release_guard(bp: Blueprint, blueprint_file: str = "BLUEPRINT") -> None:
    """ReleaseChangeRefused when the record says the cluster runs another Slurm release, or Slurm from another
    source, than the blueprint names: a deploy would replace packages under running daemons of another release
    (slurmdbd would refuse the new clients, the cluster left half-changed). The upgrade is `hpckit upgrade`'s."""
    record = ClusterDir.of(bp.cluster_name)
    current = running_release(bp.cluster_name)
    if current is None or record.destroyed() is not None:
        return  # a new cluster, or one the record cannot speak for
    target, source, wanted = slurm_release_of(bp), record.slurm_install_mode(), bp.slurm.install_mode
    if _already(current, target) and source in (None, wanted):
        return
    runs = f"Slurm {current}" + (f" ({_SOURCE.get(source, source)})" if source else "")
    names = f"Slurm {target}" + (f" ({_SOURCE.get(wanted, wanted)})" if wanted else "")
    what = (
        f"{bp.cluster_name} runs {runs}; the blueprint names {names}: `hpckit deploy` never changes the Slurm release"
    )
    try:
        problem = upgrade_problem(current, target) if not _already(current, target) else None
    except ReleaseError as exc:
        problem = str(exc)
    if problem is not None:
        raise ReleaseChangeRefused(f"{what}, and Slurm cannot upgrade that way either: {problem}")
    if source is not None and source != wanted:
        raise ReleaseChangeRefused(f"{what} or where it comes from; deploy with the running one's `slurm:` settings")
    raise ReleaseChangeRefused(
        f"{what}; run `hpckit upgrade {blueprint_file}` (a rolling upgrade in SchedMD's order: running jobs keep "
        "running), or put the running version back in the blueprint"
    )


# --- batches ----------------------------------------------------------------------------------------------

_BATCH = re.compile(r"^\s*(\d+)\s*(%?)\s*$")


def batch_size(spec: str, nodes: int) -> int:
    """How many nodes restart slurmd together: ``spec`` is a count (4) or a share of the nodes (25%), at least
    one node; InputError when it is neither."""
    match = _BATCH.match(spec)
    if match is None or int(match.group(1)) == 0:
        raise InputError(f"--batch {spec!r}: give a number of nodes (e.g. 4) or a percentage of them (e.g. 25%)")
    value = int(match.group(1))
    if match.group(2):
        if value > 100:
            raise InputError(f"--batch {spec!r}: a percentage is at most 100%")
        return max(1, math.ceil(nodes * value / 100))
    return max(1, min(value, nodes))


# --- the plan ---------------------------------------------------------------------------------------------


def plan_upgrade(live: LiveCluster, bp: Blueprint, batch: str = DEFAULT_BATCH) -> UpgradePlan:
    """The steps that take the running cluster to the blueprint's Slurm; UpgradeRefused when Slurm does not
    support that upgrade or the blueprint describes other hosts."""
    _same_hosts(live, bp)
    target = slurm_release_of(bp)
    nodes = tuple(dict.fromkeys(host for _, host, _ in bp.compute_hosts()))
    size = batch_size(batch, len(nodes))
    plan = UpgradePlan(live.cluster, live.version, target, bp.slurm.install_mode, size, _packages(bp))
    if _already(live.version, target):
        return plan
    try:
        problem = upgrade_problem(live.version, target)
    except ReleaseError as exc:
        problem = str(exc)
    if problem is not None:
        raise UpgradeRefused(f"cannot upgrade {live.cluster} from Slurm {live.version} to {target}: {problem}")
    steps = tuple(_steps(live, bp, plan, nodes))
    return UpgradePlan(live.cluster, live.version, target, plan.install, size, plan.packages, steps)


def _already(current: Version, target: Version) -> bool:
    """The cluster runs the target: the same version, or the same series where the blueprint names no micro
    release (the site's packages choose it)."""
    return current == target or (target.micro is None and current.series == target.series)


def _same_hosts(live: LiveCluster, bp: Blueprint) -> None:
    hosts = {bp.controller.host, *(h.host for h in bp.login), *(host for _, host, _ in bp.compute_hosts())}
    added, removed = sorted(hosts - live.hosts), sorted(live.hosts - hosts)
    if added or removed:
        change = "; ".join(
            f"{what}: {', '.join(names)}" for what, names in (("new", added), ("gone", removed)) if names
        )
        raise UpgradeRefused(
            f"the blueprint's hosts are not {live.cluster}'s deployed ones ({change}); an upgrade changes only "
            "Slurm: deploy the host change with the running version first, then upgrade"
        )


def _steps(live: LiveCluster, bp: Blueprint, plan: UpgradePlan, nodes: tuple[str, ...]) -> list[Step]:
    ctl, target = bp.controller.host, plan.target
    install = f"install Slurm {target}"
    steps = [_backup(live, plan, ctl, bp.slurm.accounting), _timeouts("raise_timeouts", live, ctl, raised=True)]
    if bp.slurm.accounting:
        wait = "converts the database to the new release (it can take minutes; progress shown)"
        what = wait if plan.major else "answers"
        steps.append(Step("slurmdbd", (ctl,), f"{install}; restart slurmdbd; wait until it {what}", "slurmdbd"))
    steps.append(Step("slurmctld", (ctl,), f"{install}; restart slurmctld; wait until it answers", "slurmctld"))
    for first in range(0, len(nodes), plan.batch_size):
        batch = nodes[first : first + plan.batch_size]
        action = f"{install}; restart slurmd (running jobs keep running); wait until the nodes answer at {target}"
        steps.append(Step("slurmd", batch, action, "slurmd"))
    logins = tuple(h.host for h in bp.login)
    steps.append(Step("clients", logins, f"{install}: the client tools (srun, sbatch, squeue, sacct ...)"))
    pyxis = pyxis_hosts(bp)
    if plan.major and pyxis:
        steps.append(Step("spank", pyxis, f"rebuild pyxis {bp.containers.pyxis.version} against Slurm {target}"))
    steps.append(_timeouts("restore_timeouts", live, ctl, raised=False))
    daemons = "slurmdbd, slurmctld, " if bp.slurm.accounting else "slurmctld, "
    check = f"{daemons}every slurmd and the client tools report {target}"
    steps.append(Step("verify", (ctl, *nodes, *logins), check))
    return steps


def _packages(bp: Blueprint) -> str:
    mode = bp.slurm.install_mode
    if mode == "build":
        host = bp.slurm.build.host or bp.controller.host
        return f"built on {host} from SchedMD's source with {', '.join(bp.slurm.build.features)}"
    return "the site's own (slurm.packages)" if mode == "packages" else "the distribution's"


def backup_dir(live: LiveCluster, plan: UpgradePlan) -> str:
    """The controller's folder for this upgrade's backups: one per upgrade, so that a resumed run keeps the
    backups its first run made."""
    return f"{BACKUP_ROOT}/{live.cluster}-{plan.current}-to-{plan.target}"


def raised_timeouts(live: LiveCluster) -> dict[str, int]:
    """The timeouts during the upgrade: at least UPGRADE_TIMEOUT_S, a longer one kept."""
    return {key: max(live.timeouts[key], UPGRADE_TIMEOUT_S) for key in TIMEOUT_KEYS}


def timeouts_apply(live: LiveCluster) -> str:
    """How a timeout change goes live in the running release (the per-release table): reconfigure or
    restart (slurmctld)."""
    live_now = all(apply_for(key, live.version) == "reconfigure" for key in TIMEOUT_KEYS)
    return "reconfigure" if live_now else "restart"


def _backup(live: LiveCluster, plan: UpgradePlan, ctl: str, accounting: bool) -> Step:
    folder = backup_dir(live, plan)
    state = f"StateSaveLocation {live.state_save} -> {folder}/statesave.tar.gz"
    if not accounting:
        return Step("backup", (ctl,), state)
    dump = f"mysqldump --single-transaction {ACCOUNTING_DB} -> {folder}/{ACCOUNTING_DB}.sql"
    return Step("backup", (ctl,), f"{dump}; {state}")


def _timeouts(kind: str, live: LiveCluster, ctl: str, *, raised: bool) -> Step:
    changes = []
    for key, high in raised_timeouts(live).items():
        now = live.timeouts[key]
        changes.append(f"{key} {now} -> {high}" if raised else f"{key} {high} -> {now}")
    how = "scontrol reconfigure" if timeouts_apply(live) == "reconfigure" else "slurmctld restart"
    return Step(kind, (ctl,), f"{', '.join(changes)} in slurm.conf; {how}")


def pyxis_hosts(bp: Blueprint) -> tuple[str, ...]:
    """The hosts with pyxis: the nodes of container partitions and, when there are any, the login nodes (the
    lab installs none: its nodes share this machine's root)."""
    if isinstance(bp.provider, LabProvider):
        return ()
    nodes = [host for part in bp.partitions if bp.containers_on(part) for host in part.hostnames()]
    if not nodes:
        return ()
    return tuple(dict.fromkeys([*nodes, *(h.host for h in bp.login)]))


# --- the record -------------------------------------------------------------------------------------------


def live_cluster(cluster: str) -> LiveCluster:
    """The running cluster as its last good deploy recorded it: RecordError when there is none."""
    where = ClusterDir.of(cluster)
    when = where.destroyed()
    if when is not None:
        raise RecordError(f"cluster {cluster!r} was destroyed{when}; there is nothing to upgrade")
    path, data = where.blueprint()
    try:
        recorded = Blueprint.model_validate(data)
    except ValidationError as exc:
        raise RecordError(f"deployment record {path} is unreadable: {exc}") from None
    seen = running_release(cluster)
    version = seen or slurm_release_of(recorded)
    conf = where.config(recorded.controller.host, "/etc/slurm/slurm.conf") or ""
    hosts = {recorded.controller.host, *(h.host for h in recorded.login)}
    hosts.update(host for _, host, _ in recorded.compute_hosts())
    timeouts = {}
    for key in TIMEOUT_KEYS:
        value = _conf_value(conf, key)
        timeouts[key] = int(value) if value is not None and value.isdigit() else DEFAULT_TIMEOUTS[key]
    state = _conf_value(conf, "StateSaveLocation") or DEFAULT_STATE_SAVE
    return LiveCluster(cluster, version, frozenset(hosts), timeouts, state, version_seen=seen is not None)


def running_release(cluster: str) -> Version | None:
    """The Slurm version the cluster's last good deploy (or upgrade) found running; None when the record does not
    say (no record, or the controller did not answer then)."""
    return _parsed(ClusterDir.of(cluster).slurm_version())


def _parsed(text: str | None) -> Version | None:
    try:
        return Version.parse(text) if text else None
    except ReleaseError:
        return None


def _conf_value(conf: str, key: str) -> str | None:
    """The value of a slurm.conf key (Slurm ignores the key's case); the last line wins, as in Slurm."""
    found = None
    for line in conf.splitlines():
        name, eq, value = line.split("#", 1)[0].strip().partition("=")
        if eq and name.strip().lower() == key.lower():
            found = value.strip()
    return found or None
