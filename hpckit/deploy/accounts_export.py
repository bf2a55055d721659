"""Slurm's live accounts, users and QOS written as a blueprint's `accounting:` section, so that a cluster whose
accounts were made by hand can adopt hpckit: deploying what this writes changes nothing (pure: live in, data
out; the round trip is what the tests hold it to).

A setting at Slurm's default is left out, as is a QOS list or default QOS an association inherits from its
parent (left out, hpckit does not manage it). What the blueprint cannot say is reported, never guessed: a
user whose associations in several accounts carry different limits gets its default account's, and the
others are named; an association in the root account is not an account the blueprint can declare.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from hpckit.slurm_accounts import ASSOC_LIMITS, QOS_FLAGS, QOS_LIMITS, Live, LiveAssoc, Setting

_FLAGS = {flag.lower(): flag for flag in QOS_FLAGS}  # sacctmgr's spelling is compared lower-cased
_INHERITED = ("QOS", "DefaultQOS")


@dataclass(frozen=True)
class Exported:
    accounting: dict[str, object]  # the `accounting:` section
    notes: tuple[str, ...]  # what it could not say exactly


def export_accounting(live: Live) -> Exported:
    notes: list[str] = []
    qos = {name: _qos(q.settings) for name, q in live.qos.items() if name != "normal" or _qos(q.settings)}
    accounts = {}
    for name, assoc in live.accounts.items():
        if name == "root":
            continue  # Slurm's own, the top of every tree
        parent = live.accounts.get(assoc.parent)
        item = {"parent": assoc.parent} if assoc.parent and assoc.parent != "root" else {}
        accounts[name] = {**item, **_assoc(assoc, parent)}
    users = {}
    for user in sorted({u for u, _ in live.users}):
        exported = _user(user, live, notes)
        if exported is not None:
            users[user] = exported
    return Exported({"qos": qos, "accounts": accounts, "users": users}, tuple(notes))


def _qos(settings: Mapping[str, str]) -> dict[str, object]:
    out: dict[str, object] = {}
    if settings.get("Priority") not in ("", "0"):
        out["priority"] = int(settings["Priority"])
    if settings.get("Preempt"):
        out["preempt"] = settings["Preempt"].split(",")
    if settings.get("PreemptMode") not in ("", "cluster"):
        out["preempt_mode"] = settings["PreemptMode"]
    if settings.get("Flags"):
        out["flags"] = [_FLAGS.get(f, f) for f in settings["Flags"].split(",")]
    if settings.get("UsageFactor") and float(settings["UsageFactor"]) != 1:
        out["usage_factor"] = float(settings["UsageFactor"])
    limits = _limits(settings, QOS_LIMITS)
    return {**out, "limits": limits} if limits else out


def _assoc(assoc: LiveAssoc, parent: LiveAssoc | None) -> dict[str, object]:
    s = assoc.settings
    out: dict[str, object] = {}
    if s.get("Fairshare") not in ("", "1"):
        out["fairshare"] = s["Fairshare"] if s["Fairshare"] == "parent" else int(s["Fairshare"])
    inherited = parent.settings if parent is not None else {}
    if s.get("DefaultQOS") and s["DefaultQOS"] != inherited.get("DefaultQOS"):
        out["default_qos"] = s["DefaultQOS"]
    if s.get("QOS") and s["QOS"] != inherited.get("QOS"):
        out["qos"] = s["QOS"].split(",")
    limits = _limits(s, ASSOC_LIMITS)
    return {**out, "limits": limits} if limits else out


def _limits(settings: Mapping[str, str], table: Mapping[str, Setting]) -> dict[str, object]:
    out: dict[str, object] = {}
    for key, setting in table.items():
        value = settings.get(key, "")
        if value:
            out[key] = (
                int(value) if setting.kind == "int" else _duration(value) if setting.kind == "duration" else value
            )
    return out


def _duration(minutes: str) -> str:
    days, rest = divmod(int(minutes), 24 * 60)
    return f"{days}-{rest // 60:02d}:{rest % 60:02d}:00" if days else f"{rest // 60:02d}:{rest % 60:02d}:00"


def _user(user: str, live: Live, notes: list[str]) -> dict[str, object] | None:
    accounts = [a for u, a in live.users if u == user]
    if "root" in accounts:
        if accounts != ["root"] or user != "root":
            notes.append(f"user {user}: its association in the root account is left out (root is Slurm's own)")
        accounts.remove("root")
    if not accounts:
        return None
    default = live.default_accounts.get(user, "")
    if default not in accounts:
        notes.append(f"user {user}: default account {default or '(none)'} has no association: {accounts[0]} is used")
        default = accounts[0]
    ordered = [default, *(a for a in accounts if a != default)]
    own = {a: _assoc(live.users[(user, a)], live.accounts.get(a)) for a in ordered}
    for account in ordered[1:]:
        if own[account] != own[default]:
            notes.append(
                f"user {user}: its association in {account} differs from the one in {default} ({own[account]} "
                f"against {own[default]}); the blueprint gives a user one set, {default}'s is written"
            )
    out: dict[str, object] = {"default_account": default}
    if len(ordered) > 1:
        out["accounts"] = ordered
    if live.admin_levels.get(user, "none") != "none":
        out["admin"] = live.admin_levels[user]
    return {**out, **own[default]}
