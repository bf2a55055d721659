"""Facts of each host vs the blueprint -> rows. Pure: recorded probe output in, rows out.

The CPU and memory rules are "at least": slurmd refuses a node that declares more than it has, and
declaring less is how the lab fits its nodes on one box (and how a site keeps cores for the OS).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

import hostlist

from hpckit.hardware import HardwareTable, hardware_table
from hpckit.hw import IbPort
from hpckit.preflight import facts
from hpckit.preflight.expect import ACCOUNTS, SUPPORTED_OS, SUPPORTED_OS_TEXT, Expectations, HostPlan
from hpckit.preflight.facts import FactError
from hpckit.preflight.model import Report, Row, Severity
from hpckit.preflight.probes import HostProbes, ProbeResult

# munge rejects a credential whose timestamp is off by more than its time-to-live (300 s by default):
# past that no Slurm message between two hosts is accepted.
MUNGE_TTL_S = 300.0
CLOCK_WARN_S = 1.0
TIME_ERROR = 5  # adjtimex(): the kernel clock is not synchronised
_T = TypeVar("_T")
NETWORK_FS = frozenset({"nfs", "nfs4", "lustre", "gpfs", "wekafs", "beegfs", "cifs", "smb3", "ceph", "fuse.glusterfs"})


@dataclass(frozen=True)
class Context:
    """What every host is compared against besides its own plan."""

    emulated: bool
    reference_os: facts.OsInfo | None = None
    reference_host: str = ""
    users: Mapping[str, tuple[str, facts.Account]] = field(default_factory=dict)  # name -> (host, account)
    groups: Mapping[str, tuple[str, facts.Account]] = field(default_factory=dict)
    table: HardwareTable = field(default_factory=hardware_table)


class _Rows:
    """Collects one host's rows."""

    def __init__(self, plan: HostPlan) -> None:
        self.plan = plan
        self.rows: list[Row] = []

    def add(self, check: str, expected: str, found: str, severity: Severity, command: str) -> None:
        self.rows.append(Row(self.plan.host, check, expected, found, severity, command))

    def cannot(self, check: str, expected: str, res: ProbeResult, why: str = "") -> None:
        """A probe that failed or printed nothing readable: the fact is unknown, which is worth a look."""
        detail = why or _first_line(res.stderr or res.stdout) or f"exit {res.rc}"
        self.add(check, expected, f"cannot check: {detail}", Severity.WARN, res.probe.shown)


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")[:200]


# --- the report --------------------------------------------------------------------------------------------


def build_report(exp: Expectations, probes: Mapping[str, HostProbes]) -> Report:
    ctx = cluster_context(exp, probes)
    report = Report(exp.hosts)
    for plan in exp.plans:
        host = probes.get(plan.host)
        if host is not None:
            report.rows.extend(host_rows(plan, host, ctx))
    return report


def cluster_context(exp: Expectations, probes: Mapping[str, HostProbes]) -> Context:
    """References every host is held to: the controller's OS and service accounts (or, where the controller
    has none, those most hosts share)."""
    order = [exp.controller, *(h for h in exp.hosts if h != exp.controller)]
    os_seen = {h: _parsed(probes, h, "os", facts.os_release) for h in order}
    ref_host = next((h for h in order if os_seen[h] is not None), "")
    return Context(
        emulated=exp.emulated,
        reference_os=os_seen.get(ref_host),
        reference_host=ref_host,
        users=_references(order, {h: _parsed(probes, h, "users", facts.passwd_accounts) for h in order}),
        groups=_references(order, {h: _parsed(probes, h, "groups", facts.group_accounts) for h in order}),
    )


def _parsed(probes: Mapping[str, HostProbes], host: str, name: str, parse: Callable[[str], _T]) -> _T | None:
    res = probes[host].results.get(name) if host in probes else None
    if res is None or res.stdout.strip() == "":
        return None
    try:
        return parse(res.stdout)
    except FactError:
        return None


