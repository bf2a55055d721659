"""The live accounts, users and QOS, read with `sacctmgr --noheader --parsable2 show ...` (three commands),
in the comparable form hpckit/slurm_accounts.py gives every setting; and the queue's jobs by account, user
and QOS (which jobs a change affects)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from hpckit.proc import Transport
from hpckit.slurm_accounts import (
    ASSOC_SETTINGS,
    QOS_SETTINGS,
    AccountsError,
    Live,
    LiveAssoc,
    LiveQos,
    Setting,
    normal,
)

QOS_FORMAT = ("Name", *QOS_SETTINGS)
ASSOC_FORMAT = ("Account", "User", "Partition", "ParentName", *ASSOC_SETTINGS)
USER_FORMAT = ("User", "DefaultAccount", "AdminLevel")
SHOW = ("sacctmgr", "--noheader", "--parsable2", "show")


def show_commands(cluster: str) -> dict[str, tuple[str, ...]]:
    """The three reads, by what they return."""
    return {
        "qos": (*SHOW, "qos", "format=" + ",".join(QOS_FORMAT)),
        "assoc": (*SHOW, "assoc", "where", f"cluster={cluster}", "format=" + ",".join(ASSOC_FORMAT)),
        "user": (*SHOW, "user", "format=" + ",".join(USER_FORMAT)),
    }


def read_live(transport: Transport, cluster: str) -> Live:
    """The live state, through sacctmgr on the host `transport` reaches (the controller, or the login node)."""
    texts = {}
    for name, argv in show_commands(cluster).items():
        done = transport.run(list(argv), timeout=60)
        if not done.ok:
            raise AccountsError(f"`{' '.join(argv[:5])} ...` on {done.where}: {done.describe()}")
        texts[name] = done.stdout
    return parse_live(texts["qos"], texts["assoc"], texts["user"])


def parse_live(qos: str, assoc: str, user: str) -> Live:
    live = Live()
    for row in _rows(qos, QOS_FORMAT, "show qos"):
        live.qos[row["Name"]] = LiveQos(row["Name"], _settings(row, QOS_SETTINGS))
    for row in _rows(assoc, ASSOC_FORMAT, "show assoc"):
        if row["Partition"]:
            continue  # per-partition associations are not hpckit's
        found = LiveAssoc(row["Account"], row["User"], row["ParentName"], _settings(row, ASSOC_SETTINGS))
        if row["User"]:
            live.users[(row["User"], row["Account"])] = found
        else:
            live.accounts[row["Account"]] = found
    for row in _rows(user, USER_FORMAT, "show user"):
        live.default_accounts[row["User"]] = row["DefaultAccount"]
        live.admin_levels[row["User"]] = row["AdminLevel"].lower()
    return live


def _rows(text: str, fields: Sequence[str], what: str) -> list[dict[str, str]]:
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        values = line.split("|")
        if len(values) != len(fields):
            raise AccountsError(f"sacctmgr {what}, line {number}: {len(values)} fields, {len(fields)} asked: {line!r}")
        rows.append(dict(zip(fields, values, strict=True)))
    return rows


def _settings(row: dict[str, str], table: Mapping[str, Setting]) -> dict[str, str]:
    try:
        return {key: normal(setting.kind, row[key]) for key, setting in table.items()}
    except (AccountsError, ValueError) as exc:
        raise AccountsError(f"sacctmgr printed a value hpckit cannot read: {exc}: {row}") from None


@dataclass(frozen=True)
class QueuedJob:
    """A job in the queue as an accounts change sees it: whose it is and under which QOS."""

    job_id: str
    account: str
    user: str
    qos: str
    state: str

    def describe(self) -> str:
        return f"{self.job_id} ({self.user}, {self.state.lower()})"


# Every job that holds or waits for resources, whatever partition hides it (--all).
QUEUE = ("squeue", "--noheader", "--all", "--states=R,PD,CG,S,CF", "--format=%i|%a|%u|%q|%T")


def read_queue(transport: Transport) -> list[QueuedJob]:
    done = transport.run(list(QUEUE), timeout=60)
    if not done.ok:
        raise AccountsError(f"cannot tell which jobs the accounts changes affect: {done.describe()}")
    return parse_queue(done.stdout)


def parse_queue(text: str) -> list[QueuedJob]:
    jobs = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        fields = line.strip().split("|")
        if len(fields) != 5:
            raise AccountsError(f"squeue, line {number}: {len(fields)} fields, 5 asked: {line!r}")
        jobs.append(QueuedJob(*fields))
    return jobs
