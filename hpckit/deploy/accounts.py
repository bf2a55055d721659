"""The blueprint's accounts, users and QOS against Slurm's live ones: the sacctmgr changes that make them
match, in the order Slurm accepts them (pure: live state in, commands out).

Order: QOS first (accounts and users name them), accounts parents first, users; then what goes away:
users' associations, accounts children first, QOS last (nothing names them any more). Every setting hpckit
manages is owned for what the blueprint declares: a limit the blueprint leaves out is cleared (-1).
Objects that live but are not declared are deleted only when the blueprint owns the whole tree
(`accounting.owns_tree`); otherwise they are reported and left alone. Slurm's own (the normal QOS, the
root account and root's association in it) are never removed.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from hpckit.blueprint.models import Account, AccountingSpec, AccountUser, Qos
from hpckit.errors import HpckitError
from hpckit.proc import Transport
from hpckit.slurm.accounts import QueuedJob, read_live, read_queue
from hpckit.slurm_accounts import ASSOC_LIMITS, ASSOC_SETTINGS, QOS_LIMITS, QOS_SETTINGS, Live, LiveQos, Setting, normal

Action = Literal["add", "modify", "delete"]
Kind = Literal["qos", "account", "user"]
SACCTMGR = ("sacctmgr", "--immediate")


@dataclass(frozen=True)
class Change:
    action: Action
    kind: Kind
    name: str
    account: str = ""  # a user's association: the account it is in
    settings: tuple[tuple[str, str, str], ...] = ()  # (key, live value, wanted value), as compared
    argv: tuple[str, ...] = ()
    tightens: bool = False  # a deletion or a stricter limit: running and pending jobs may be affected

    def describe(self) -> str:
        what = f"{self.kind} {self.name}" + (f" in account {self.account}" if self.account else "")
        shown = ", ".join(f"{k}: {old or '-'} -> {new or '-'}" for k, old, new in self.settings)
        return f"{self.action} {what}" + (f" ({shown})" if shown else "")


@dataclass(frozen=True)
class Diff:
    changes: tuple[Change, ...]
    unmanaged: tuple[str, ...]  # live objects the blueprint does not declare, left alone

    @property
    def empty(self) -> bool:
        return not self.changes


def wanted_qos(q: Qos) -> dict[str, str]:
    values: dict[str, object] = {
        "Priority": q.priority or 0,
        "Preempt": q.preempt,
        "PreemptMode": q.preempt_mode or "cluster",
        "Flags": q.flags,
        "UsageFactor": f"{q.usage_factor if q.usage_factor is not None else 1:.6f}",
    }
    return _settings(QOS_SETTINGS, {**values, **q.limits})


def wanted_assoc(item: Account | AccountUser) -> dict[str, str]:
    """Limits and shares are owned (left out: cleared, or 1 share); the QOS lists only where declared, since
    Slurm gives every association its cluster's default QOS and taking it away would stop its jobs."""
    values: dict[str, object] = {"Fairshare": item.fairshare if item.fairshare is not None else 1}
    owned = dict(ASSOC_SETTINGS)
    if item.qos:
        values["QOS"] = item.qos
    else:
        owned.pop("QOS")
    if item.default_qos:
        values["DefaultQOS"] = item.default_qos
    else:
        owned.pop("DefaultQOS")
    return _settings(owned, {**values, **item.limits})


def _settings(table: Mapping[str, Setting], values: Mapping[str, object]) -> dict[str, str]:
    return {key: normal(setting.kind, values.get(key)) for key, setting in table.items()}


def diff(spec: AccountingSpec, live: Live, cluster: str) -> Diff:
    """What to run, in order, so that the live accounts, users and QOS are the blueprint's."""
    adds = _qos_changes(spec, live) + _account_changes(spec, live, cluster) + _user_changes(spec, live, cluster)
    gone, unmanaged = _deletions(spec, live, cluster)
    if spec.owns_tree:  # what is not declared goes: none of it is left alone
        return Diff(tuple(adds + gone), ())
    return Diff(tuple(adds), tuple(unmanaged))


def _qos_changes(spec: AccountingSpec, live: Live) -> list[Change]:
    """Adds and modifies; a new QOS's Preempt list is set once every QOS is there (sacctmgr refuses to
    name a QOS that does not exist yet, and QOS may preempt each other in any order)."""
    out: list[Change] = []
    preempts: list[Change] = []
    for name, q in spec.qos.items():
        want = wanted_qos(q)
        have = live.qos.get(name)
        if have is None:
            first = {k: v for k, v in want.items() if k != "Preempt"}
            argv = (*SACCTMGR, "add", "qos", name, *_assign(first, adding=True))
            out.append(Change("add", "qos", name, settings=_delta({}, first), argv=argv))
            have = LiveQos(name, {**first, "Preempt": ""})
        delta = _delta(have.settings, want)
        if delta:
            sets = _assign(dict(_new(delta)), adding=False)
            argv = (*SACCTMGR, "modify", "qos", "where", f"name={name}", "set", *sets)
            change = Change("modify", "qos", name, settings=delta, argv=argv, tightens=_tighter(delta))
            (preempts if name not in live.qos else out).append(change)
    return out + preempts


