"""The checks, judged on recorded real tool output (tests/data/hw, sources in tests/data/hw/SOURCES.md)
through a RecordedProbe; a few mutations of those outputs stand for the faults the samples lack."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from hpckit.health.config import GpuExpect, IbExpect, Mount, NodeConfig
from hpckit.health.context import Context, LocalState
from hpckit.health.gpubench import BenchReport, BenchUnavailable, GpuBench
from hpckit.health.model import ABSENT, Row, Status
from hpckit.health.probe import DiskSpace, ProbeError, ProcInfo
from hpckit.health.recorded import Recorded, RecordedProbe, healthy_node
from hpckit.health.registry import Tier
from hpckit.health.runner import RunOptions, run_checks
from hpckit.hw import parse_ibstat, parse_query_q

HW = Path(__file__).parent / "data" / "hw"
LAB = NodeConfig(gpus=GpuExpect("lab", 4), mounts=(Mount("/shared", "/shared"),))
GIB = 1 << 30


def sample(name: str) -> str:
    return (HW / name).read_text(encoding="utf-8")


def run(
    probe: RecordedProbe,
    config: NodeConfig = LAB,
    tier: Tier = "quick",
    only: tuple[str, ...] = (),
    state_dir: Path | None = None,
) -> list[Row]:
    local = LocalState(str(state_dir) if state_dir else None)
    rows = run_checks(Context(probe, config, tier, local), RunOptions(tier, only=only))
    local.commit()
    return rows


def by(rows: list[Row], check: str) -> list[Row]:
    return [r for r in rows if r.check == check]


def one(rows: list[Row], check: str, metric: str | None = None) -> Row:
    found = [r for r in by(rows, check) if metric is None or r.metric == metric]
    assert len(found) == 1, found
    return found[0]


def statuses(rows: list[Row]) -> dict[tuple[str, str], Status]:
    return {(r.check, r.metric): r.status for r in rows}


# --- a healthy lab node ---------------------------------------------------------------------------------


def test_healthy_lab_node_is_ok_and_gpu_checks_say_absent() -> None:
    rows = run(healthy_node())
    bad = [r for r in rows if r.status != Status.OK and r.fault != ABSENT]
    assert bad == []
    assert one(rows, "gpu.count").status == Status.OK and one(rows, "gpu.count").value == 4
    absent = {r.check for r in rows if r.fault == ABSENT}
    assert absent == {"gpu.ecc", "gpu.remap", "gpu.xid", "gpu.pcie", "gpu.clocks", "gpu.nvlink", "host.clock"}
    assert all("no NVIDIA driver tools" in r.evidence for r in rows if r.check.startswith("gpu.") and r.fault)
    assert {r.node for r in rows} == {"node1"} and {r.tier for r in rows} == {"quick"}


def test_nightly_tier_adds_the_heavy_checks_absent_without_gpus() -> None:
    rows = run(healthy_node(), tier="nightly")
    for check in ("gpu.gemm", "gpu.copy", "gpu.nccl"):
        (row,) = by(rows, check)
        assert (row.status, row.fault) == (Status.UNKNOWN, ABSENT)


def test_cpu_node_gets_no_gpu_rows() -> None:
    probe = healthy_node()
    probe.files["/etc/slurm/slurm.conf"] = "NodeName=node1 CPUs=2 RealMemory=1000\n"
    probe.dirs["/dev"] = ["null"]
    rows = run(probe, dataclasses.replace(LAB, gpus=None), tier="nightly")
    assert not [r for r in rows if r.check.startswith("gpu.")]


# --- the lab's planted faults -----------------------------------------------------------------------


def test_removed_gpu_device_fails_the_count_naming_it() -> None:
    probe = healthy_node()
    probe.char_devices.discard("/dev/nvidia2")
    probe.dirs["/dev"].remove("nvidia2")
    row = one(run(probe), "gpu.count")
    assert (row.status, row.fault, row.value) == (Status.FAIL, "gpu-missing", 3)
    assert "/dev/nvidia2" in row.evidence and "3 of 4" in row.evidence


def test_a_regular_file_is_not_a_gpu_device() -> None:
    probe = healthy_node()
    probe.char_devices.discard("/dev/nvidia3")  # still listed in /dev, but not a character device
    assert one(run(probe), "gpu.count").fault == "gpu-missing"


def test_gpu_count_falls_back_to_slurm_conf_gres() -> None:
    probe = healthy_node()
    probe.files["/etc/slurm/slurm.conf"] = "NodeName=node[1-2] CPUs=2 RealMemory=10 Gres=gpu:lab:8\n"
    row = one(run(probe, dataclasses.replace(LAB, gpus=None)), "gpu.count")
    assert row.status == Status.FAIL and "4 of 8" in row.evidence


def test_munge_stopped_fails() -> None:
    probe = healthy_node()
    probe.procs = [p for p in probe.procs if p.comm != "munged"]
    (row,) = by(run(probe), "host.munge")
    assert (row.status, row.fault) == (Status.FAIL, "munge-down")


def test_zombie_munged_is_not_alive() -> None:
    probe = healthy_node()
    probe.procs = [ProcInfo(20, "munged", "Z"), ProcInfo(30, "slurmd", "S")]
    assert by(run(probe), "host.munge")[0].fault == "munge-down"


def test_munge_round_trip_failure_and_its_evidence() -> None:
    probe = healthy_node()
    probe.commands[("unmunge",)] = Recorded("STATUS:          Expired credential (15)\n", rc=15)
    row = one(run(probe), "host.munge", "roundtrip")
    assert (row.status, row.fault) == (Status.FAIL, "munge-roundtrip")
    assert "exited 15" in row.evidence


def test_munge_round_trip_timeout_is_unknown() -> None:
    probe = healthy_node()
    probe.commands[("munge", "-n")] = Recorded(timed_out=True)
    row = one(run(probe), "host.munge", "roundtrip")
    assert (row.status, row.fault) == (Status.UNKNOWN, "munge-timeout")
    assert probe.calls.count(("munge", "-n")) == 1  # one UNKNOWN row among OK rows: not retried


def test_slurmd_missing_fails() -> None:
    probe = healthy_node()
    probe.procs = [p for p in probe.procs if p.comm != "slurmd"]
    assert one(run(probe), "host.slurmd").fault == "slurmd-down"


def test_shared_fs_read_only_fails_unwritable() -> None:
    probe = healthy_node()
    probe.writes["/shared"] = ProbeError("write test in /shared: Read-only file system")
    row = one(run(probe), "host.mounts")
    assert (row.status, row.fault, row.metric) == (Status.FAIL, "mount-unwritable", "/shared")
    assert "Read-only" in row.evidence


def test_shared_fs_hung_fails_hung() -> None:
    probe = healthy_node()
    probe.writes["/shared"] = ProbeError("write test in /shared: no answer in 10 s", timeout=True)
    assert one(run(probe), "host.mounts").fault == "mount-hung"


def test_shared_fs_not_mounted_fails_missing() -> None:
    probe = healthy_node()
    probe.files["/proc/self/mountinfo"] = "22 1 0:21 / / rw - ext4 /dev/vda rw\n"
    assert one(run(probe), "host.mounts").fault == "mount-missing"


def test_slow_write_warns_with_its_latency() -> None:
    probe = healthy_node()
    probe.writes["/shared"] = 2.5
    row = one(run(probe), "host.mounts")
    assert (row.status, row.fault, row.value, row.upper) == (Status.WARN, "mount-slow", 2.5, 1.0)


def test_mountinfo_escapes() -> None:
    from hpckit.health.checks.host import mount_points

    text = "36 25 0:32 / /mnt/my\\040disk rw - ext4 /dev/vdb rw\n"
    assert mount_points(text) == {"/mnt/my disk"}


@pytest.mark.parametrize(
    ("avail_gib", "total_gib", "status", "fault"),
    [(40, 100, Status.OK, None), (5, 100, Status.WARN, "disk-low"), (1, 100, Status.FAIL, "disk-full")],
)
def test_disk_free(avail_gib: float, total_gib: float, status: Status, fault: str | None) -> None:
    probe = healthy_node()
    probe.disks["/tmp"] = DiskSpace("/tmp", int(total_gib * GIB), int(avail_gib * GIB))
    row = one(run(probe), "host.disk", "tmp")
    assert (row.status, row.fault) == (status, fault)


def test_small_disk_fails_on_absolute_free_space() -> None:
    probe = healthy_node()
    probe.disks["/tmp"] = DiskSpace("/tmp", 2 * GIB, 300 << 20)  # 15 % free but only 300 MiB
    assert one(run(probe), "host.disk", "tmp").fault == "disk-full"


@pytest.mark.parametrize(
    ("avail_mib", "status", "fault"),
    [(483, Status.OK, None), (300, Status.OK, None), (200, Status.FAIL, "disk-full")],
)
def test_a_filesystem_smaller_than_twice_the_floor_is_judged_by_half_its_size(
    avail_mib: int, status: Status, fault: str | None
) -> None:
    """A VM's tmpfs /tmp of 483 MiB (half its memory) failed the 512 MiB floor while empty, and the node rebooted
    into a drain: below twice the floor, the floor is half the filesystem."""
    probe = healthy_node()
    probe.disks["/tmp"] = DiskSpace("/tmp", 483 << 20, avail_mib << 20)
    row = one(run(probe), "host.disk", "tmp")
    assert (row.status, row.fault) == (status, fault)


def test_disk_path_not_created_yet_uses_its_parent() -> None:
    probe = healthy_node()
    config = dataclasses.replace(LAB, disks={"enroot": "/raid/enroot/cache/group-$(id -g)"})
    probe.dirs["/raid"] = ["enroot"]
    probe.disks["/raid"] = DiskSpace("/raid", 100 * GIB, 50 * GIB)
    assert one(run(probe, config), "host.disk", "enroot").status == Status.OK


def test_fewer_cpus_or_memory_than_declared_fails() -> None:
    probe = healthy_node()
    probe.files["/sys/devices/system/cpu/online"] = "0\n"
    probe.files["/proc/meminfo"] = "MemTotal:         512000 kB\n"
    rows = run(probe)
    assert one(rows, "host.resources", "cpus").fault == "cpus-missing"
    mem = one(rows, "host.resources", "memory")
    assert (mem.fault, mem.value, mem.lower) == ("memory-missing", 500, 1000)


def test_node_missing_from_slurm_conf_is_unknown() -> None:
    probe = healthy_node("gpu99")
    row = one(run(probe), "host.resources")
    assert row.status == Status.UNKNOWN and "no NodeName entry for gpu99" in row.evidence


def test_procs_warn_only() -> None:
    probe = healthy_node()
    probe.procs += [ProcInfo(100 + i, "defunct", "Z") for i in range(60)]
    row = one(run(probe), "host.procs", "zombies")
    assert (row.status, row.value) == (Status.WARN, 60)


# chronyc -c tracking, as chronyc(1) documents its CSV fields (no captured sample of it exists here).
CHRONY = (
    "A9FEA97B,169.254.169.123,4,1700000000.1,{offset},-0.000001,0.000030,-2.101,-0.001,0.012,0.000329,0.000012,"
    "64.0,{leap}\n"
)


@pytest.mark.parametrize(
    ("offset", "leap", "status", "fault"),
    [
        ("0.000002", "Normal", Status.OK, None),
        ("-0.500000", "Normal", Status.WARN, "clock-offset"),
        ("120.0", "Normal", Status.FAIL, "clock-offset"),
        ("0.0", "Not synchronised", Status.WARN, "clock-unsynced"),
    ],
)
def test_clock_from_chrony(offset: str, leap: str, status: Status, fault: str | None) -> None:
    probe = healthy_node()
    probe.commands[("chronyc", "-c", "tracking")] = Recorded(CHRONY.format(offset=offset, leap=leap))
    row = one(run(probe), "host.clock")
    assert (row.status, row.fault) == (status, fault)


def test_clock_daemon_not_answering_warns() -> None:
    probe = healthy_node()
    probe.commands[("chronyc", "-c", "tracking")] = Recorded("", 1, "506 Cannot talk to daemon")
    assert one(run(probe), "host.clock").fault == "clock-unsynced"


# --- kernel log and Xids ------------------------------------------------------------------------------


def gpu_node(q_sample: str, dmesg: str = "") -> RecordedProbe:
    probe = healthy_node()
    probe.commands[("nvidia-smi", "-q")] = Recorded(sample(q_sample))
    probe.commands[("dmesg", "--kernel")] = Recorded(dmesg)
    return probe


def h100(count: int) -> NodeConfig:
    return dataclasses.replace(LAB, gpus=GpuExpect("h100-sxm", count))


def test_hardware_xids_fail_and_stay_failed_until_reboot(tmp_path: Path) -> None:
    dmesg = sample("xid/dmesg-xid48-63-94-dbe-row-remap-driver550.txt")
    probe = gpu_node("nvidia-smi/q-h100-sxm5-80gb-driver545.txt", dmesg)
    config = h100(1)
    rows = by(run(probe, config, only=("gpu.xid",), state_dir=tmp_path), "gpu.xid")
    failing = {r.fault for r in rows if r.status == Status.FAIL}
    assert failing == {"xid-48", "xid-63", "xid-94"}
    xid48 = next(r for r in rows if r.fault == "xid-48")
    assert "0000:52:00" in xid48.evidence and "Double Bit ECC" in xid48.evidence
    # The next run reads no new line (the cursor moved past them): the failures stay.
    again = by(run(probe, config, only=("gpu.xid",), state_dir=tmp_path), "gpu.xid")
    assert {r.fault for r in again if r.status == Status.FAIL} == failing
    assert one(again, "gpu.xid", "xids").evidence.startswith("0 Xid events in 0 new")
    # A reboot (new boot id) clears them.
    probe.files["/proc/sys/kernel/random/boot_id"] = "00000000-1111-2222-3333-444444444444\n"
    probe.commands[("dmesg", "--kernel")] = Recorded("[    1.000000] booted again\n")
    after = by(run(probe, config, only=("gpu.xid",), state_dir=tmp_path), "gpu.xid")
    assert [r.status for r in after] == [Status.OK]


def test_xid_79_in_syslog_format() -> None:
    probe = gpu_node("nvidia-smi/q-h100-sxm5-80gb-driver545.txt", sample("xid/syslog-xid79-fallen-off-bus-2016.txt"))
    rows = by(run(probe, h100(1), only=("gpu.xid",)), "gpu.xid")
    assert {r.fault for r in rows if r.status == Status.FAIL} == {"xid-79"}


def test_xid_119_burst_is_one_row_per_gpu() -> None:
    text = sample("xid/dmesg-T-xid119-gsp-rpc-timeout-h100-xe9680.txt")
    rows = by(run(gpu_node("nvidia-smi/q-h100-sxm5-80gb-driver545.txt", text), h100(1), only=("gpu.xid",)), "gpu.xid")
    failing = [r for r in rows if r.status == Status.FAIL]
    assert [r.metric for r in failing] == ["xid119:0000:9b:00"]
    assert one(rows, "gpu.xid", "xids").value == 5


def test_disputed_xid_warns_and_application_xid_passes() -> None:
    probe = gpu_node("nvidia-smi/q-h100-sxm5-80gb-driver545.txt", sample("xid/dmesg-xid32-desktop.txt"))
    rows = by(run(probe, h100(1), only=("gpu.xid",)), "gpu.xid")
    assert {r.status for r in rows if r.fault} == {Status.WARN}
    probe = gpu_node(
        "nvidia-smi/q-h100-sxm5-80gb-driver545.txt", sample("xid/dmesg-decode-iso-xid13-xid43-first30lines.txt")
    )
    rows = by(run(probe, h100(1), only=("gpu.xid",)), "gpu.xid")
    assert [r.status for r in rows] == [Status.OK]


def test_kernel_log_cursor_reads_only_new_lines(tmp_path: Path) -> None:
    probe = healthy_node()
    probe.commands[("dmesg", "--kernel")] = Recorded("[    1.000000] a\n[    2.000000] b\n")
    first = one(run(probe, only=("host.kernel_log",), state_dir=tmp_path), "host.kernel_log")
    assert first.value == 2 and "this boot" in first.evidence
    probe.commands[("dmesg", "--kernel")] = Recorded(
        "[    1.000000] a\n[    2.000000] b\n[    3.000000] EXT4-fs error (device sda1): bad block\n  continued\n"
    )
    rows = by(run(probe, only=("host.kernel_log",), state_dir=tmp_path), "host.kernel_log")
    assert one(rows, "host.kernel_log", "lines").value == 2
    io = one(rows, "host.kernel_log", "io-error")
    assert io.status == Status.WARN and "EXT4-fs error" in io.evidence
    # Warnings are not sticky: the next run has nothing new and nothing to warn about.
    rows = by(run(probe, only=("host.kernel_log",), state_dir=tmp_path), "host.kernel_log")
    assert [r.status for r in rows] == [Status.OK]


def test_kernel_command_line_is_no_fault_and_real_stalls_are(tmp_path: Path) -> None:
    # The boot lines of a real VM whose kernel command line tunes RCU stall reporting, then the stall
    # report format of kernel/rcu/tree_stall.h.
    probe = healthy_node()
    probe.commands[("dmesg", "--kernel")] = Recorded(
        "[    0.000000] Command line: console=ttyS0 quiet nested_pvm=1 rcupdate.rcu_cpu_stall_cputime=1\n"
        "[    0.102190] Kernel command line: console=ttyS0 quiet nested_pvm=1 rcupdate.rcu_cpu_stall_cputime=1\n"
    )
    rows = by(run(probe, only=("host.kernel_log",), state_dir=tmp_path), "host.kernel_log")
    assert [r.status for r in rows] == [Status.OK]
    probe.commands[("dmesg", "--kernel")] = Recorded(
        "[ 5000.000000] rcu: INFO: rcu_preempt detected stalls on CPUs/tasks:\n"
        "[ 5000.100000] rcu: INFO: rcu_sched self-detected stall on CPU\n"
    )
    rows = by(run(probe, only=("host.kernel_log",), state_dir=tmp_path), "host.kernel_log")
    assert one(rows, "host.kernel_log", "hung-task").value == 2


def test_uncorrected_memory_error_fails_and_sticks(tmp_path: Path) -> None:
    probe = healthy_node()
    probe.commands[("dmesg", "--kernel")] = Recorded("[   10.000000] EDAC MC0: 1 UE memory read error on CPU_SrcID#0\n")
    rows = run(probe, only=("host.kernel_log",), state_dir=tmp_path)
    assert one(rows, "host.kernel_log", "memory-uncorrected").status == Status.FAIL
    rows = run(probe, only=("host.kernel_log",), state_dir=tmp_path)
    assert one(rows, "host.kernel_log", "memory-uncorrected").status == Status.FAIL


def test_dry_run_moves_no_cursor(tmp_path: Path) -> None:
    probe = healthy_node()
    run_checks(Context(probe, LAB, "quick", LocalState(str(tmp_path))), RunOptions(only=("host.kernel_log",)))
    assert not list(tmp_path.iterdir())  # nothing committed


def test_unreadable_kernel_log_is_unknown() -> None:
    probe = healthy_node()
    probe.commands[("dmesg", "--kernel")] = Recorded("", 1, "dmesg: read kernel buffer failed: Operation not permitted")
    row = one(run(probe, only=("host.kernel_log",)), "host.kernel_log")
    assert (row.status, row.fault) == (Status.UNKNOWN, "kernel-log-unreadable")


# --- GPU state on recorded nvidia-smi -q --------------------------------------------------------------


def test_eight_h100_node_all_ok_but_one_gpu_power_braking() -> None:
    probe = gpu_node("nvidia-smi/q-8x-h100-80gb-hbm3-driver535.183.01.txt")
    probe.commands[("nvidia-smi", "nvlink", "--status")] = Recorded(
        sample("nvidia-smi/nvlink-s-h100-driver590-masked.txt")
    )
    rows = run(probe, h100(8))
    assert one(rows, "gpu.count").value == 8
    bad = [r for r in rows if r.status != Status.OK and r.check.startswith("gpu.")]
    assert [(r.metric, r.fault) for r in bad] == [("gpu2.clocks", "clocks-hw-power-brake-slowdown")]
    assert "HW Power Brake Slowdown" in bad[0].evidence and "SW Thermal Slowdown" in bad[0].evidence
    assert {r.status for r in by(rows, "gpu.ecc")} == {Status.OK}


def test_gpu_in_a_bad_state_fails_ecc_and_remap() -> None:
    probe = gpu_node("nvidia-smi/q-d-ecc-row-remapper-pending-driver550.txt")
    rows = run(probe, h100(1))
    assert one(rows, "gpu.ecc").fault == "ecc-state" and "Unknown Error" in one(rows, "gpu.ecc").evidence
    remap = one(rows, "gpu.remap")
    assert (remap.status, remap.fault) == (Status.FAIL, "remap-pending")
    assert "0000:52:00.0" in remap.evidence


def test_fewer_gpus_than_declared() -> None:
    rows = run(gpu_node("nvidia-smi/q-h100-sxm5-80gb-driver545.txt"), h100(8))
    row = one(rows, "gpu.count")
    assert (row.status, row.value) == (Status.FAIL, 1) and "1 of 8" in row.evidence


def test_driver_error_fails_count_and_leaves_the_rest_unknown() -> None:
    probe = healthy_node()
    probe.commands[("nvidia-smi", "-q")] = Recorded(
        "Failed to initialize NVML: Driver/library version mismatch\n", rc=18
    )
    rows = run(probe, h100(8))
    assert one(rows, "gpu.count").fault == "gpu-driver"
    assert {r.fault for r in rows if r.check in ("gpu.ecc", "gpu.pcie")} == {"gpu-driver-error"}


def test_pcie_under_load_and_idle() -> None:
    loaded = run(gpu_node("nvidia-smi/q-h100-80gb-hbm3-driver590-under-load-masked.txt"), h100(1))
    assert {r.status for r in by(loaded, "gpu.pcie")} == {Status.OK}
    text = sample("nvidia-smi/q-h100-80gb-hbm3-driver590-under-load-masked.txt")
    narrowed = text.replace(
        "Current                                : 16x", "Current                                : 8x"
    )
    assert narrowed != text  # the mutation took
    probe = healthy_node()
    probe.commands[("nvidia-smi", "-q")] = Recorded(narrowed)
    row = one(run(probe, h100(1)), "gpu.pcie", "gpu0.width")
    assert (row.status, row.fault) == (Status.FAIL, "pcie-width")


def test_mig_gpu_without_row_remapper_is_fine() -> None:
    rows = run(gpu_node("nvidia-smi/q-h100-mig-enabled-driver590-idle-masked.txt"), h100(1))
    assert not [r for r in rows if r.check.startswith("gpu.") and r.status in (Status.FAIL, Status.WARN)]


def test_nvlink_all_up_and_one_down() -> None:
    probe = gpu_node("nvidia-smi/q-8x-h100-80gb-hbm3-driver535.183.01.txt")
    text = sample("nvidia-smi/nvlink-status-8x-a100-sxm4-80gb.txt")
    probe.commands[("nvidia-smi", "nvlink", "--status")] = Recorded(text)
    assert {r.status for r in by(run(probe, h100(8)), "gpu.nvlink")} == {Status.OK}
    lines = text.splitlines(keepends=True)
    link = next(i for i, line in enumerate(lines) if "Link 3:" in line)
    lines[link] = lines[link].split("Link 3:")[0] + "Link 3: <inactive>\n"
    probe.commands[("nvidia-smi", "nvlink", "--status")] = Recorded("".join(lines))
    down = [r for r in by(run(probe, h100(8)), "gpu.nvlink") if r.status != Status.OK]
    assert [(r.metric, r.status, r.fault) for r in down] == [("gpu0.nvlink", Status.FAIL, "nvlink-down")]
    assert "NVLink 3 down (11 of 12 up)" in down[0].evidence


# --- NVML: the same GPUs through the NVML binding ------------------------------------------------------


class _NotSupported(Exception):
    pass


class FakeNvml:
    """pynvml's functions answering with the values of a recorded `nvidia-smi -q` (NVML is what nvidia-smi
    itself reads, so these are the values NVML returned on that machine)."""

    NVMLError_NotSupported = _NotSupported

    def __init__(self, q_text: str, nvlink_up: int = 18) -> None:
        self.gpus = parse_query_q(q_text)
        self.nvlink_up = nvlink_up

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetName(self, h: int) -> bytes:
        return (self.gpus[h].product_name or "").encode()

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return self.gpus[h].uuid or ""

    def nvmlDeviceGetPciInfo(self, h: int) -> Any:
        return type("Pci", (), {"busId": self.gpus[h].bus_id.encode()})()

    def nvmlDeviceGetEccMode(self, h: int) -> tuple[int, int]:
        g = self.gpus[h]
        return int(g.ecc_mode_current == "Enabled"), int(g.ecc_mode_pending == "Enabled")

    def nvmlDeviceGetTotalEccErrors(self, h: int, kind: int, counter: int) -> int:
        counts = self.gpus[h].ecc_volatile if counter == 0 else self.gpus[h].ecc_aggregate
        if counts is None:
            raise _NotSupported()
        value = counts.uncorrectable if kind == 1 else counts.correctable
        return value or 0

    def nvmlDeviceGetRemappedRows(self, h: int) -> tuple[int, int, int, int]:
        r = self.gpus[h].remapped_rows
        if r is None:
            raise _NotSupported()
        return r.correctable or 0, r.uncorrectable or 0, int(bool(r.pending)), int(bool(r.failure))

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h: int) -> int | None:
        return self.gpus[h].pcie_gen_current

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h: int) -> int | None:
        return self.gpus[h].pcie_gen_max

    def nvmlDeviceGetCurrPcieLinkWidth(self, h: int) -> int | None:
        return self.gpus[h].pcie_width_current

    def nvmlDeviceGetMaxPcieLinkWidth(self, h: int) -> int | None:
        return self.gpus[h].pcie_width_max

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: int) -> int:
        from hpckit.hw.nvml import CLOCK_EVENT_BITS

        active = set(self.gpus[h].active_clocks_event_reasons)
        return sum(bit for bit, name in CLOCK_EVENT_BITS.items() if name in active)

    def nvmlDeviceGetUtilizationRates(self, h: int) -> Any:
        return type("Util", (), {"gpu": self.gpus[h].utilization_gpu_pct})()

    def nvmlDeviceGetPerformanceState(self, h: int) -> int:
        return int((self.gpus[h].performance_state or "P0")[1:])

    def nvmlDeviceGetNvLinkState(self, h: int, link: int) -> int:
        if link >= 18:
            raise _NotSupported()
        return int(link < self.nvlink_up)


def _verdicts(rows: list[Row]) -> set[tuple[Any, ...]]:
    return {(r.check, r.metric, r.status, r.fault) for r in rows if r.check.startswith("gpu.")}


def test_nvml_path_gives_the_same_verdicts_as_nvidia_smi() -> None:
    q = "nvidia-smi/q-8x-h100-80gb-hbm3-driver535.183.01.txt"
    smi = gpu_node(q)
    smi.commands[("nvidia-smi", "nvlink", "--status")] = Recorded(
        "".join(
            f"GPU {i}: NVIDIA H100 80GB HBM3 (UUID: x)\n" + "".join(f"\t Link {n}: 26.562 GB/s\n" for n in range(18))
            for i in range(8)
        )
    )
    nvml = gpu_node(q)
    nvml.nvml_module = FakeNvml(sample(q))
    from_smi, from_nvml = run(smi, h100(8)), run(nvml, h100(8))
    assert _verdicts(from_smi) == _verdicts(from_nvml)
    assert "NVML" in one(from_nvml, "gpu.count").evidence
    assert ("nvidia-smi", "-q") not in nvml.calls  # NVML first: the slow tool is not run


def test_nvml_nvlink_down() -> None:
    probe = gpu_node("nvidia-smi/q-h100-sxm5-80gb-driver545.txt")
    probe.nvml_module = FakeNvml(sample("nvidia-smi/q-h100-sxm5-80gb-driver545.txt"), nvlink_up=16)
    row = one(run(probe, h100(1)), "gpu.nvlink")
    assert (row.status, row.fault, row.value) == (Status.FAIL, "nvlink-down", 16)


def test_nvml_lost_gpu_is_a_driver_error() -> None:
    class Lost(FakeNvml):
        def nvmlDeviceGetName(self, h: int) -> bytes:
            raise RuntimeError("GPU is lost")

    probe = healthy_node()
    probe.nvml_module = Lost(sample("nvidia-smi/q-h100-sxm5-80gb-driver545.txt"))
    assert one(run(probe, h100(1)), "gpu.count").fault == "gpu-driver"


# --- InfiniBand on recorded ibstat ---------------------------------------------------------------------


def ib_node(ibstat: str) -> RecordedProbe:
    probe = healthy_node()
    probe.ports = [p for ca in parse_ibstat(sample(ibstat)) for p in ca.ports]
    return probe


IB_HCAS = ("mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11")


def test_ib_declared_hcas_active_at_rate() -> None:
    config = dataclasses.replace(LAB, infiniband=IbExpect(IB_HCAS, 400.0))
    rows = by(run(ib_node("infiniband/ibstat-h100-node-cx7-some-ports-down.txt"), config), "ib.ports")
    assert len(rows) == 8 and {r.status for r in rows} == {Status.OK}


def test_ib_port_down_and_rate_low() -> None:
    config = dataclasses.replace(LAB, infiniband=IbExpect(("mlx5_0", "mlx5_2"), 800.0))
    rows = by(run(ib_node("infiniband/ibstat-h100-node-cx7-some-ports-down.txt"), config), "ib.ports")
    got = {r.metric: (r.status, r.fault) for r in rows}
    assert got == {"mlx5_0/1": (Status.FAIL, "ib-rate"), "mlx5_2/1": (Status.FAIL, "ib-port-down")}
    assert "Disabled" in next(r.evidence for r in rows if r.metric == "mlx5_2/1")


def test_ib_roce_ports() -> None:
    hcas = ("mlx5_0", "mlx5_3")
    sample_name = "infiniband/ibstat-h100-node-cx7-ndr400-all-active.txt"
    roce = dataclasses.replace(LAB, infiniband=IbExpect(hcas, 400.0, roce=True))
    assert {r.status for r in by(run(ib_node(sample_name), roce), "ib.ports")} == {Status.OK}
    ib = dataclasses.replace(LAB, infiniband=IbExpect(hcas, 400.0))
    assert {r.fault for r in by(run(ib_node(sample_name), ib), "ib.ports")} == {"ib-link-layer"}


def test_ib_hca_missing_from_a_cut_short_ibstat() -> None:
    config = dataclasses.replace(LAB, infiniband=IbExpect(("mlx5_0", "mlx5_8"), 200.0))
    rows = by(run(ib_node("infiniband/ibstat-a100-azure-cx6-ibpanic-partial-exit255.txt"), config), "ib.ports")
    assert {r.metric: r.fault for r in rows} == {"mlx5_0/1": None, "mlx5_8": "ib-hca-missing"}


def test_no_ib_declared_no_ib_rows() -> None:
    assert not [r for r in run(healthy_node()) if r.check.startswith("ib.")]


def _sysfs_port(root: Path, ca: str, link_downed: int) -> None:
    port = root / ca / "ports" / "1"
    (port / "counters").mkdir(parents=True, exist_ok=True)
    files = {"state": "4: ACTIVE", "phys_state": "5: LinkUp", "rate": "400 Gb/sec (4X NDR)", "link_layer": "InfiniBand"}
    for name, text in files.items():
        (port / name).write_text(text + "\n")
    (port / "counters" / "link_downed").write_text(f"{link_downed}\n")


def test_ib_link_flap_counter_from_sysfs(tmp_path: Path) -> None:
    from hpckit.health.probe import LocalProbe

    sysfs, state = tmp_path / "sys", tmp_path / "state"
    _sysfs_port(sysfs, "mlx5_0", 3)
    config = dataclasses.replace(LAB, infiniband=IbExpect(("mlx5_0",), 400.0), state_dir=str(state))

    def ib_rows() -> list[Row]:
        ctx = Context(LocalProbe("node1", sysfs_ib=str(sysfs)), config, "quick", LocalState(str(state)))
        rows = run_checks(ctx, RunOptions(only=("ib.ports", "ib.link_errors")))
        ctx.local.commit()
        return rows

    first = ib_rows()
    assert {(r.check, r.status) for r in first} == {("ib.ports", Status.OK), ("ib.link_errors", Status.OK)}
    _sysfs_port(sysfs, "mlx5_0", 5)
    flapped = one(ib_rows(), "ib.link_errors")
    assert (flapped.status, flapped.fault) == (Status.WARN, "ib-link-flap") and "3 -> 5" in flapped.evidence


# --- the heavy tier -----------------------------------------------------------------------------------


def bench(tflops: float, copy: float, busbw: float | None) -> BenchReport:
    gpus = tuple(GpuBench(i, "NVIDIA H100 80GB HBM3", tflops, copy) for i in range(8))
    return BenchReport(gpus, busbw, "8 GPUs, 256 MiB all_reduce")


def heavy_rows(report: BenchReport | Exception) -> list[Row]:
    probe = gpu_node("nvidia-smi/q-8x-h100-80gb-hbm3-driver535.183.01.txt")
    probe.bench = report
    return run(probe, h100(8), "nightly", only=("gpu.gemm", "gpu.copy", "gpu.nccl"))


def test_heavy_tier_healthy_h100() -> None:
    rows = heavy_rows(bench(700.0, 2900.0, 380.0))
    assert {r.status for r in rows} == {Status.OK} and len(rows) == 17
    gemm = one(rows, "gpu.gemm", "gpu0.tflops")
    assert gemm.expected == pytest.approx(989 * 0.65) and gemm.lower == pytest.approx(989 * 0.65 * 0.9)
    assert one(rows, "gpu.nccl").expected == 370


def test_heavy_tier_slow_gpu_fails() -> None:
    report = bench(700.0, 2900.0, 380.0)
    slow = dataclasses.replace(report.gpus[5], gemm_tflops=300.0)
    rows = heavy_rows(dataclasses.replace(report, gpus=(*report.gpus[:5], slow, *report.gpus[6:])))
    bad = [r for r in rows if r.status != Status.OK]
    assert [(r.metric, r.fault) for r in bad] == [("gpu5.tflops", "gemm-slow")]


def test_heavy_tier_slow_copy_and_nccl() -> None:
    rows = heavy_rows(bench(700.0, 1000.0, 100.0))
    assert {r.fault for r in rows if r.status == Status.FAIL} == {"copy-slow", "nccl-slow"}


def test_heavy_tier_without_torch_is_absent() -> None:
    rows = heavy_rows(BenchUnavailable("torch is not installed in hpckit's environment"))
    assert {(r.status, r.fault) for r in rows} == {(Status.UNKNOWN, ABSENT)}
    assert "torch is not installed" in rows[0].evidence


def test_single_gpu_has_no_allreduce() -> None:
    rows = heavy_rows(BenchReport((GpuBench(0, "H100", 700.0, 2900.0),), None, "one GPU: no all_reduce to measure"))
    assert one(rows, "gpu.nccl").fault == ABSENT


def test_bench_formulas() -> None:
    from hpckit.health.gpubench import allreduce_busbw_gbps, copy_gbps, gemm_tflops

    assert gemm_tflops(8192, 50, 0.1) == pytest.approx(2 * 8192**3 * 50 / 0.1 / 1e12)
    assert copy_gbps(1 << 30, 20, 1.0) == pytest.approx(2 * (1 << 30) * 20 / 1e9)
    # nccl-tests: 8 ranks, busbw = algbw x 2 x 7/8
    assert allreduce_busbw_gbps(1_000_000_000, 8, 0.01) == pytest.approx(100 * 2 * 7 / 8)


def test_bench_unavailable_without_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    from hpckit.health import gpubench

    monkeypatch.setattr(gpubench.os.path, "exists", lambda path: False)
    with pytest.raises(BenchUnavailable, match="no NVIDIA driver"):
        gpubench.run_local_bench(4)
