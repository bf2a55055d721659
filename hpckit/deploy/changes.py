"""What a config change costs a running cluster: `hpckit plan` labels every change before it is applied.

The labels come from the per-release table (hpckit/slurm_releases.py, hpckit/data/slurm-releases.yaml),
for the cluster's Slurm release: what each slurm.conf key needs to take effect there (a live
`scontrol reconfigure`, a slurmd restart, a slurmctld restart, or nothing hpckit does on a running
cluster). Partition lines are always live; node lines follow the
table's NodeName entry (a restart before 23.11, a reconfigure since, when reconfigure began replacing the
daemon processes). Running jobs survive every class but `unsupported`.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

import hostlist

from hpckit.deploy.events import ConfigDiff
from hpckit.slurm_releases import Apply, AsVersion, apply_for, default_series


class Action(enum.IntEnum):
    """Ordered by disruption: the plan reports the largest one a change set needs."""

    NONE = 0
    RECONFIGURE = 1  # live: scontrol reconfigure
    SLURMD_RESTART = 2  # restart slurmd on the affected nodes
    SLURMCTLD_RESTART = 3  # restart slurmctld (and every slurmd)
    UNSUPPORTED = 4

    @property
    def label(self) -> str:
        return {
            Action.NONE: "no change",
            Action.RECONFIGURE: "live scontrol reconfigure",
            Action.SLURMD_RESTART: "slurmd restart",
            Action.SLURMCTLD_RESTART: "slurmctld restart",
            Action.UNSUPPORTED: "unsupported",
        }[self]


_ACTIONS: dict[Apply, Action] = {
    "reconfigure": Action.RECONFIGURE,
    "slurmd_restart": Action.SLURMD_RESTART,
    "slurmctld_restart": Action.SLURMCTLD_RESTART,
    "unsupported": Action.UNSUPPORTED,
}


def key_action(key: str, version: AsVersion) -> Action:
    """What changing slurm.conf ``key`` costs on Slurm ``version`` (the table)."""
    return _ACTIONS[apply_for(key, version)]


@dataclass(frozen=True)
class Change:
    file: str
    what: str  # e.g. "NodeName=node[5-6] added", "SchedulerParameters changed"
    action: Action


@dataclass(frozen=True)
class SlurmConf:
    params: dict[str, str]  # lower-cased key -> value
    nodes: dict[str, str]  # NodeName value -> the whole line
    partitions: dict[str, str]


_LINE = re.compile(r"^\s*([A-Za-z][A-Za-z0-9]*)\s*=\s*(\S+)(.*)$")  # X11Parameters has a digit


def parse_slurm_conf(text: str) -> SlurmConf:
    params: dict[str, str] = {}
    nodes: dict[str, str] = {}
    parts: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        match = _LINE.match(line)
        if not match:
            continue
        key, value = match.group(1).lower(), match.group(2)
        if key == "nodename":
            nodes[value] = " ".join(line.split())
        elif key == "partitionname":
            parts[value] = " ".join(line.split())
        else:
            params[key] = line.split("=", 1)[1].strip()
    return SlurmConf(params, nodes, parts)


def _keyed(file: str, kind: str, before: dict[str, str], after: dict[str, str], action: Action) -> list[Change]:
    out = [Change(file, f"{kind}={k} added", action) for k in after.keys() - before.keys()]
    out += [Change(file, f"{kind}={k} removed", action) for k in before.keys() - after.keys()]
    out += [Change(file, f"{kind}={k} changed", action) for k in before.keys() & after.keys() if before[k] != after[k]]
    return sorted(out, key=lambda c: c.what)


def per_node(nodes: dict[str, str]) -> dict[str, str]:
    """NodeName lines -> one entry per node (its NodeAddr and other settings), so that node[1-2] growing into
    node[1-4] reads as node[3-4] added, not as one line removed and another added."""
    out: dict[str, str] = {}
    for key, line in nodes.items():
        fields = {k.lower(): v for k, _, v in (t.partition("=") for t in line.split())}  # Slurm's keys ignore case
        addr_list = fields.pop("nodeaddr", "")
        fields.pop("nodename", None)
        settings = " ".join(f"{k}={v}" for k, v in sorted(fields.items()))
        try:
            names = hostlist.expand_hostlist(key)
            addrs = hostlist.expand_hostlist(addr_list)
        except hostlist.BadHostlist:
            out[key] = line  # not a hostlist Slurm would take either; compared as a whole line
            continue
        if len(addrs) != len(names):
            addrs = [addr_list] * len(names)
        for name, addr in zip(names, addrs, strict=True):
            out[name] = f"nodeaddr={addr} {settings}"
    return out


def _node_changes(file: str, before: dict[str, str], after: dict[str, str], action: Action) -> list[Change]:
    old, new = per_node(before), per_node(after)
    groups = {
        "added": sorted(new.keys() - old.keys()),
        "removed": sorted(old.keys() - new.keys()),
        "changed": sorted(n for n in old.keys() & new.keys() if old[n] != new[n]),
    }
    return [Change(file, f"NodeName={_compress(names)} {what}", action) for what, names in groups.items() if names]


def _compress(names: list[str]) -> str:
    try:
        return str(hostlist.collect_hostlist(names))
    except hostlist.BadHostlist:  # a malformed NodeName kept whole
        return ",".join(names)


def slurm_conf_changes(
    before: str, after: str, file: str = "slurm.conf", version: AsVersion | None = None
) -> list[Change]:
    """Every change between two slurm.conf texts, labelled for Slurm ``version`` (default: the distro's)."""
    if not before.strip():
        # A host's first slurm.conf: a new host, whose daemons start from scratch. What the cluster's
        # running daemons must do shows on the hosts that already have one.
        return [Change(file, "created", Action.SLURMD_RESTART)]
    release = version if version is not None else default_series()
    old, new = parse_slurm_conf(before), parse_slurm_conf(after)
    changes = _node_changes(file, old.nodes, new.nodes, key_action("NodeName", release))
    changes += _keyed(file, "PartitionName", old.partitions, new.partitions, key_action("PartitionName", release))
    for key in sorted(old.params.keys() | new.params.keys()):
        if old.params.get(key) != new.params.get(key):
            changes.append(Change(file, f"{key} changed", key_action(key, release)))
    return changes


# Files other than slurm.conf: who reads them, and so what a change costs.
FILE_ACTIONS = {
    "gres.conf": Action.SLURMD_RESTART,
    "cgroup.conf": Action.SLURMD_RESTART,
    "topology.conf": Action.RECONFIGURE,
    "plugstack.conf": Action.SLURMD_RESTART,
    "slurmdbd.conf": Action.SLURMCTLD_RESTART,
}


def file_changes(path: str, before: str, after: str, version: AsVersion | None = None) -> list[Change]:
    """Classify a change to one rendered file (path as on the host) on Slurm ``version``."""
    name = path.rsplit("/", 1)[-1]
    if before == after:
        return []
    if name == "slurm.conf":
        return slurm_conf_changes(before, after, path, version)
    action = FILE_ACTIONS.get(name, Action.NONE)
    return [Change(path, "created" if not before else "changed", action)]


def overall(changes: list[Change]) -> Action:
    return max((c.action for c in changes), default=Action.NONE)


def plan_changes(diffs: list[ConfigDiff], version: AsVersion | None = None) -> list[Change]:
    """Every labelled change in a check+diff run on Slurm ``version`` (default: the distro's); a file
    changed identically on many hosts counts once."""
    seen: set[tuple[str, str, str]] = set()
    out: list[Change] = []
    for diff in diffs:
        key = (diff.path, diff.before, diff.after)
        if key not in seen:
            seen.add(key)
            out += file_changes(diff.path, diff.before, diff.after, version)
    return out