def _references(
    order: list[str], seen: Mapping[str, dict[str, facts.Account] | None]
) -> dict[str, tuple[str, facts.Account]]:
    refs: dict[str, tuple[str, facts.Account]] = {}
    for name in ACCOUNTS:
        holders = [(h, accts[name]) for h in order if (accts := seen.get(h)) and name in accts]
        if not holders:
            continue
        counts = Counter((a.id, a.gid) for _, a in holders)
        first = holders[0]  # the controller when it has the account
        if first[0] == order[0]:
            refs[name] = first
        else:
            common = counts.most_common(1)[0][0]
            refs[name] = next(h for h in holders if (h[1].id, h[1].gid) == common)
    return refs


def host_rows(plan: HostPlan, host: HostProbes, ctx: Context) -> list[Row]:
    rows = _Rows(plan)
    if host.unreachable is not None:
        rows.add(
            "ssh", f"reachable at {host.address}", f"unreachable: {host.unreachable}", Severity.BLOCK,
            f"ssh root@{host.address} true",
        )  # fmt: skip
        return rows.rows
    res = host.results
    _os_rows(rows, res.get("os"), ctx)
    _account_rows(rows, res.get("users"), ctx.users, "uid", facts.passwd_accounts)
    _account_rows(rows, res.get("groups"), ctx.groups, "gid", facts.group_accounts)
    _time_sync_rows(rows, res.get("time_sync"))
    _clock_rows(rows, res.get("clock"))
    if plan.role == "compute":
        _cpu_rows(rows, res.get("cpu"))
        _memory_rows(rows, res.get("memory"))
        _gpu_rows(rows, res.get("gpus"), ctx)
        _device_rows(rows, res.get("gpu_devices"))
        _ib_rows(rows, res.get("ib"), ctx)
    _disk_rows(rows, res.get("disk"))
    _mount_rows(rows, res.get("mounts"), ctx)
    return rows.rows


# --- operating system, accounts, time ---------------------------------------------------------------------


def _os_rows(rows: _Rows, res: ProbeResult | None, ctx: Context) -> None:
    if res is None:
        return
    expected = SUPPORTED_OS_TEXT
    if ctx.reference_os is not None:
        expected += f", as on {ctx.reference_host} ({ctx.reference_os.pretty})"
    try:
        seen = facts.os_release(res.stdout)
    except FactError as exc:
        rows.cannot("os", expected, res, exc.message)
        return
    if (seen.id, seen.version_id) not in SUPPORTED_OS:
        severity = Severity.BLOCK  # the roles install Debian packages with apt
    elif ctx.reference_os is not None and (seen.id, seen.version_id) != (
        ctx.reference_os.id,
        ctx.reference_os.version_id,
    ):
        severity = Severity.WARN  # mixed releases ship different Slurm versions
    else:
        severity = Severity.OK
    rows.add("os", expected, seen.pretty, severity, res.probe.shown)


def _account_rows(
    rows: _Rows,
    res: ProbeResult | None,
    refs: Mapping[str, tuple[str, facts.Account]],
    kind: str,
    parse: Callable[[str], dict[str, facts.Account]],
) -> None:
    if res is None:
        return
    try:
        seen = parse(res.stdout)
    except FactError as exc:
        rows.cannot(f"{kind} {ACCOUNTS[0]}", "the same on every host", res, exc.message)
        return
    for name in ACCOUNTS:
        check = f"{kind} {name}"
        ref, mine = refs.get(name), seen.get(name)
        if ref is None:  # no host has it yet: each package install will pick whatever id is free there
            rows.add(check, "the same on every host", "absent on every host: create it before the packages do",
                     Severity.WARN, res.probe.shown)  # fmt: skip
            continue
        expected = f"{_ids(ref[1])} as on {ref[0]}"
        if mine is None:
            rows.add(check, expected, f"absent: create it as {_ids(ref[1])} before its package does", Severity.WARN,
                     res.probe.shown)  # fmt: skip
        else:
            severity = Severity.OK if _ids(mine) == _ids(ref[1]) else Severity.BLOCK
            rows.add(check, expected, _ids(mine), severity, res.probe.shown)


