"""Host checks: the Slurm daemons, munge, shared filesystems, disks, declared resources, clock, processes,
and the kernel log since the last run."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator

from hpckit.health.context import Context
from hpckit.health.model import Bounds, Measure, Status, absent, fail, judge, ok, unknown, warn
from hpckit.health.probe import ProbeError, shown
from hpckit.health.registry import check

MIB = 1 << 20


def _alive(ctx: Context, comm: str) -> list[int]:
    return [p.pid for p in ctx.probe.processes() if p.comm == comm and p.state != "Z"]


@check("host.slurmd")
def slurmd(ctx: Context) -> Iterator[Measure]:
    """slurmd runs."""
    pids = _alive(ctx, "slurmd")
    if pids:
        yield ok("running", 1.0, "", f"slurmd pid {pids[0]}")
    else:
        yield fail("running", "slurmd-down", "no slurmd process on this node", 0.0)


@check("host.munge")
def munge(ctx: Context) -> Iterator[Measure]:
    """munged runs and a credential makes the round trip munge -> unmunge."""
    pids = _alive(ctx, "munged")
    if not pids:
        yield fail("running", "munge-down", "no munged process: Slurm cannot authenticate this node", 0.0)
        return
    yield ok("running", 1.0, "", f"munged pid {pids[0]}")
    yield _munge_round_trip(ctx)


def _munge_round_trip(ctx: Context) -> Measure:
    timeout = ctx.limits.munge_timeout_s
    start = time.perf_counter()
    cred = ctx.probe.run(["munge", "-n"], timeout=timeout)
    if cred.ok:
        cred = ctx.probe.run(["unmunge"], stdin=cred.stdout, timeout=timeout)
    seconds = time.perf_counter() - start
    if cred.timed_out:
        return unknown("roundtrip", "munge-timeout", shown(cred))
    if not cred.ok:
        return fail("roundtrip", "munge-roundtrip", shown(cred))
    if "STATUS:" in cred.stdout and "Success" not in cred.stdout:
        status = next(line for line in cred.stdout.splitlines() if line.startswith("STATUS:"))
        return fail("roundtrip", "munge-roundtrip", f"unmunge: {status.strip()}")
    return ok("roundtrip", round(seconds, 4), "s", "munge -n | unmunge: Success")


def mount_points(mountinfo: str) -> set[str]:
    """Mount points from /proc/self/mountinfo (field 5; spaces come escaped as \\040)."""
    points = set()
    for line in mountinfo.splitlines():
        fields = line.split()
        if len(fields) > 4:
            points.add(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4]))
    return points


@check("host.mounts")
def mounts(ctx: Context) -> Iterator[Measure]:
    """Each shared filesystem the blueprint declares is mounted and takes a write (with its latency)."""
    if not ctx.config.mounts:
        return
    points = mount_points(ctx.probe.read_text("/proc/self/mountinfo") or "")
    for mount in ctx.config.mounts:
        path = mount.path.rstrip("/") or "/"
        if path not in points:
            yield fail(path, "mount-missing", f"{path} is not mounted")
            continue
        yield _write_test(ctx, path, mount.write_dir)


def _write_test(ctx: Context, path: str, directory: str) -> Measure:
    limits = ctx.limits
    try:
        seconds = ctx.probe.write_test(directory, limits.fs_timeout_s)
    except ProbeError as exc:
        if exc.timeout:
            return fail(path, "mount-hung", f"{exc} (the filesystem does not answer)")
        return fail(path, "mount-unwritable", str(exc))
    bounds = Bounds(0.0, abs=limits.write_warn_s, side="high")
    return judge(path, round(seconds, 4), "s", bounds, "mount-slow", status_out=Status.WARN, what="4 KiB write+fsync")


def _existing(path: str, ctx: Context) -> str | None:
    """The path, or its nearest existing parent (an enroot cache dir appears on first use)."""
    current = path.split("$", 1)[0].rstrip("/") or "/"
    while current not in ("", "/"):
        if ctx.probe.listdir(current) is not None:
            return current
        current = os.path.dirname(current)
    return "/"


@check("host.disk")
def disk(ctx: Context) -> Iterator[Measure]:
    """Free space on the Slurm spool, /tmp and the enroot paths."""
    limits = ctx.limits
    for label, path in ctx.config.disks.items():
        where = _existing(path, ctx) or "/"
        try:
            space = ctx.probe.disk_space(where, limits.fs_timeout_s)
        except ProbeError as exc:
            yield fail(label, "disk-hung" if exc.timeout else "disk-unreadable", str(exc))
            continue
        free_mib, total_mib = space.avail_bytes / MIB, space.total_bytes / MIB
        text = f"{where}: {free_mib:,.0f} MiB free of {total_mib:,.0f} MiB ({space.avail_fraction:.1%})"
        fraction = round(space.avail_fraction, 4)
        # The floor in MiB, or half the filesystem where it is smaller than twice that: a small tmpfs /tmp
        # (half of a small node's memory) is never "full" while empty.
        floor_mib = min(limits.disk_fail_mib, total_mib / 2)
        if fraction < limits.disk_fail_fraction or free_mib < floor_mib:
            yield fail(label, "disk-full", text, fraction, "ratio")
        elif fraction < limits.disk_warn_fraction:
            yield warn(label, "disk-low", text, fraction, "ratio")
        else:
            yield ok(label, fraction, "ratio", text)


def online_cpus(text: str) -> int:
    """``0-3,8-11`` (/sys/devices/system/cpu/online) -> 8."""
    total = 0
    for part in text.strip().split(","):
        if not part:
            continue
        first, _, last = part.partition("-")
        total += int(last or first) - int(first) + 1
    return total


def _mem_total_mb(ctx: Context) -> int | None:
    from hpckit.hw.errors import HwParseError
    from hpckit.hw.meminfo import mem_total_mb

    try:
        return mem_total_mb(ctx.probe.read_text("/proc/meminfo") or "")
    except HwParseError:
        return None


@check("host.resources")
def resources(ctx: Context) -> Iterator[Measure]:
    """At least the CPUs and memory that slurm.conf declares for this node."""
    decl, why = ctx.slurm_decl()
    if decl is None:
        yield unknown("declared", "slurm-conf", why)
        return
    cpus_text = ctx.probe.read_text("/sys/devices/system/cpu/online")
    cpus = online_cpus(cpus_text) if cpus_text else os.cpu_count() or 0
    if decl.cpus is not None:
        bounds = Bounds(float(decl.cpus), side="low")
        yield judge("cpus", float(cpus), "cpus", bounds, "cpus-missing", what="online")
    memory = _mem_total_mb(ctx)
    if decl.real_memory_mb is not None and memory is not None:
        bounds = Bounds(float(decl.real_memory_mb), side="low")
        yield judge("memory", float(memory), "MB", bounds, "memory-missing", what="MemTotal")


@check("host.clock")
def clock(ctx: Context) -> Iterator[Measure]:
    """The clock is synchronised (chrony, else ntpd) and close to its reference."""
    done = ctx.probe.run(["chronyc", "-c", "tracking"], timeout=5.0)
    if done.missing:
        done = ctx.probe.run(["ntpq", "-c", "rv 0 offset"], timeout=5.0)
        if done.missing:
            yield absent("offset", "no chronyc or ntpq on this node: clock sync not checked")
            return
        yield _ntpq_offset(ctx, done.stdout, done.ok, shown(done))
        return
    if not done.ok:
        yield warn("offset", "clock-unsynced", f"time sync daemon does not answer: {shown(done)}")
        return
    yield _chrony_offset(ctx, done.stdout)


def _judge_offset(ctx: Context, offset_s: float, source: str) -> Measure:
    limits = ctx.limits
    value = round(offset_s, 6)
    text = f"{source}: offset {offset_s:+.6f} s"
    if abs(offset_s) > limits.clock_fail_s:
        return fail("offset", "clock-offset", text, value, "s")
    if abs(offset_s) > limits.clock_warn_s:
        return warn("offset", "clock-offset", text, value, "s")
    return ok("offset", value, "s", text, Bounds(0.0, abs=limits.clock_warn_s))


def _chrony_offset(ctx: Context, text: str) -> Measure:
    fields = text.strip().split(",")
    if len(fields) < 14:
        return unknown("offset", "clock-unreadable", f"chronyc -c tracking: unexpected output {text.strip()[:120]!r}")
    if fields[13].strip().lower().startswith("not synchron"):
        return warn("offset", "clock-unsynced", "chrony: not synchronised")
    try:
        return _judge_offset(ctx, float(fields[4]), "chrony")
    except ValueError:
        return unknown("offset", "clock-unreadable", f"chronyc: bad offset {fields[4]!r}")


def _ntpq_offset(ctx: Context, text: str, ran: bool, describe: str) -> Measure:
    match = re.search(r"offset=\s*([-+]?\d+(?:\.\d+)?)", text)
    if not ran or match is None:
        return warn("offset", "clock-unsynced", f"ntpd does not answer: {describe}")
    return _judge_offset(ctx, float(match.group(1)) / 1000.0, "ntpd")  # ntpq prints milliseconds


@check("host.procs")
def procs(ctx: Context) -> Iterator[Measure]:
    """Zombie and uninterruptible (D-state) processes pile up on a sick node (warn only)."""
    limits = ctx.limits
    states = [p.state for p in ctx.probe.processes()]
    for metric, letter, limit in (("zombies", "Z", limits.zombie_warn), ("dstate", "D", limits.dstate_warn)):
        count = float(states.count(letter))
        bounds = Bounds(0.0, abs=float(limit), side="high")
        yield judge(metric, count, "procs", bounds, f"{metric}-many", status_out=Status.WARN, what=f"{letter}-state")


# Kernel messages that tell of a sick node, worst first. NVIDIA Xids are left to gpu.xid.
KERNEL_PATTERNS: tuple[tuple[str, bool, re.Pattern[str]], ...] = (
    (
        "memory-uncorrected",
        True,
        re.compile(r"\bEDAC\b.*\bUE\b|\[Hardware Error\].*(uncorrected|fatal)|Machine check.*uncorrect", re.I),
    ),
    ("hw-error", False, re.compile(r"\[Hardware Error\]|\bEDAC\b.*\bCE\b|mce: .*(error|corrected)", re.I)),
    ("io-error", False, re.compile(r"I/O error|EXT4-fs error|XFS \(\S+\): .*(error|corrupt)|Buffer I/O", re.I)),
    (
        "hung-task",
        False,
        re.compile(r"blocked for more than \d+ seconds|soft lockup|hard LOCKUP|detected (expedited )?stalls? on", re.I),
    ),
    ("nfs-timeout", False, re.compile(r"nfs: server \S+ not responding", re.I)),
    ("oom-kill", False, re.compile(r"Out of memory: Kill|oom-kill:|Memory cgroup out of memory", re.I)),
)


@check("host.kernel_log")
def kernel_log(ctx: Context) -> Iterator[Measure]:
    """Kernel messages since the last run: uncorrected memory errors fail (until reboot); I/O errors,
    hung tasks, NFS timeouts and OOM kills warn."""
    log = ctx.kernel()
    if log.error is not None:
        yield unknown("lines", "kernel-log-unreadable", log.error)
        return
    found: dict[str, list[str]] = {}
    for line in log.lines:
        # Xids are gpu.xid's; the boot's echo of the kernel command line holds parameter names
        # (rcupdate.rcu_cpu_stall_cputime=1) that would read as the faults they tune.
        if "NVRM: Xid" in line or "ommand line:" in line:
            continue
        for name, _, pattern in KERNEL_PATTERNS:
            if pattern.search(line):
                found.setdefault(name, []).append(line.strip())
                break
    measures = []
    for name, failing, _ in KERNEL_PATTERNS:
        lines = found.get(name)
        if lines:
            text = f"{len(lines)} line(s), last: {lines[-1][:300]}"
            measures.append((fail if failing else warn)(name, name, text, float(len(lines)), "lines"))
    measures = ctx.sticky("host.kernel_log", measures)
    scope = "this boot" if log.first_read else "since the last run"
    yield ok("lines", float(log.new_lines), "lines", f"{log.new_lines} kernel log lines {scope}")
    yield from measures