def _account_changes(spec: AccountingSpec, live: Live, cluster: str) -> list[Change]:
    out = []
    for name in parents_first(spec.accounts):
        a = spec.accounts[name]
        want = wanted_assoc(a)
        parent = a.parent or "root"
        have = live.accounts.get(name)
        where = ("where", f"name={name}", f"cluster={cluster}")
        if have is None:
            extra = [f"Parent={parent}", f"Cluster={cluster}", f"Organization={a.organization or name}"]
            extra += [f"Description={a.description or name}"]
            argv = (*SACCTMGR, "add", "account", name, *extra, *_assign(want, adding=True))
            out.append(Change("add", "account", name, settings=_delta({}, want), argv=argv))
            continue
        delta = _delta(have.settings, want)
        if have.parent != parent:
            delta = (("Parent", have.parent, parent), *delta)
        if delta:
            sets = _assign(dict(_new(delta)), adding=False)
            argv = (*SACCTMGR, "modify", "account", *where, "set", *sets)
            out.append(Change("modify", "account", name, settings=delta, argv=argv, tightens=_tighter(delta)))
    return out


def _user_changes(spec: AccountingSpec, live: Live, cluster: str) -> list[Change]:
    out = []
    for name, u in spec.users.items():
        want = wanted_assoc(u)
        # the default account first: a new user is made with it, and its other associations follow
        for account in dict.fromkeys([u.default_account, *u.all_accounts]):
            have = live.users.get((name, account))
            if have is None:
                sets = [f"Account={account}", f"Cluster={cluster}"]
                if name not in live.default_accounts and account == u.default_account:  # a new user
                    sets += [f"DefaultAccount={u.default_account}", f"AdminLevel={u.admin}"]
                argv = (*SACCTMGR, "add", "user", name, *sets, *_assign(want, adding=True))
                out.append(Change("add", "user", name, account, _delta({}, want), argv))
                continue
            delta = _delta(have.settings, want)
            if delta:
                where = ("where", f"name={name}", f"account={account}", f"cluster={cluster}")
                argv = (*SACCTMGR, "modify", "user", *where, "set", *_assign(dict(_new(delta)), adding=False))
                out.append(Change("modify", "user", name, account, delta, argv, _tighter(delta)))
        out += _user_record(name, u, live)
    return out


def _user_record(name: str, u: AccountUser, live: Live) -> list[Change]:
    """The user's own record (not an association): its default account and admin level."""
    delta = []
    if name in live.default_accounts and live.default_accounts[name] != u.default_account:
        delta.append(("DefaultAccount", live.default_accounts[name], u.default_account))
    if name in live.admin_levels and live.admin_levels[name] != u.admin:
        delta.append(("AdminLevel", live.admin_levels[name], u.admin))
    if not delta:
        return []
    argv = (*SACCTMGR, "modify", "user", "where", f"name={name}", "set", *(f"{k}={v}" for k, _, v in delta))
    return [Change("modify", "user", name, "", tuple(delta), argv)]


def _deletions(spec: AccountingSpec, live: Live, cluster: str) -> tuple[list[Change], list[str]]:
    """Live objects the blueprint does not declare: users' associations, accounts children first, QOS."""
    out: list[Change] = []
    for (user, account), _ in sorted(live.users.items()):
        declared = spec.users.get(user)
        if (user, account) == ("root", "root"):
            continue  # Slurm's own, made with the cluster: what lets root run jobs and use sacctmgr
        if declared is None or account not in declared.all_accounts:
            where = ("where", f"name={user}", f"account={account}", f"cluster={cluster}")
            out.append(
                Change("delete", "user", user, account, argv=(*SACCTMGR, "delete", "user", *where), tightens=True)
            )
    live_tree = {name: a.parent for name, a in live.accounts.items() if name != "root"}
    for name in reversed(parents_first(live_tree)):
        if name not in spec.accounts:
            argv: tuple[str, ...] = (*SACCTMGR, "delete", "account", "where", f"name={name}", f"cluster={cluster}")
            out.append(Change("delete", "account", name, argv=argv, tightens=True))
    for name in sorted(live.qos):
        if name not in spec.qos and name != "normal":  # Slurm's own default QOS stays
            argv = (*SACCTMGR, "delete", "qos", "where", f"name={name}")
            out.append(Change("delete", "qos", name, argv=argv, tightens=True))
    return out, [c.describe().removeprefix("delete ") for c in out]


