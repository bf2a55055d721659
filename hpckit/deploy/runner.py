"""The one module that imports ansible_runner.

Each run gets a fresh private data dir (runner reuses and rewrites whatever it finds in one), events go
to a callback that always returns True (runner drops events whose handler returns False), and Ctrl-C
reaches Ansible through the cancel callback (without one, runner swallows it).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ansible_runner
import yaml

from hpckit.errors import HpckitError
from hpckit.paths import ansible_dir

EventSink = Callable[[Mapping[str, Any]], None]


class RunnerError(HpckitError):
    """Ansible could not be started (not: a task failed, which is a normal outcome)."""


@dataclass(frozen=True)
class PlaybookRun:
    playbook: str = "site.yml"
    check: bool = False
    diff: bool = False
    limit: str | None = None
    forks: int = 50
    fact_cache: Path | None = None
    verbosity: int = 0


@dataclass(frozen=True)
class RunOutcome:
    status: str  # successful | failed | canceled | timeout
    rc: int
    events_file: Path | None


class _Cancel:
    """Turns SIGINT into a cancel request that ansible_runner polls for.

    Runner answers a cancel with SIGKILL to ansible-playbook's process group, but Ansible's workers each run in
    a session of their own, so the task processes they started (a `command` on a local connection, the SSH
    clients of the others) would outlive the deploy. So ansible-playbook first gets the SIGINT a terminal would
    have given it (it stops its workers, and they their process groups), and a few seconds to end."""

    GRACE_S = 10.0

    def __init__(self) -> None:
        self.requested = threading.Event()
        self._previous: Any = None
        self._interrupted = False

    def __enter__(self) -> _Cancel:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, lambda *_: self.requested.set())
        return self

    def __exit__(self, *_: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)

    def __call__(self) -> bool:
        if not self.requested.is_set():
            return False
        if not self._interrupted:
            self._interrupted = True
            _interrupt_ansible(self.GRACE_S)
        return True


def _interrupt_ansible(grace: float) -> None:
    """SIGINT to the ansible-playbook runner started from this process, then wait (at most ``grace`` s) until it
    has ended; runner reaps it."""
    playbooks = [pid for pid in _children() if b"ansible-playbook" in _read(f"/proc/{pid}/cmdline")]
    for pid in playbooks:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGINT)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(_running(pid) for pid in playbooks):
        time.sleep(0.1)


def _children() -> list[int]:
    """This process's direct children (from /proc: runner keeps its pexpect child to itself)."""
    me = os.getpid()
    found = []
    for entry in os.listdir("/proc"):
        stat = _read(f"/proc/{entry}/stat") if entry.isdigit() else b""
        # pid (comm) state ppid ...: comm may hold spaces and parentheses, so split after its last ')'.
        if stat and int(stat.rsplit(b")", 1)[1].split()[1]) == me:
            found.append(int(entry))
    return found


def _running(pid: int) -> bool:
    stat = _read(f"/proc/{pid}/stat")
    return bool(stat) and stat.rsplit(b")", 1)[1].split()[0] != b"Z"


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return b""


