"""How checks look at a node: the :class:`Probe` interface, and :class:`LocalProbe`, the real one.

Checks never start programs or open files themselves; they ask a Probe. Tests hand them a
:class:`~hpckit.health.recorded.RecordedProbe` filled with real tool output instead, so that every check
can be judged on recorded hardware (``tests/data/hw``) without that hardware.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import socket
import stat
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from hpckit import proc
from hpckit.proc import CommandResult

if TYPE_CHECKING:
    from hpckit.health.gpubench import BenchReport
    from hpckit.hw import IbPort

_T = TypeVar("_T")


class ProbeError(Exception):
    """An observation that could not be made. ``timeout`` tells a hang (a dead NFS server) from an error."""

    def __init__(self, message: str, *, timeout: bool = False) -> None:
        super().__init__(message)
        self.timeout = timeout


def shown(done: CommandResult) -> str:
    """One line on a probe command that did not succeed, for a check's message (the last line of its error)."""
    if done.missing:
        return f"{done.argv[0]}: not installed"
    if done.timed_out:
        return f"`{shlex.join(done.argv)}` did not finish in time"
    err = (done.stderr.strip() or done.stdout.strip()).splitlines()
    return f"`{shlex.join(done.argv)}` exited {done.rc}" + (f": {err[-1][:300]}" if err else "")


@dataclass(frozen=True)
class ProcInfo:
    pid: int
    comm: str
    state: str  # one letter, as in /proc/<pid>/stat: R S D Z T ...


@dataclass(frozen=True)
class DiskSpace:
    path: str
    total_bytes: int
    avail_bytes: int  # what a non-root user may still write

    @property
    def avail_fraction(self) -> float:
        return self.avail_bytes / self.total_bytes if self.total_bytes else 0.0


class Probe(Protocol):
    hostname: str

    def run(self, argv: Sequence[str], *, stdin: str | None = None, timeout: float = 10.0) -> CommandResult: ...

    def read_text(self, path: str) -> str | None:
        """The file's text, or None when it does not exist or cannot be read."""
        ...

    def listdir(self, path: str) -> list[str] | None: ...

    def is_char_device(self, path: str) -> bool: ...

    def disk_space(self, path: str, timeout: float) -> DiskSpace: ...

    def write_test(self, directory: str, timeout: float) -> float:
        """Write, fsync and remove a small file in ``directory``; seconds taken. ProbeError on failure."""
        ...

    def processes(self) -> list[ProcInfo]: ...

    def now(self) -> float: ...

    def nvml(self) -> Any | None:
        """An initialised NVML binding (the ``pynvml`` module), or None when NVML is not available."""
        ...

    def ib_ports(self) -> list[IbPort]: ...

    def gpu_bench(self, gpus: int) -> BenchReport:
        """Run the heavy GPU measurements; raises BenchUnavailable when they cannot run here."""
        ...


def short_hostname() -> str:
    return socket.gethostname().split(".", 1)[0]


def with_timeout(work: Callable[[], _T], timeout: float, what: str) -> _T:
    """Run ``work`` on a daemon thread so that a hung filesystem cannot hang the check (or Slurm's 60 s)."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = work()
        except BaseException as exc:  # handed back to the caller below
            box["error"] = exc

    thread = threading.Thread(target=target, name=f"probe:{what}", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise ProbeError(f"{what}: no answer in {timeout:g} s", timeout=True)
    if "error" in box:
        error = box["error"]
        if isinstance(error, OSError):
            raise ProbeError(f"{what}: {error.strerror or error}") from None
        raise error
    value: _T = box["value"]
    return value


class LocalProbe:
    """The node this process runs on."""

    def __init__(self, hostname: str | None = None, sysfs_ib: str = "/sys/class/infiniband") -> None:
        self.hostname = hostname or short_hostname()
        self._sysfs_ib = sysfs_ib
        self._nvml: Any | None = None
        self._nvml_tried = False

    def run(self, argv: Sequence[str], *, stdin: str | None = None, timeout: float = 10.0) -> CommandResult:
        args = tuple(argv)
        env = {**os.environ, "LC_ALL": "C"}
        try:
            return proc.run(args, stdin=stdin, timeout=timeout, env=env, where=self.hostname)
        except proc.CommandNotFound:
            return CommandResult(args, 127, "", f"{args[0]}: not found", self.hostname, missing=True)
        except proc.CommandTimedOut:
            return CommandResult(args, -1, "", "", self.hostname, timed_out=True)
        except OSError as exc:
            return CommandResult(args, 126, "", f"{args[0]}: {exc.strerror or exc}", self.hostname)

    def read_text(self, path: str) -> str | None:
        try:
            return Path(path).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None

    def listdir(self, path: str) -> list[str] | None:
        try:
            return sorted(os.listdir(path))
        except OSError:
            return None

    def is_char_device(self, path: str) -> bool:
        try:
            return stat.S_ISCHR(os.stat(path).st_mode)
        except OSError:
            return False

    def disk_space(self, path: str, timeout: float) -> DiskSpace:
        def work() -> DiskSpace:
            st = os.statvfs(path)
            return DiskSpace(path, st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize)

        return with_timeout(work, timeout, f"statvfs {path}")

    def write_test(self, directory: str, timeout: float) -> float:
        target = os.path.join(directory, f".hpckit-health-{self.hostname}-{os.getpid()}")

        def work() -> float:
            start = time.perf_counter()
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.write(fd, b"hpckit health write test\n" * 160)  # 4 KiB: one page
                os.fsync(fd)
            finally:
                os.close(fd)
                _unlink_quietly(target)
            return time.perf_counter() - start

        return with_timeout(work, timeout, f"write test in {directory}")

    def processes(self) -> list[ProcInfo]:
        procs: list[ProcInfo] = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            info = _proc_stat(entry)
            if info is not None:
                procs.append(info)
        return procs

    def now(self) -> float:
        return time.time()

    def nvml(self) -> Any | None:
        if not self._nvml_tried:
            self._nvml_tried = True
            self._nvml = _init_nvml()
        return self._nvml

    def ib_ports(self) -> list[IbPort]:
        from hpckit.hw import read_sysfs_ports

        return read_sysfs_ports(Path(self._sysfs_ib))

    def gpu_bench(self, gpus: int) -> BenchReport:
        from hpckit.health.gpubench import run_local_bench

        return run_local_bench(gpus)


def _unlink_quietly(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def _proc_stat(pid: str) -> ProcInfo | None:
    """``/proc/<pid>/stat``: the command sits in parentheses and may itself hold spaces or ')'."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as handle:
            text = handle.read()
    except OSError:
        return None  # the process ended meanwhile
    open_paren, close_paren = text.find("("), text.rfind(")")
    if open_paren < 0 or close_paren < 0:
        return None
    rest = text[close_paren + 1 :].split()
    return ProcInfo(int(pid), text[open_paren + 1 : close_paren], rest[0] if rest else "?")


def _init_nvml() -> Any | None:
    """pynvml (nvidia-ml-py) when it is installed and a driver answers; None otherwise."""
    if not os.path.exists("/proc/driver/nvidia/version"):
        return None  # no driver loaded: skip the import and the library search altogether
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # NVMLError and OSError from a missing libnvidia-ml: nvidia-smi gets its turn
        return None
    return pynvml
