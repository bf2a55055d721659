"""Ansible runner events -> per-host tallies, failures and config diffs. Pure: no Ansible imports."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

COUNTED = ("ok", "changed", "failed", "unreachable", "skipped")
_SERVICE_MODULES = {"service", "systemd", "systemd_service", "sysvinit"}


@dataclass
class HostTally:
    ok: int = 0
    changed: int = 0
    failed: int = 0
    unreachable: int = 0
    skipped: int = 0
    task: str = ""  # the task running (or last run) on this host

    def as_dict(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in COUNTED}


@dataclass(frozen=True)
class Failure:
    host: str
    task: str
    message: str
    unreachable: bool = False
    play: str = ""  # the play the task ran in (upgrade.yml's plays are its steps)

    def __str__(self) -> str:
        what = "unreachable" if self.unreachable else "failed"
        return f"{self.host}: {what} at task {self.task!r}: {self.message}"


@dataclass(frozen=True)
class ConfigDiff:
    host: str
    task: str
    path: str
    before: str
    after: str


@dataclass
class Tracker:
    """Folds the event stream of one playbook run into what the progress display and summary show."""

    hosts: dict[str, HostTally] = field(default_factory=dict)
    failures: list[Failure] = field(default_factory=list)
    diffs: list[ConfigDiff] = field(default_factory=list)
    changed_tasks: list[tuple[str, str]] = field(default_factory=list)
    restarts: list[tuple[str, str]] = field(default_factory=list)  # (host, "slurmd restarted") applied
    tasks_seen: int = 0
    current_play: str = ""
    output_tail: list[str] = field(default_factory=list)  # Ansible's own last lines, for errors outside tasks
    tolerated: set[str] = field(default_factory=set)  # hosts whose failures are notes (nodes being retired)
    notes: list[str] = field(default_factory=list)

    def tolerate(self, names: Iterable[str]) -> None:
        """Hosts on their way out (removed from the blueprint): their failures do not fail the run."""
        self.tolerated.update(names)

    def expect_hosts(self, names: list[str]) -> None:
        for name in names:
            self.hosts.setdefault(name, HostTally())

    def feed(self, event: Mapping[str, Any]) -> None:
        kind = str(event.get("event", ""))
        data: Mapping[str, Any] = event.get("event_data") or {}
        if event.get("stdout"):
            self.output_tail = [*self.output_tail, *str(event["stdout"]).splitlines()][-15:]
        if kind == "playbook_on_play_start":
            self.current_play = str(data.get("play", ""))
        elif kind == "playbook_on_task_start":
            self.tasks_seen += 1
        elif kind == "runner_on_start":
            self._tally(data).task = str(data.get("task", ""))
        elif kind.startswith("runner_on_") or kind.startswith("runner_item_on_"):
            self._result(kind, data)

    def _tally(self, data: Mapping[str, Any]) -> HostTally:
        return self.hosts.setdefault(str(data.get("host", "?")), HostTally())

    def _result(self, kind: str, data: Mapping[str, Any]) -> None:
        if kind.startswith("runner_item_on_"):
            return  # a loop's items; the task's own event follows and is the one counted
        res: Mapping[str, Any] = data.get("res") or {}
        task = str(data.get("task", ""))
        host = str(data.get("host", "?"))
        if host in self.tolerated:
            if kind in ("runner_on_failed", "runner_on_unreachable"):
                self.notes.append(f"{host} (removed from the blueprint): {task}: {_message(res)}")
            return
        tally = self._tally(data)
        if kind == "runner_on_ok":
            tally.ok += 1
            if res.get("changed"):
                tally.changed += 1
                self.changed_tasks.append((host, task))
                self._note_restart(host, str(data.get("task_action", "")), res)
            self._collect_diffs(host, task, res)
        elif kind == "runner_on_failed" and not data.get("ignore_errors"):
            tally.failed += 1
            self.failures.append(Failure(host, task, _message(res), play=self.current_play))
        elif kind == "runner_on_unreachable":
            tally.unreachable += 1
            self.failures.append(Failure(host, task, _message(res), unreachable=True, play=self.current_play))
        elif kind == "runner_on_skipped":
            tally.skipped += 1

    def _note_restart(self, host: str, action: str, res: Mapping[str, Any]) -> None:
        """A daemon restarted or reloaded, or slurm.conf applied live: what a deploy did to running jobs' hosts."""
        args = (res.get("invocation") or {}).get("module_args") or {}
        if action.rsplit(".", 1)[-1] in _SERVICE_MODULES and args.get("state") in ("restarted", "reloaded"):
            self.restarts.append((host, f"{args.get('name', '?')} {args['state']}"))
        elif list(args.get("argv") or [])[:2] == ["scontrol", "reconfigure"]:
            self.restarts.append((host, "scontrol reconfigure"))

    def _collect_diffs(self, host: str, task: str, res: Mapping[str, Any]) -> None:
        loop = res.get("results")
        if isinstance(loop, list):  # a looped task: each item carries its own diff
            for item_res in loop:
                if isinstance(item_res, Mapping):
                    self._collect_diffs(host, task, item_res)
        diff = res.get("diff")
        for item in diff if isinstance(diff, list) else [diff] if isinstance(diff, dict) else []:
            before, after = item.get("before", ""), item.get("after", "")
            if isinstance(before, str) and isinstance(after, str) and before != after:
                self.diffs.append(ConfigDiff(host, task, _diff_path(res, item), before, after))

    @property
    def ok(self) -> bool:
        return not self.failures

    def changed_total(self) -> int:
        return sum(t.changed for t in self.hosts.values())