def _ids(account: facts.Account) -> str:
    return str(account.id) if account.gid is None else f"{account.id}:{account.gid}"


def _time_sync_rows(rows: _Rows, res: ProbeResult | None) -> None:
    if res is None:
        return
    expected = "synchronised (chrony, ntpd or systemd-timesyncd)"
    try:
        state = facts.clock_state(res.stdout)
    except FactError as exc:
        rows.cannot("time sync", expected, res, exc.message)
        return
    if state == TIME_ERROR:
        rows.add("time sync", expected, "not synchronised (kernel clock state TIME_ERROR)", Severity.WARN,
                 res.probe.shown)  # fmt: skip
    else:
        rows.add("time sync", expected, "synchronised", Severity.OK, res.probe.shown)


def _clock_rows(rows: _Rows, res: ProbeResult | None) -> None:
    if res is None:
        return
    expected = f"within {CLOCK_WARN_S:g} s of this machine (munge fails past {MUNGE_TTL_S:g} s)"
    try:
        remote = facts.epoch(res.stdout)
    except FactError as exc:
        rows.cannot("clock", expected, res, exc.message)
        return
    offset = remote - (res.started + res.finished) / 2
    slack = (res.finished - res.started) / 2  # the command's round trip bounds what can be measured
    if abs(offset) > MUNGE_TTL_S:
        severity = Severity.BLOCK
    elif abs(offset) > CLOCK_WARN_S + slack:
        severity = Severity.WARN
    else:
        severity = Severity.OK
    rows.add("clock", expected, f"{offset:+.1f} s", severity, res.probe.shown)


# --- compute node hardware -----------------------------------------------------------------------------------


def _cpu_rows(rows: _Rows, res: ProbeResult | None) -> None:
    hw = rows.plan.hardware
    if res is None or hw is None:
        return
    declared = f"{hw.sockets} x {hw.cores_per_socket} x {hw.threads_per_core}"
    if res.rc != 0:
        rows.cannot("cpus", f"at least {hw.cpus}", res)
        return
    try:
        seen = facts.cpu_layout(res.stdout)
    except FactError as exc:
        rows.cannot("cpus", f"at least {hw.cpus}", res, exc.message)
        return
    enough = seen.cpus >= hw.cpus
    rows.add("cpus", f"at least {hw.cpus}", str(seen.cpus), Severity.OK if enough else Severity.BLOCK, res.probe.shown)
    if seen.cores < hw.sockets * hw.cores_per_socket:
        severity = Severity.BLOCK
    elif seen.describe() != declared:
        severity = Severity.WARN  # enough cores, another shape: task binding follows the declared one
    else:
        severity = Severity.OK
    rows.add("cpu layout", f"{declared} (sockets x cores x threads)", seen.describe(), severity, res.probe.shown)


def _memory_rows(rows: _Rows, res: ProbeResult | None) -> None:
    hw = rows.plan.hardware
    if res is None or hw is None:
        return
    expected = f"at least {hw.memory_mb} MB"
    try:
        mb = facts.mem_total_mb(res.stdout)
    except FactError as exc:
        rows.cannot("memory", expected, res, exc.message)
        return
    rows.add("memory", expected, f"{mb} MB", Severity.OK if mb >= hw.memory_mb else Severity.BLOCK, res.probe.shown)


