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
from dataclasses import dataclass

import hostlist

from hpckit.deploy.events import ConfigDiff
from hpckit.slurm.conf import ENTITIES, ConfLine, SlurmConfError, expand_names, parse_slurm_conf
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
class SlurmConfView:
    """What a change is counted in: settings, and the node and partition lines by name."""

    params: dict[str, str]  # lower-cased key -> value
    nodes: dict[str, ConfLine]  # NodeName value -> its line
    partitions: dict[str, str]  # PartitionName value -> the whole line


def conf_view(text: str) -> SlurmConfView:
    """slurm.conf (hpckit.slurm.conf) as the plan compares it: a line with no readable pair is passed over,
    and an entity line other than a node's or a partition's, or one not read to its end, counts whole."""
    params: dict[str, str] = {}
    nodes: dict[str, ConfLine] = {}
    parts: dict[str, str] = {}
    for line in parse_slurm_conf(text).lines:
        if not line.pairs:
            continue
        if line.head == "nodename":
            nodes[line.value] = line
        elif line.head == "partitionname":
            parts[line.value] = line.text
        elif line.head in ENTITIES or line.error:
            params[line.head] = line.rest
        else:
            params.update(line.pairs)
    return SlurmConfView(params, nodes, parts)


def _keyed(file: str, kind: str, before: dict[str, str], after: dict[str, str], action: Action) -> list[Change]:
    out = [Change(file, f"{kind}={k} added", action) for k in after.keys() - before.keys()]
    out += [Change(file, f"{kind}={k} removed", action) for k in before.keys() - after.keys()]
    out += [Change(file, f"{kind}={k} changed", action) for k in before.keys() & after.keys() if before[k] != after[k]]
    return sorted(out, key=lambda c: c.what)


def per_node(nodes: dict[str, ConfLine]) -> dict[str, str]:
    """NodeName lines -> one entry per node (its NodeAddr and other settings), so that node[1-2] growing into
    node[1-4] reads as node[3-4] added, not as one line removed and another added."""
    out: dict[str, str] = {}
    for key, line in nodes.items():
        fields = dict(line.pairs)  # keys lower-cased: Slurm's keys ignore case
        addr_list = fields.pop("nodeaddr", "")
        fields.pop("nodename", None)
        settings = " ".join(f"{k}={v}" for k, v in sorted(fields.items()))
        try:
            names = expand_names(key)
            addrs = expand_names(addr_list)
        except SlurmConfError:
            out[key] = line.text  # not a hostlist Slurm would take either; compared as a whole line
            continue
        if len(addrs) != len(names):
            addrs = [addr_list] * len(names)
        for name, addr in zip(names, addrs, strict=True):
            out[name] = f"nodeaddr={addr} {settings}"
    return out


def _node_changes(file: str, before: dict[str, ConfLine], after: dict[str, ConfLine], action: Action) -> list[Change]:
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
    old, new = conf_view(before), conf_view(after)
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