def _envvars(run: PlaybookRun, data_dir: Path, control_dir: Path) -> dict[str, str]:
    env = {
        "ANSIBLE_CONFIG": str(ansible_dir() / "ansible.cfg"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_RETRY_FILES_ENABLED": "0",
        "PATH": _path_with_ansible(),
        # Nothing of a run outlives it: Ansible's home and local temp live in the private data dir (not
        # ~/.ansible), and its SSH master connections in a folder of this run's own, so that a host whose
        # sshd died is seen dead by the next run instead of reached over a connection cached by the last.
        "ANSIBLE_HOME": str(data_dir / "ansible-home"),
        "ANSIBLE_LOCAL_TEMP": str(data_dir / "ansible-tmp"),
        "ANSIBLE_SSH_CONTROL_PATH_DIR": str(control_dir),
    }
    return env


def _control_dir() -> Path:
    """A short folder for SSH control sockets (a socket path has a ~100-byte limit, and the data dir may
    sit deep under $TMPDIR)."""
    return Path(tempfile.mkdtemp(prefix="hpckit-cp-", dir="/tmp"))


def _close_masters(control_dir: Path) -> None:
    """End the run's SSH master connections (ControlPersist would keep them for minutes), then their folder."""
    from hpckit.proc import LocalTransport

    local = LocalTransport()
    for sock in control_dir.iterdir():
        with contextlib.suppress(HpckitError):
            local.run(["ssh", "-o", f"ControlPath={sock}", "-O", "exit", "hpckit-run"], timeout=10)
    shutil.rmtree(control_dir, ignore_errors=True)


def _path_with_ansible() -> str:
    """PATH with the ansible-playbook of hpckit's own environment first, even when that venv is not on PATH."""
    path = os.environ.get("PATH", "/usr/bin:/bin")
    bindir = Path(sys.executable).parent
    if (bindir / "ansible-playbook").exists():
        return f"{bindir}{os.pathsep}{path}"
    if not shutil.which("ansible-playbook"):
        raise RunnerError("ansible-playbook not found (install ansible-core in hpckit's environment)")
    return path


def _cmdline(run: PlaybookRun) -> str:
    return " ".join(flag for flag, on in (("--check", run.check), ("--diff", run.diff)) if on)


def run_playbook(
    inventory: Mapping[str, Any],
    extravars: Mapping[str, Any],
    run: PlaybookRun,
    on_event: EventSink,
    keep_events: Path | None = None,
) -> RunOutcome:
    """Run one playbook; every event goes to `on_event`; events are also appended to `keep_events` (JSONL)."""
    playbook = ansible_dir() / run.playbook
    if not playbook.is_file():
        raise RunnerError(f"playbook not found: {playbook}")
    data_dir = Path(tempfile.mkdtemp(prefix="hpckit-runner-"))
    control_dir = _control_dir()
    sink = keep_events.open("a") if keep_events else None
    try:
        (data_dir / "inventory").mkdir()
        (data_dir / "inventory" / "hosts.yml").write_text(yaml.safe_dump(dict(inventory), sort_keys=False))

        def handler(event: Mapping[str, Any]) -> bool:
            on_event(event)
            if sink is not None:
                sink.write(json.dumps(_slim(event), default=str) + "\n")
            return True  # False would make runner drop the event

        with _Cancel() as cancel:
            result = ansible_runner.run(
                private_data_dir=str(data_dir),
                project_dir=str(ansible_dir()),
                playbook=str(playbook),
                inventory=str(data_dir / "inventory" / "hosts.yml"),
                extravars=dict(extravars),
                envvars=_envvars(run, data_dir, control_dir),
                cmdline=_cmdline(run) or None,
                limit=run.limit,
                forks=run.forks,
                verbosity=run.verbosity or None,
                event_handler=handler,
                cancel_callback=cancel,
                quiet=True,
                suppress_env_files=True,
                # runner points the jsonfile cache into its artifacts (deleted below) whatever envvars say;
                # an absolute path here is the one place it takes another folder from.
                fact_cache=str(run.fact_cache) if run.fact_cache is not None else None,
            )
        return RunOutcome(status=str(result.status), rc=int(result.rc or 0), events_file=keep_events)
    finally:
        if sink is not None:
            sink.close()
        _close_masters(control_dir)
        shutil.rmtree(data_dir, ignore_errors=True)  # holds env/extravars: nothing stays on disk


def _slim(event: Mapping[str, Any]) -> dict[str, Any]:
    """What the deployment record keeps of an event: no stdout blobs, no module arguments."""
    data = dict(event.get("event_data") or {})
    res = data.get("res") if isinstance(data.get("res"), dict) else {}
    keep = {k: data.get(k) for k in ("host", "task", "play", "task_action", "duration", "start", "end") if k in data}
    if res:
        keep["changed"] = res.get("changed")
        if res.get("censored"):
            keep["censored"] = True
        elif event.get("event") in ("runner_on_failed", "runner_on_unreachable"):
            keep["msg"] = str(res.get("msg", ""))[:400]
    return {"event": event.get("event"), "created": event.get("created"), **keep}


def ansible_version() -> str:
    from ansible.release import __version__

    return str(__version__)
