"""Slurm's accounts, users and QOS in sacctmgr's terms: the settings hpckit manages, the kind of value each
takes, and that value in one comparable form whether it comes from a blueprint or from `sacctmgr show`
(hpckit/slurm/accounts.py reads the live state; hpckit/deploy/accounts.py compares).

Names from sacctmgr's own parser (src/sacctmgr/common.c, association_functions.c and qos_functions.c of
24.11), which matches a field by a prefix of its long name, for `set` and for `format=` alike.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

Kind = Literal["int", "tres", "duration", "text", "list"]


@dataclass(frozen=True)
class Setting:
    """A setting's kind of value. Its name (the key of the tables below) is the long one sacctmgr takes both
    to set it (`set MaxJobsPerUser=4`) and to show it (`format=MaxJobsPerUser`, printed as MaxJobsPU)."""

    kind: Kind


# Limits both a QOS and an association take (blueprint key = what `sacctmgr modify ... set` takes).
_GROUP_AND_JOB_LIMITS: Mapping[str, Setting] = {
    "GrpTRES": Setting("tres"),
    "GrpJobs": Setting("int"),
    "GrpSubmitJobs": Setting("int"),
    "GrpWall": Setting("duration"),
    "MaxTRESPerJob": Setting("tres"),
    "MaxTRESPerNode": Setting("tres"),
    "MaxWall": Setting("duration"),
}
# Limits a QOS takes.
QOS_LIMITS: Mapping[str, Setting] = {
    **_GROUP_AND_JOB_LIMITS,
    "MaxTRESPerUser": Setting("tres"),
    "MaxTRESPerAccount": Setting("tres"),
    "MaxJobsPerUser": Setting("int"),
    "MaxSubmitJobsPerUser": Setting("int"),
    "MaxJobsPerAccount": Setting("int"),
    "MaxSubmitJobsPerAccount": Setting("int"),
    "MinTRESPerJob": Setting("tres"),
}
# A QOS's other settings.
QOS_FIELDS: Mapping[str, Setting] = {
    "Priority": Setting("int"),
    "Preempt": Setting("list"),
    "PreemptMode": Setting("text"),
    "Flags": Setting("list"),
    "UsageFactor": Setting("text"),
}
# Limits of an association (an account's, or a user's in an account).
ASSOC_LIMITS: Mapping[str, Setting] = {
    **_GROUP_AND_JOB_LIMITS,
    "MaxJobs": Setting("int"),
    "MaxSubmitJobs": Setting("int"),
}
# An association's other settings.
ASSOC_FIELDS: Mapping[str, Setting] = {
    "Fairshare": Setting("text"),  # a number, or "parent"
    "DefaultQOS": Setting("text"),
    "QOS": Setting("list"),
}
# Every setting hpckit manages on a QOS, and on an association.
QOS_SETTINGS: Mapping[str, Setting] = {**QOS_FIELDS, **QOS_LIMITS}
ASSOC_SETTINGS: Mapping[str, Setting] = {**ASSOC_FIELDS, **ASSOC_LIMITS}
QOS_FLAGS = frozenset(
    {
        "DenyOnLimit", "EnforceUsageThreshold", "NoDecay", "NoReserve", "OverPartQOS", "PartitionMaxNodes",
        "PartitionMinNodes", "PartitionTimeLimit", "Relative", "RequiresReservation", "UsageFactorSafe",
    }
)  # fmt: skip
PREEMPT_MODES = frozenset({"cluster", "cancel", "requeue", "suspend", "off", "within", "gang"})
ADMIN_LEVELS = ("none", "operator", "administrator")
# TRES types Slurm knows (a GRES, license or burst buffer by name after the slash).
TRES_TYPES = frozenset({"cpu", "mem", "energy", "node", "billing", "fs/disk", "vmem", "pages"})
TRES_PREFIXES = ("gres/", "license/", "bb/", "fs/", "ic/")
_TRES_ITEM = re.compile(r"^(?P<type>[a-z]+(?:/[A-Za-z0-9_.:-]+)?)=(?P<count>\d+)(?P<unit>[KMGTP]?)$")
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40, "P": 1 << 50}
_DURATION = re.compile(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?")


class AccountsError(ValueError):
    """A value sacctmgr would not take, or an answer hpckit cannot read."""


def tres_problem(text: str, gres: frozenset[str] | None = None) -> str | None:
    """Why `cpu=64,gres/gpu=8` is not a TRES list Slurm tracks; None when it is. `gres`: the GRES names the
    cluster declares (None: not checked)."""
    seen = set()
    for item in text.split(","):
        m = _TRES_ITEM.match(item.strip())
        if m is None:
            return f"{item!r} is not TYPE=COUNT (cpu=64, mem=512G, gres/gpu=8)"
        kind = m.group("type")
        if kind in seen:
            return f"{kind} is given twice"
        seen.add(kind)
        if kind.startswith("gres/") and gres is not None and kind.split("/", 1)[1].split(":")[0] not in gres:
            has = f"it has {', '.join(sorted(gres))}" if gres else "no partition has GPUs"
            return f"{kind}: the cluster declares no such GRES ({has})"
        if kind not in TRES_TYPES and not kind.startswith(TRES_PREFIXES):
            return f"{kind} is not a TRES Slurm knows ({', '.join(sorted(TRES_TYPES))}, gres/NAME, license/NAME)"
        if m.group("unit") and kind != "mem":
            return f"{item}: only mem takes a unit"
    return None


def tres(text: str) -> str:
    """A TRES list in one form: sorted by type, mem in megabytes as sacctmgr prints it."""
    items = {}
    for item in filter(None, (i.strip() for i in text.split(","))):
        m = _TRES_ITEM.match(item)
        if m is None:
            raise AccountsError(f"{item!r} is not TYPE=COUNT")
        count = int(m.group("count")) * _UNITS[m.group("unit")]
        if m.group("type") == "mem" and m.group("unit"):
            count //= _UNITS["M"]
        items[m.group("type")] = count
    return ",".join(f"{k}={v}" for k, v in sorted(items.items()))


def minutes(text: str) -> int:
    """A duration in whole minutes (seconds round up, as Slurm's time_str2mins does), from what sacctmgr
    takes or prints: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS."""
    m = _DURATION.fullmatch(text.strip())
    if m is None:
        raise AccountsError(f"{text!r} is not a duration (minutes, HH:MM:SS or D-HH:MM:SS)")
    days, a, b, c = m.groups()
    if days is not None:
        secs = int(days) * 86400 + int(a) * 3600 + int(b or 0) * 60 + int(c or 0)
    elif c is not None:
        secs = int(a) * 3600 + int(b) * 60 + int(c)
    else:
        secs = int(a) * 60 + int(b or 0)
    return (secs + 59) // 60


def setting_problem(kind: Kind, value: object) -> str | None:
    """Why sacctmgr would refuse `value` for a setting of this kind; None when it takes it."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        return f"{value!r} is neither a number nor text"
    try:
        if kind == "int" and int(str(value)) < -1:
            return f"{value} is below -1 (-1 clears the limit)"
        if kind == "tres":
            return tres_problem(str(value))
        if kind == "duration":
            minutes(str(value))
    except (ValueError, AccountsError) as exc:
        return str(exc) if isinstance(exc, AccountsError) else f"{value!r} is not a whole number"
    return None


def normal(kind: Kind, value: object) -> str:
    """One comparable text for a setting's value, from the blueprint or from sacctmgr (empty: unset)."""
    if value is None or value == "" or value == []:
        return ""
    if kind == "int":
        return str(int(str(value)))
    if kind == "tres":
        return tres(str(value))
    if kind == "duration":
        return str(minutes(str(value)))
    if kind == "list":
        items = value if isinstance(value, list) else str(value).split(",")
        return ",".join(sorted({str(i).strip().lower() for i in items if str(i).strip()}))
    return str(value).strip().lower()


@dataclass(frozen=True)
class LiveQos:
    name: str
    settings: dict[str, str]  # blueprint key -> normal() text, every managed key present


@dataclass(frozen=True)
class LiveAssoc:
    account: str
    user: str  # "" for the account's own association
    parent: str  # the parent account ("" for root's own)
    settings: dict[str, str]


@dataclass
class Live:
    qos: dict[str, LiveQos] = field(default_factory=dict)
    accounts: dict[str, LiveAssoc] = field(default_factory=dict)  # account -> its own association
    users: dict[tuple[str, str], LiveAssoc] = field(default_factory=dict)  # (user, account) -> association
    default_accounts: dict[str, str] = field(default_factory=dict)  # user -> default account
    admin_levels: dict[str, str] = field(default_factory=dict)  # user -> none/operator/administrator
    organizations: dict[str, str] = field(default_factory=dict)  # account -> organization