def parents_first(tree: Mapping[str, object]) -> list[str]:
    """Account names, each after its parent (names outside the mapping count as roots); the blueprint's
    order among siblings. A loop (refused by validation) ends the walk instead of recursing forever."""
    order: list[str] = []

    def visit(name: str, path: tuple[str, ...]) -> None:
        if name in order or name in path:
            return
        item = tree[name]
        parent = item if isinstance(item, str) else getattr(item, "parent", None)
        if isinstance(parent, str) and parent in tree:
            visit(parent, (*path, name))
        if name not in order:
            order.append(name)

    for name in tree:
        visit(name, ())
    return order


def _delta(have: Mapping[str, str], want: Mapping[str, str]) -> tuple[tuple[str, str, str], ...]:
    return tuple((key, have.get(key, ""), value) for key, value in want.items() if have.get(key, "") != value)


def _new(delta: Iterable[tuple[str, str, str]]) -> Iterable[tuple[str, str]]:
    return ((key, new) for key, _, new in delta)


def _assign(values: Mapping[str, str], *, adding: bool) -> list[str]:
    """KEY=VALUE words for sacctmgr; on a modify, an emptied setting is cleared (-1, or '' for lists)."""
    words = []
    for key, value in values.items():
        if adding and value == "":
            continue  # an add leaves unset what the blueprint does not set
        cleared = "" if key in ("QOS", "Preempt", "Flags", "DefaultQOS") else "-1"
        words.append(f"{key}={value if value != '' else cleared}")
    return words


def _tighter(delta: Iterable[tuple[str, str, str]]) -> bool:
    """Whether a change may hold or stop jobs: a limit set where there was none, or lowered."""
    for key, old, new in delta:
        if key not in {**QOS_LIMITS, **ASSOC_LIMITS} or new == "":
            continue
        if old == "" or _smaller(new, old):
            return True
    return False


def _smaller(new: str, old: str) -> bool:
    if new.isdigit() and old.isdigit():
        return int(new) < int(old)
    olds = dict(item.split("=", 1) for item in old.split(",") if "=" in item)
    news = dict(item.split("=", 1) for item in new.split(",") if "=" in item)
    return any(k not in olds or int(v) < int(olds[k]) for k, v in news.items() if v.isdigit())


def affected_jobs(change: Change, jobs: Iterable[QueuedJob], tree: Mapping[str, str]) -> tuple[QueuedJob, ...]:
    """The running and pending jobs a deletion or a stricter limit reaches: a QOS's jobs; an account's and its
    sub-accounts' (`tree`: account -> parent); a user's in that account. None for other changes."""
    if not change.tightens:
        return ()
    if change.kind == "qos":
        return tuple(j for j in jobs if j.qos == change.name)
    if change.kind == "user":
        return tuple(j for j in jobs if j.user == change.name and change.account in ("", j.account))
    return tuple(j for j in jobs if _under(j.account, change.name, tree))


def _under(account: str, top: str, tree: Mapping[str, str]) -> bool:
    seen = set()
    while account and account not in seen:
        if account == top:
            return True
        seen.add(account)
        account = tree.get(account, "")
    return False


@dataclass(frozen=True)
class Planned:
    """The changes, what is left alone, and for each change that may hold or stop jobs the jobs it reaches."""

    changes: tuple[Change, ...]
    unmanaged: tuple[str, ...]
    jobs: Mapping[Change, tuple[QueuedJob, ...]]


def plan_accounts(spec: AccountingSpec, cluster: str, controller: Transport) -> Planned:
    """What `hpckit deploy` would run, read from the cluster (sacctmgr, and squeue when a change tightens)."""
    live = read_live(controller, cluster)
    found = diff(spec, live, cluster)
    tightening = [c for c in found.changes if c.tightens]
    queue = read_queue(controller) if tightening else []
    tree = {name: a.parent for name, a in live.accounts.items()}
    tree.update({name: a.parent or "root" for name, a in spec.accounts.items() if name not in tree})
    jobs = {c: hit for c in tightening if (hit := affected_jobs(c, queue, tree))}
    return Planned(found.changes, found.unmanaged, jobs)


class AccountsRefused(HpckitError):
    """The accounts were left as they are: a change would hurt jobs, or names a user the hosts do not know."""

    exit_code = 2


@dataclass(frozen=True)
class Applied:
    changes: tuple[Change, ...]
    unmanaged: tuple[str, ...]
    cancelled: tuple[str, ...] = ()  # job ids cancelled first, as told (cancel_jobs)