def _gpu_rows(rows: _Rows, res: ProbeResult | None, ctx: Context) -> None:
    hw = rows.plan.hardware
    if res is None or hw is None:
        return
    declared = hw.gpus
    if declared is None:
        _undeclared_gpus(rows, res)
        return
    gpu = ctx.table.gpus[declared.type]
    expected = f"{declared.count} x {gpu.names[0] if gpu.names else declared.type}"
    if res.rc != 0:
        why = "nvidia-smi not found" if res.not_found else _first_line(res.stdout or res.stderr)
        emulated = ctx.emulated and res.not_found
        note = " (the lab's GPUs are device nodes)" if emulated else ": no working NVIDIA driver"
        rows.add("gpus", expected, f"absent: {why}{note}", Severity.ABSENT if emulated else Severity.BLOCK,
                 res.probe.shown)  # fmt: skip
        return
    try:
        seen = facts.gpus_from_csv(res.stdout)
    except FactError as exc:
        rows.cannot("gpus", expected, res, exc.message)
        return
    gpu_rows(rows, seen, declared.type, declared.count, rows.plan.driver, res.probe.shown, ctx.table)


def gpu_rows(
    rows: _Rows, seen: list[facts.GpuSeen], gpu_type: str, count: int, driver: str, shown: str, table: HardwareTable
) -> None:
    """Count and type, driver, and MIG of the GPUs a node shows (from any nvidia-smi output)."""
    gpu = table.gpus[gpu_type]
    expected = f"{count} x {gpu.names[0] if gpu.names else gpu_type}"
    matching = [g for g in seen if (t := table.gpu(g.name or "")) is not None and t.key == gpu_type]
    names = Counter(g.name or "?" for g in seen)
    found = ", ".join(f"{n} x {name}" for name, n in names.items()) or "none"
    if len(matching) < count:
        severity = Severity.BLOCK
    elif len(seen) > count:
        severity = Severity.WARN  # Slurm schedules only the declared ones
    else:
        severity = Severity.OK
    rows.add("gpus", expected, found, severity, shown)
    drivers = sorted({g.driver for g in seen if g.driver})
    drv_expected = driver or "one version on every GPU"
    drv_bad = len(drivers) != 1 or (driver != "" and drivers != [driver])
    rows.add("gpu driver", drv_expected, ", ".join(drivers) or "unknown", Severity.BLOCK if drv_bad else Severity.OK,
             shown)  # fmt: skip
    mig = [g for g in seen if g.mig]
    if mig:
        rows.add("gpu mig", "MIG disabled, or a Slurm with NVML (AutoDetect=nvml)", f"MIG enabled on {len(mig)} GPUs",
                 Severity.WARN, shown)  # fmt: skip


def _undeclared_gpus(rows: _Rows, res: ProbeResult) -> None:
    if res.rc == 0 and (seen := _safe_gpus(res.stdout)):
        rows.add("gpus", "none declared", f"{len(seen)} GPUs: the blueprint declares none", Severity.WARN,
                 res.probe.shown)  # fmt: skip
    else:
        rows.add("gpus", "none declared", "absent", Severity.ABSENT, res.probe.shown)


def _safe_gpus(text: str) -> list[facts.GpuSeen]:
    try:
        return facts.gpus_from_csv(text)
    except FactError:
        return []


def _device_rows(rows: _Rows, res: ProbeResult | None) -> None:
    hw = rows.plan.hardware
    if res is None or hw is None or hw.gpus is None:
        return
    wanted = [f"/dev/nvidia{i}" for i in range(hw.gpus.count)]
    seen = facts.device_files(res.stdout)
    missing = [d for d in wanted if d not in seen]
    found = hostlist.collect_hostlist(seen) if seen else "none"
    # gres.conf names these files; slurmd will not start with one missing.
    rows.add("gpu devices", hostlist.collect_hostlist(wanted), found, Severity.BLOCK if missing else Severity.OK,
             res.probe.shown)  # fmt: skip


