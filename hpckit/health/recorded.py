"""A Probe that answers from recorded outputs: checks judged on real tool output without the hardware.

Commands are matched on their argv; files, directories and devices come from dicts. Anything not
recorded behaves as absent (a command "not installed", a file that does not exist), which is how a node
without that tool looks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hpckit.health.probe import DiskSpace, ProbeError, ProcInfo
from hpckit.proc import CommandResult

if TYPE_CHECKING:
    from hpckit.health.gpubench import BenchReport
    from hpckit.hw import IbPort


@dataclass(frozen=True)
class Recorded:
    """One recorded command result."""

    stdout: str = ""
    rc: int = 0
    stderr: str = ""
    timed_out: bool = False


@dataclass
class RecordedProbe:
    hostname: str = "node1"
    commands: dict[tuple[str, ...], Recorded] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    dirs: dict[str, list[str]] = field(default_factory=dict)
    char_devices: set[str] = field(default_factory=set)
    disks: dict[str, DiskSpace | ProbeError] = field(default_factory=dict)
    writes: dict[str, float | ProbeError] = field(default_factory=dict)  # directory -> seconds or error
    procs: list[ProcInfo] = field(default_factory=list)
    clock: float = 1_800_000_000.0
    nvml_module: Any | None = None
    ports: list[IbPort] | Exception = field(default_factory=list)
    bench: BenchReport | Exception | None = None
    calls: list[tuple[str, ...]] = field(default_factory=list)

    def run(self, argv: Sequence[str], *, stdin: str | None = None, timeout: float = 10.0) -> CommandResult:
        args = tuple(argv)
        self.calls.append(args)
        rec = self.commands.get(args)
        if rec is None:
            return CommandResult(args, 127, "", f"{args[0]}: not found", self.hostname, missing=True)
        if rec.timed_out:
            return CommandResult(args, -1, "", "", self.hostname, timed_out=True)
        return CommandResult(args, rec.rc, rec.stdout, rec.stderr, self.hostname)

    def read_text(self, path: str) -> str | None:
        return self.files.get(path)

    def listdir(self, path: str) -> list[str] | None:
        return self.dirs.get(path)

    def is_char_device(self, path: str) -> bool:
        return path in self.char_devices

    def disk_space(self, path: str, timeout: float) -> DiskSpace:
        found = self.disks.get(path)
        if found is None:
            raise ProbeError(f"statvfs {path}: No such file or directory")
        if isinstance(found, ProbeError):
            raise found
        return found

    def write_test(self, directory: str, timeout: float) -> float:
        found = self.writes.get(directory)
        if found is None:
            raise ProbeError(f"write test in {directory}: No such file or directory")
        if isinstance(found, ProbeError):
            raise found
        return found

    def processes(self) -> list[ProcInfo]:
        return list(self.procs)

    def now(self) -> float:
        return self.clock

    def nvml(self) -> Any | None:
        return self.nvml_module

    def ib_ports(self) -> list[IbPort]:
        if isinstance(self.ports, Exception):
            raise self.ports
        return list(self.ports)

    def gpu_bench(self, gpus: int) -> BenchReport:
        from hpckit.health.gpubench import BenchUnavailable

        if self.bench is None:
            raise BenchUnavailable("no bench recorded")
        if isinstance(self.bench, Exception):
            raise self.bench
        return self.bench


def healthy_node(name: str = "node1") -> RecordedProbe:
    """A recorded lab-like node where every host check passes (tests change one thing at a time)."""
    probe = RecordedProbe(hostname=name)
    probe.procs = [ProcInfo(1, "tini", "S"), ProcInfo(20, "munged", "S"), ProcInfo(30, "slurmd", "S")]
    probe.commands[("munge", "-n")] = Recorded("MUNGE:AwQ...:\n")
    probe.commands[("unmunge",)] = Recorded("STATUS:          Success (0)\nENCODE_HOST:     node1\n")
    probe.commands[("dmesg", "--kernel")] = Recorded("[    0.000000] Linux version 6.1.0\n[    1.500000] booted\n")
    probe.files["/proc/sys/kernel/random/boot_id"] = "9bf5fa43-e252-4fdd-b88e-660213e0c9fc\n"
    probe.files["/proc/self/mountinfo"] = "36 25 0:32 / /shared rw,relatime - ext4 /dev/vda rw\n"
    probe.files["/sys/devices/system/cpu/online"] = "0-1\n"
    probe.files["/proc/meminfo"] = "MemTotal:       24684000 kB\nMemFree:        20000000 kB\n"
    probe.files["/etc/slurm/slurm.conf"] = (
        "ClusterName=lab\nNodeName=node[1-4] CPUs=2 RealMemory=1000 Gres=gpu:lab:4 State=UNKNOWN\n"
    )
    probe.writes["/shared"] = 0.002
    gib = 1 << 30
    for path in ("/var/spool/slurmd", "/tmp"):
        probe.disks[path] = DiskSpace(path, 100 * gib, 40 * gib)
        probe.dirs[path] = []
    probe.dirs["/dev"] = ["null", "nvidia0", "nvidia1", "nvidia2", "nvidia3", "nvidiactl", "zero"]
    probe.char_devices = {f"/dev/nvidia{i}" for i in range(4)}
    return probe