def _diff_path(res: Mapping[str, Any], item: Mapping[str, Any]) -> str:
    """The live file a diff is about. after_header is often the template's temporary copy, and a file that
    does not exist yet has its destination only in the module arguments."""
    args = (res.get("invocation") or {}).get("module_args") or {}
    for candidate in (res.get("dest"), args.get("dest"), args.get("path"), item.get("before_header")):
        if isinstance(candidate, str) and candidate and candidate != "/dev/null":
            return candidate
    return str(item.get("after_header") or "?")


TAIL_LINES = 8


def _message(res: Mapping[str, Any]) -> str:
    """Ansible's message and the tail of what the task printed: "non-zero return code" alone says nothing
    about why. stderr first; stdout when stderr is empty (many tools print their errors there)."""
    if res.get("censored"):
        return str(res["censored"])  # a no_log task: Ansible already hid its details
    parts = []
    msg = str(res.get("msg") or res.get("reason") or "").strip()
    if msg:
        parts.append(msg[:400])
    for key in ("stderr", "module_stderr", "stdout", "module_stdout"):
        tail = _tail(res.get(key))
        if tail and tail not in msg:
            parts.append(f"{key.replace('module_', '')}: {tail}")
            break
    return "\n".join(parts) if parts else "failed (no message)"


def _tail(value: object) -> str:
    lines = [line.rstrip() for line in str(value or "").strip().splitlines() if line.strip()]
    return "\n".join(line[:300] for line in lines[-TAIL_LINES:])


# apt's cache update fails through python-apt's FetchFailedException, raised without text when a download fails:
# the module's message ends at the colon ("unknown reason" where no exception came) and apt's own lines are lost.
_APT_UPDATE_NO_REASON = re.compile(r"Failed to update apt cache after \d+ retries:\s*(unknown reason)?")


def apt_reason_lost(failure: Failure) -> bool:
    return _APT_UPDATE_NO_REASON.fullmatch(failure.message) is not None


def explain_failures(failures: Iterable[Failure], apt_update: Callable[[str], str]) -> list[Failure]:
    """The failures, those whose message lacks its cause completed: a failed apt cache update with apt's own
    lines, from ``apt_update(host)`` (the output of ``apt-get update`` run again on the host)."""
    return [
        replace(f, message=f"{f.message.rstrip()}\napt-get update: {_apt_lines(apt_update(f.host))}")
        if apt_reason_lost(f)
        else f
        for f in failures
    ]


def _apt_lines(output: str) -> str:
    """apt's warnings and errors (W:, E:), which name each source and why it failed; else its last lines."""
    found = [line.rstrip()[:300] for line in output.splitlines() if line.startswith(("W:", "E:"))]
    return "\n".join(found[-TAIL_LINES:]) if found else _tail(output) or "(no output)"