def apply_accounts(
    spec: AccountingSpec, cluster: str, controller: Transport, login: Transport, *, cancel_jobs: bool = False
) -> Applied:
    """Make slurmdbd's accounts, users and QOS the blueprint's; refused before any change when a user to
    add is not the same Unix user on the login node and the controller (its jobs would bounce) or a deletion
    would take an account, a user's association or a QOS from jobs that run or wait, unless `cancel_jobs` says
    to cancel those jobs first (sacctmgr itself refuses to delete an association with active jobs). Read back
    after: what did not take is an error."""
    planned = plan_accounts(spec, cluster, controller)
    doomed = refuse_harm(planned, controller, login, cancel_jobs=cancel_jobs)
    cancelled = sorted({j.job_id for jobs in doomed.values() for j in jobs})
    if cancelled:
        _cancel(cancelled, controller)
    for change in planned.changes:
        done = controller.run(list(change.argv), timeout=60)
        if not done.ok:
            raise HpckitError(f"accounting: {change.describe()}: {done.describe()}")
    again = diff(spec, read_live(controller, cluster), cluster)
    if again.changes:
        raise HpckitError(f"accounting: sacctmgr did not take: {'; '.join(c.describe() for c in again.changes)}")
    return Applied(planned.changes, planned.unmanaged, tuple(cancelled))


def refuse_harm(
    planned: Planned, controller: Transport, login: Transport, *, cancel_jobs: bool
) -> dict[Change, tuple[QueuedJob, ...]]:
    """AccountsRefused when ``planned`` adds a user the hosts do not know, or deletes what running or waiting
    jobs hold (unless ``cancel_jobs``); else the deletions that reach jobs, with those jobs."""
    _refuse_unknown_users(planned.changes, controller, login)
    doomed = {c: jobs for c, jobs in planned.jobs.items() if c.action == "delete"}
    if doomed and not cancel_jobs:
        hit = [f"{c.describe()} (jobs {_ids(jobs)})" for c, jobs in doomed.items()]
        raise AccountsRefused(
            "accounting: deletions refused while jobs run or wait: " + "; ".join(hit) + " (deploy "
            "--cancel-affected-jobs cancels them first)"
        )
    return doomed


def _ids(jobs: Sequence[QueuedJob]) -> str:
    return ", ".join(j.job_id for j in jobs[:5]) + (" ..." if len(jobs) > 5 else "")


def _refuse_unknown_users(changes: Sequence[Change], controller: Transport, login: Transport) -> None:
    """A user to add must be the same Unix user on the login node, where its jobs are submitted, and on the
    controller, where slurmctld turns the association's name into a uid: else its jobs bounce."""
    new_users = sorted({c.name for c in changes if c.kind == "user" and c.action == "add"})
    if not new_users:
        return
    uids = {t.where: _uids(t, new_users) for t in (login, controller)}
    problems = []
    for user in new_users:
        missing = [host for host, found in uids.items() if user not in found]
        if missing:
            problems.append(f"no Unix account {user} on {', '.join(missing)}")
        elif len({found[user] for found in uids.values()}) > 1:
            problems.append(f"{user} is uid " + " and ".join(f"{found[user]} on {h}" for h, found in uids.items()))
    if problems:
        raise AccountsRefused(
            f"accounting: {'; '.join(problems)}: an association made before the user exists, or for another "
            "uid, sends every job of that user back; create the users first"
        )


def _uids(transport: Transport, users: Sequence[str]) -> dict[str, str]:
    """user -> uid as the host resolves it (getent exits 2 when some are unknown: those are left out)."""
    done = transport.run(["getent", "passwd", *users], timeout=30)
    if done.rc not in (0, 2):
        raise HpckitError(f"accounting: cannot look the users up: {done.describe()}")
    fields = (line.split(":") for line in done.stdout.splitlines())
    return {f[0]: f[2] for f in fields if len(f) >= 3}


def _cancel(job_ids: Sequence[str], controller: Transport, wait_s: float = 120) -> None:
    """scancel, then wait until the jobs left the queue (sacctmgr refuses while they are still completing)."""
    controller.run(["scancel", *job_ids], timeout=60).check()
    deadline = time.monotonic() + wait_s
    while True:
        left = controller.run(["squeue", "--noheader", "--format=%i", "--jobs", ",".join(job_ids)], timeout=60)
        if not left.stdout.strip():  # squeue exits 1 once every job id it was given is gone
            return
        if time.monotonic() > deadline:
            raise HpckitError(f"accounting: jobs {left.stdout.split()} still in the queue {wait_s:.0f} s after scancel")
        time.sleep(2)
