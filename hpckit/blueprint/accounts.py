"""`accounting:`'s rules across objects: every parent, account and QOS named exists, the account tree has
no cycle, a user's default account is one of its accounts, a default QOS is one the association may use,
and every TRES names something the cluster tracks. Read from the raw blueprint, like every cross-check, so
that each problem is reported with its line even when another field failed; the model checks each value.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from hpckit.blueprint.errors import Path_
from hpckit.slurm_accounts import ASSOC_LIMITS, QOS_LIMITS, Setting, tres_problem

Problems = Iterator[tuple[Path_, str]]
ROOT = "root"  # the account every tree hangs from, which Slurm makes itself


def _mapping(value: Any) -> dict[str, Any]:
    return {str(k): v for k, v in value.items()} if isinstance(value, dict) else {}


def _names(value: Any) -> list[tuple[int, str]]:
    return [(i, v) for i, v in enumerate(value) if isinstance(v, str)] if isinstance(value, list) else []


def accounts_problems(data: Any, gres: frozenset[str]) -> list[tuple[Path_, str]]:
    """Every cross-object problem of the raw blueprint's `accounting:` (gres: the GRES the cluster declares)."""
    spec = data.get("accounting") if isinstance(data, dict) else None
    if not isinstance(spec, dict):
        return []
    slurm = _mapping(data.get("slurm"))
    found: list[tuple[Path_, str]] = []
    if slurm.get("accounting") is False:
        found.append((("accounting",), "accounts, users and QOS live in slurmdbd: set slurm.accounting: true"))
    qos, accounts, users = (_mapping(spec.get(k)) for k in ("qos", "accounts", "users"))
    known = {*qos, "normal"}  # Slurm's own default QOS, there on every cluster: named without being declared
    found += _qos(qos, known, gres)
    found += _accounts(accounts, known, gres)
    found += _users(users, set(accounts), known, gres)
    return found


def _qos(qos: dict[str, Any], known: set[str], gres: frozenset[str]) -> Problems:
    for name, body in qos.items():
        path: Path_ = ("accounting", "qos", name)
        item = _mapping(body)
        for i, other in _names(item.get("preempt")):
            if other == name:
                yield (*path, "preempt", i), f"QOS {name!r} cannot preempt itself"
            elif other not in known:
                yield (*path, "preempt", i), f"QOS {other!r} is not declared under accounting.qos"
        yield from _tres(path, item, QOS_LIMITS, gres)


def _accounts(accounts: dict[str, Any], qos: set[str], gres: frozenset[str]) -> Problems:
    for name, body in accounts.items():
        path: Path_ = ("accounting", "accounts", name)
        item = _mapping(body)
        parent = item.get("parent")
        if name == ROOT:
            yield path, "'root' is Slurm's own top account: declare the accounts under it"
        if isinstance(parent, str) and parent != ROOT and parent not in accounts:
            yield (*path, "parent"), f"account {parent!r} is not declared under accounting.accounts"
        yield from _qos_refs(path, item, qos)
        yield from _tres(path, item, ASSOC_LIMITS, gres)
    yield from _cycles(accounts)


def _cycles(accounts: dict[str, Any]) -> Problems:
    """Each account on a loop of parents, reported once, at the account where the walk came back."""
    reported: set[str] = set()
    for start in accounts:
        chain: list[str] = []
        node: Any = start
        while isinstance(node, str) and node in accounts and node not in chain:
            chain.append(node)
            node = _mapping(accounts[node]).get("parent")
        if isinstance(node, str) and node in chain and node not in reported:
            loop = chain[chain.index(node) :]
            reported.update(loop)
            where: Path_ = ("accounting", "accounts", node, "parent")
            yield where, f"the accounts' parents go round in a loop: {' -> '.join([*loop, node])}"


def _users(users: dict[str, Any], accounts: set[str], qos: set[str], gres: frozenset[str]) -> Problems:
    for name, body in users.items():
        path: Path_ = ("accounting", "users", name)
        item = _mapping(body)
        default = item.get("default_account")
        listed = _names(item.get("accounts"))
        for i, account in listed:
            if account not in accounts:
                yield (*path, "accounts", i), f"account {account!r} is not declared under accounting.accounts"
        if isinstance(default, str):
            if default not in accounts:
                yield (*path, "default_account"), f"account {default!r} is not declared under accounting.accounts"
            elif listed and default not in [a for _, a in listed]:
                yield (*path, "default_account"), f"{default!r} is not one of the user's accounts"
        yield from _qos_refs(path, item, qos)
        yield from _tres(path, item, ASSOC_LIMITS, gres)


def _qos_refs(path: Path_, item: dict[str, Any], qos: set[str]) -> Problems:
    allowed = _names(item.get("qos"))
    for i, name in allowed:
        if name not in qos:
            yield (*path, "qos", i), f"QOS {name!r} is not declared under accounting.qos"
    default = item.get("default_qos")
    if isinstance(default, str):
        if default not in qos:
            yield (*path, "default_qos"), f"QOS {default!r} is not declared under accounting.qos"
        elif allowed and default not in [q for _, q in allowed]:
            yield (*path, "default_qos"), f"{default!r} is not in its qos list (Slurm refuses such a default)"


def _tres(path: Path_, item: dict[str, Any], table: Mapping[str, Setting], gres: frozenset[str]) -> Problems:
    """TRES limits that name a GRES the cluster lacks (the model checks their syntax)."""
    for key, value in _mapping(item.get("limits")).items():
        setting = table.get(key)
        if setting is None or setting.kind != "tres" or not isinstance(value, str):
            continue
        problem = tres_problem(value, gres)
        if problem and "GRES" in problem:
            yield (*path, "limits", key), problem
