"""The commands preflight runs on each host: one command per fact, over one connection per host, hosts in
parallel. Nothing here judges an answer; `hpckit.preflight.compare` does."""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from hpckit.errors import HpckitError
from hpckit.preflight.expect import ACCOUNTS, HostPlan
from hpckit.proc import CommandResult, Transport

# 127: the shell found no such command (SSH runs commands through the login shell).
RC_NOT_FOUND = 127

# adjtimex(2) with no mode bits only reads the kernel clock state: 5 (TIME_ERROR) means unsynchronised,
# whichever of chrony, ntpd or systemd-timesyncd should be disciplining it. The struct is zeroed, so its
# layout does not matter.
_ADJTIMEX = (
    "import ctypes; buf = ctypes.create_string_buffer(512); print(ctypes.CDLL(None, use_errno=True).adjtimex(buf))"
)
_IB_SYSFS = (
    "cd /sys/class/infiniband 2>/dev/null && "
    "grep -s -H . */ports/*/state */ports/*/phys_state */ports/*/rate */ports/*/link_layer"
)


# Probes run over any Transport: SSH to real hosts, or recorded answers in tests.
Connection = Transport


@dataclass(frozen=True)
class Probe:
    name: str
    argv: tuple[str, ...]
    display: str = ""  # a shorter command that shows the same (for the report)

    @property
    def shown(self) -> str:
        """The command as an admin types it (``sh -c`` scripts unwrapped)."""
        if self.display:
            return self.display
        if self.argv[:2] == ("sh", "-c"):
            return self.argv[2]
        return shlex.join(self.argv)


@dataclass(frozen=True)
class ProbeResult:
    probe: Probe
    rc: int
    stdout: str
    stderr: str
    started: float  # this machine's clock around the command, for the clock offset
    finished: float

    @property
    def not_found(self) -> bool:
        return self.rc == RC_NOT_FOUND


@dataclass
class HostProbes:
    host: str
    address: str
    results: dict[str, ProbeResult] = field(default_factory=dict)
    unreachable: str | None = None  # why the host could not be reached (no probe result then)


def probes_for(plan: HostPlan) -> list[Probe]:
    """Every host: OS, accounts, clock; compute nodes also their hardware; disks and mounts where needed."""
    probes = [
        Probe("os", ("cat", "/etc/os-release")),
        Probe("users", ("getent", "passwd", *ACCOUNTS)),
        Probe("groups", ("getent", "group", *ACCOUNTS)),
        Probe("time_sync", ("python3", "-c", _ADJTIMEX), "timedatectl show -p NTPSynchronized"),
        Probe("clock", ("date", "+%s.%N")),
    ]
    if plan.role == "compute":
        probes += [
            Probe("cpu", ("lscpu", "--parse=CPU,CORE,SOCKET")),
            Probe("memory", ("grep", "MemTotal", "/proc/meminfo")),
            Probe("gpus", ("nvidia-smi", "--query-gpu=index,name,driver_version,mig.mode.current", "--format=csv")),
            Probe("gpu_devices", ("sh", "-c", "ls -1d /dev/nvidia[0-9]*")),
            Probe("ib", ("sh", "-c", _IB_SYSFS), "grep -H . /sys/class/infiniband/*/ports/*/{state,rate,link_layer}"),
        ]
    if plan.disks:
        paths = [d.path for d in plan.disks]
        probes.append(Probe("disk", ("sh", "-c", _disk_script(paths)), f"df -h {' '.join(paths)}"))
    if plan.mounts:
        probes.append(Probe("mounts", ("findmnt", "-l", "-n", "-o", "TARGET,FSTYPE")))
    return probes


def _disk_script(paths: Sequence[str]) -> str:
    """``df`` of each path, or of its nearest existing parent (before a deploy most do not exist yet)."""
    quoted = " ".join(shlex.quote(p) for p in paths)
    return (
        f'for p in {quoted}; do q="$p"; while [ ! -e "$q" ]; do q=$(dirname "$q"); done; '
        'printf "%s " "$p"; df -P -k -T "$q" | tail -n 1; done'
    )


def run_probes(conn: Connection, host: str, address: str, probes: Sequence[Probe], timeout: float) -> HostProbes:
    """All probes of one host, one after another on its one connection; the first that cannot be run at all
    (host unreachable) ends the host."""
    out = HostProbes(host, address)
    for probe in probes:
        started = time.time()
        try:
            done = conn.run(probe.argv, timeout=timeout)
        except HpckitError as exc:  # TransportError: unreachable, or the command hung
            if not out.results:
                out.unreachable = str(exc)
                return out
            done = CommandResult(probe.argv, -1, "", str(exc), host)
        out.results[probe.name] = ProbeResult(probe, done.rc, done.stdout, done.stderr, started, time.time())
    return out


def probe_hosts(
    plans: Sequence[HostPlan],
    connect: Callable[[HostPlan], Connection],
    *,
    workers: int = 32,
    timeout: float = 30.0,
) -> dict[str, HostProbes]:
    """Probe every host in parallel (a thread per host, at most ``workers`` at once)."""

    def one(plan: HostPlan) -> HostProbes:
        try:
            conn = connect(plan)
        except HpckitError as exc:
            return HostProbes(plan.host, plan.address, unreachable=str(exc))
        try:
            return run_probes(conn, plan.host, plan.address, probes_for(plan), timeout)
        finally:
            conn.close()

    if not plans:
        return {}
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(plans)))) as pool:
        return {probes.host: probes for probes in pool.map(one, plans)}