def _ib_rows(rows: _Rows, res: ProbeResult | None, ctx: Context) -> None:
    hw = rows.plan.hardware
    if res is None or hw is None:
        return
    try:
        ports = facts.ib_ports_from_sysfs(res.stdout)
    except FactError as exc:
        rows.cannot("infiniband", "HCA ports", res, exc.message)
        return
    ib = hw.infiniband
    if ib is None:
        fabric = [p for p in ports if p.is_infiniband]
        if fabric:
            rows.add("infiniband", "none declared", f"{len(fabric)} InfiniBand ports: the blueprint declares none",
                     Severity.WARN, res.probe.shown)  # fmt: skip
        else:
            rows.add("infiniband", "none declared", "absent", Severity.ABSENT, res.probe.shown)
        return
    ib_rows(rows, ports, list(ib.hcas), ib.rate_gbps, ib.roce, ctx.emulated, res.probe.shown)


def ib_rows(
    rows: _Rows, ports: list[IbPort], hcas: list[str], rate_gbps: int, roce: bool, emulated: bool, shown: str
) -> None:
    """One row per declared HCA port: ACTIVE, at the declared rate, on the declared link layer."""
    layer = "Ethernet" if roce else "InfiniBand"
    expected = f"ACTIVE {rate_gbps} Gb/s {layer}"
    if not ports:
        rows.add("infiniband", f"{len(hcas)} HCAs, {expected}",
                 "absent: no /sys/class/infiniband" + (" (the lab has no fabric)" if emulated else ""),
                 Severity.ABSENT if emulated else Severity.BLOCK, shown)  # fmt: skip
        return
    by_name = {(p.ca, p.port): p for p in ports}
    for spec in hcas:
        ca, _, port_text = spec.partition(":")
        port = by_name.get((ca, int(port_text) if port_text.isdigit() else 1))
        if port is None:
            rows.add(f"ib {spec}", expected, "absent", Severity.BLOCK, shown)
            continue
        rate = port.rate_gbps or 0.0
        found = f"{port.state or '?'} {rate:g} Gb/s {port.link_layer or '?'}"
        good = port.active and rate >= rate_gbps and (port.link_layer or "").casefold() == layer.casefold()
        rows.add(f"ib {spec}", expected, found, Severity.OK if good else Severity.BLOCK, shown)


# --- disks and mounts ----------------------------------------------------------------------------------------


def _disk_rows(rows: _Rows, res: ProbeResult | None) -> None:
    if res is None:
        return
    try:
        seen = facts.disk_usage(res.stdout)
    except FactError as exc:
        rows.cannot("disk", "free space", res, exc.message)
        return
    for need in rows.plan.disks:
        check = f"disk {need.path}"
        expected = f"{need.purpose}: {need.warn_gib:g} GiB free" + (", local" if need.local else "")
        disk = seen.get(need.path)
        if disk is None:
            rows.cannot(check, expected, res)
            continue
        if disk.avail_gib < need.block_gib or (need.local and disk.fstype in NETWORK_FS):
            severity = Severity.BLOCK
        elif disk.avail_gib < need.warn_gib:
            severity = Severity.WARN
        else:
            severity = Severity.OK
        found = f"{disk.avail_gib:.1f} GiB free on {disk.mount} ({disk.fstype})"
        rows.add(check, expected, found, severity, f"df -h {disk.mount}")


def _mount_rows(rows: _Rows, res: ProbeResult | None, ctx: Context) -> None:
    if res is None:
        return
    seen = facts.mounted(res.stdout)
    for need in rows.plan.mounts:
        check = f"mount {need.name}"
        expected = f"{need.fstype or 'mounted'} at {need.mount}" + (" (lab bind mount)" if ctx.emulated else "")
        fstype = seen.get(need.mount)
        if fstype is None:
            rows.add(check, expected, "not mounted", Severity.BLOCK, f"findmnt {need.mount}")
        elif need.fstype is not None and fstype != need.fstype:
            rows.add(check, expected, f"{fstype} at {need.mount}", Severity.BLOCK, f"findmnt {need.mount}")
        else:
            rows.add(check, expected, f"{fstype} at {need.mount}", Severity.OK, f"findmnt {need.mount}")
