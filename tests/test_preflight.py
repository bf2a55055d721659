"""Preflight without hosts: parsers and comparisons on recorded output, the report, the CLI on replayed probes."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from hpckit.blueprint import load_blueprint, parse_blueprint
from hpckit.clusters import SshAccess
from hpckit.deploy.targets import Target
from hpckit.hardware import hardware_table
from hpckit.hw import IbPort, parse_ibstat, parse_ibstatus, parse_query_q
from hpckit.preflight import compare, facts
from hpckit.preflight.compare import Context, build_report, gpu_rows, host_rows, ib_rows
from hpckit.preflight.expect import HostPlan, MountNeed, expectations
from hpckit.preflight.model import Report, Row, Severity
from hpckit.preflight.probes import HostProbes, Probe, ProbeResult, probe_hosts, probes_for
from hpckit.proc import CommandResult, TransportError
from tests.fakes import FakeTransport

DATA = Path(__file__).parent / "data" / "preflight"
REC = DATA / "recorded"
H100_HCAS = ["mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11"]


def text(rel: str) -> str:
    return (DATA / rel).read_text()


def result(name: str, stdout: str = "", rc: int = 0, stderr: str = "", at: float = 1000.0) -> ProbeResult:
    return ProbeResult(Probe(name, (name,)), rc, stdout, stderr, at, at + 0.2)


# --- parsers on recorded output -----------------------------------------------------------------------------


def test_os_release_of_a_lab_node() -> None:
    seen = facts.os_release(text("recorded/lab-node-os.txt"))
    assert (seen.id, seen.version_id, seen.pretty) == ("debian", "12", "Debian GNU/Linux 12 (bookworm)")


@pytest.mark.parametrize(
    ("name", "cpus", "sockets", "cores", "layout"),
    [
        ("lscpu-parse-lab-node-1socket-2cores.txt", 2, 1, 2, "1 x 2 x 1"),
        ("lscpu-p-i7-2600-1socket-4cores-2threads.txt", 8, 1, 4, "1 x 4 x 2"),
    ],
)
def test_cpu_layout_from_both_lscpu_formats(name: str, cpus: int, sockets: int, cores: int, layout: str) -> None:
    seen = facts.cpu_layout(text(f"lscpu/{name}"))
    assert (seen.cpus, seen.sockets, seen.cores, seen.describe()) == (cpus, sockets, cores, layout)


def test_memory_accounts_clock_and_devices_of_a_lab_node() -> None:
    assert facts.mem_total_mb(text("recorded/lab-node-memory.txt")) == 24684100 // 1024
    users = facts.passwd_accounts(text("recorded/lab-node-users.txt"))
    assert users["slurm"] == facts.Account("slurm", 64030, 64030) and users["munge"].id == 103
    assert facts.group_accounts(text("recorded/lab-node-groups.txt"))["munge"] == facts.Account("munge", 106)
    assert facts.clock_state(text("recorded/lab-node-time_sync.txt")) == 5
    assert facts.epoch(text("recorded/lab-node-clock.txt")) == pytest.approx(1795241938.633831365)
    assert facts.device_files(text("recorded/lab-node-gpu_devices.txt")) == [f"/dev/nvidia{i}" for i in range(8)]


def test_disk_usage_of_the_asked_paths() -> None:
    node = facts.disk_usage(text("recorded/lab-node-disk.txt"))
    assert set(node) == {"/var/spool/slurmd", "/raid/enroot/cache", "/raid/enroot/data"}
    assert node["/raid/enroot/cache"] == facts.DiskSeen("/raid/enroot/cache", "ext4", 81050964, "/")
    ctl = facts.disk_usage(text("recorded/lab-controller-disk.txt"))
    assert ctl["/var/lib/mysql"].mount == "/var/lib/mysql" and ctl["/var/lib/mysql"].fstype == "overlay"


def test_sysfs_dump_reads_like_ibstatus() -> None:
    """The sysfs probe prints the files ibstatus prints; the recorded ibstatus values, dumped the way the probe
    dumps sysfs, give the same ports back."""
    recorded = parse_ibstatus(text("infiniband/ibstatus-a100-azure-hdr200-all-active.txt"))
    raw = text("infiniband/ibstatus-a100-azure-hdr200-all-active.txt")
    values = dict(re.findall(r"^\s+(state|phys state|rate|link_layer):\s+(.*)$", raw.split("\n\n")[0], re.M))
    lines = []
    for port in recorded:
        for attr, name in (("state", "state"), ("phys_state", "phys state"), ("rate", "rate"), ("link_layer", "")):
            value = values[name or "link_layer"]
            if attr == "rate":
                value = f"{port.rate_gbps:g} Gb/sec ({port.width_speed})"
            elif attr == "link_layer":
                value = port.link_layer or ""
            lines.append(f"{port.ca}/ports/{port.port}/{attr}:{value}")
    dumped = facts.ib_ports_from_sysfs("\n".join(lines) + "\n")
    key = [(p.ca, p.port, p.state, p.rate_gbps, p.link_layer, p.physical_state) for p in recorded]
    assert [(p.ca, p.port, p.state, p.rate_gbps, p.link_layer, p.physical_state) for p in dumped] == key
    assert facts.ib_ports_from_sysfs("") == []


@pytest.mark.parametrize(
    ("bad", "parse"),
    [
        ("NAME=x\n", facts.os_release),
        ("# CPU,Core,Socket\n0,zero,0\n", facts.cpu_layout),
        ("MemFree: 1 kB\n", facts.mem_total_mb),
        ("slurm:x:abc:1::/:/bin/false\n", facts.passwd_accounts),
        ("Traceback (most recent call last):\n", facts.clock_state),
        ("Thu Nov 21\n", facts.epoch),
        ("/var/spool/slurmd df: /x: No such file\n", facts.disk_usage),
        ("mlx5_0 state ACTIVE\n", facts.ib_ports_from_sysfs),
    ],
)
def test_unreadable_output_is_a_clear_error(bad: str, parse: object) -> None:
    with pytest.raises(facts.FactError) as err:
        parse(bad)  # type: ignore[operator]
    assert ":" in str(err.value)


# --- comparisons on recorded output ---------------------------------------------------------------------------

LAB = """\
name: t
provider: {type: lab, subnet: 10.77.9.0/24, bridge: hpckt9}
controller: {host: ctl, address: 10.77.9.10}
login: [{host: login, address: 10.77.9.11}]
partitions:
  - name: gpu
    nodes: node1
    addresses: [10.77.9.21]
    hardware: {cpus: 2, cores_per_socket: 2, memory_mb: 1000, gpus: {type: lab, count: 8}}
filesystems:
  - {type: nfs, name: shared, server: ctl, export: /srv/shared, mount: /shared}
"""


def recorded_node(**replace: ProbeResult) -> HostProbes:
    results = {
        "os": result("os", text("recorded/lab-node-os.txt")),
        "users": result("users", text("recorded/lab-node-users.txt")),
        "groups": result("groups", text("recorded/lab-node-groups.txt")),
        "time_sync": result("time_sync", text("recorded/lab-node-time_sync.txt")),
        "clock": result("clock", "1000.1\n"),
        "cpu": result("cpu", text("lscpu/lscpu-parse-lab-node-1socket-2cores.txt")),
        "memory": result("memory", text("recorded/lab-node-memory.txt")),
        "gpus": result("gpus", rc=127, stderr="bash: line 1: nvidia-smi: command not found\n"),
        "gpu_devices": result("gpu_devices", text("recorded/lab-node-gpu_devices.txt")),
        "ib": result("ib", rc=2),
        "disk": result("disk", text("recorded/lab-node-disk.txt")),
        "mounts": result("mounts", "/ ext4\n/shared ext4\n"),
    }
    results.update(replace)
    return HostProbes("node1", "10.77.9.21", results)


def by_check(rows: list[Row]) -> dict[str, Row]:
    return {r.check: r for r in rows}


def lab_rows(**replace: ProbeResult) -> dict[str, Row]:
    exp = expectations(parse_blueprint(LAB))
    plan = next(p for p in exp.plans if p.host == "node1")
    return by_check(host_rows(plan, recorded_node(**replace), Context(emulated=True)))


def test_lab_node_declaring_less_than_it_has_passes() -> None:
    rows = lab_rows()
    assert (rows["cpus"].severity, rows["cpus"].expected, rows["cpus"].found) == (Severity.OK, "at least 2", "2")
    assert rows["memory"].severity is Severity.OK and rows["memory"].found == "24105 MB"
    assert rows["cpu layout"].severity is Severity.OK
    assert rows["os"].severity is Severity.OK and rows["uid slurm"].severity is Severity.WARN  # no reference given
    assert rows["gpu devices"].severity is Severity.OK and rows["gpu devices"].found == "/dev/nvidia[0-7]"
    assert rows["mount shared"].severity is Severity.OK
    assert rows["time sync"].severity is Severity.WARN and "TIME_ERROR" in rows["time sync"].found


def test_lab_gpus_and_fabric_are_absent_not_passing() -> None:
    rows = lab_rows()
    assert rows["gpus"].severity is Severity.ABSENT
    assert rows["gpus"].found.startswith("absent: nvidia-smi not found")
    assert rows["infiniband"].severity is Severity.ABSENT and rows["infiniband"].found == "absent"


def test_the_same_node_against_h100_declarations_blocks(repo: Path) -> None:
    bp = load_blueprint(repo / "blueprints" / "h100-ib.yaml")
    plan = next(p for p in expectations(bp).plans if p.host == "gpu001")
    rows = by_check(host_rows(plan, recorded_node(), Context(emulated=False)))
    for check in ("cpus", "cpu layout", "memory", "gpus", "infiniband"):
        assert rows[check].severity is Severity.BLOCK, check
    assert rows["gpu devices"].severity is Severity.OK  # the recorded node has 8 device files
    assert rows["gpus"].found.endswith("no working NVIDIA driver")
    assert rows["infiniband"].found == "absent: no /sys/class/infiniband"
    assert rows["disk /raid/enroot/cache"].severity is Severity.OK  # 77 GiB free on local ext4


def test_more_cpus_declared_in_another_shape_warns() -> None:
    rows = lab_rows(cpu=result("cpu", text("lscpu/lscpu-p-i7-2600-1socket-4cores-2threads.txt")))
    assert rows["cpus"].severity is Severity.OK and rows["cpus"].found == "8"
    assert rows["cpu layout"].severity is Severity.WARN and rows["cpu layout"].found == "1 x 4 x 2"


class _Collect(compare._Rows):
    def __init__(self) -> None:
        super().__init__(HostPlan("gpu001", "10.0.0.1", "compute"))


def gpu_check(
    seen: list[facts.GpuSeen], gpu_type: str = "h100-sxm", count: int = 8, driver: str = ""
) -> dict[str, Row]:
    rows = _Collect()
    gpu_rows(rows, seen, gpu_type, count, driver, "nvidia-smi", hardware_table())
    return by_check(rows.rows)


def test_eight_h100_from_nvidia_smi_q() -> None:
    seen = facts.gpus_from_query(parse_query_q(text("nvidia-smi/q-8x-h100-80gb-hbm3-driver535.183.01.txt")))
    rows = gpu_check(seen)
    assert (rows["gpus"].severity, rows["gpus"].found) == (Severity.OK, "8 x NVIDIA H100 80GB HBM3")
    assert (rows["gpu driver"].severity, rows["gpu driver"].found) == (Severity.OK, "535.183.01")
    assert gpu_check(seen, driver="535.183.01")["gpu driver"].severity is Severity.OK
    pinned = gpu_check(seen, driver="550.127.08")["gpu driver"]
    assert (pinned.severity, pinned.expected) == (Severity.BLOCK, "550.127.08")
    assert gpu_check(seen, gpu_type="h200-sxm")["gpus"].severity is Severity.BLOCK
    assert gpu_check(seen, count=4)["gpus"].severity is Severity.WARN  # Slurm schedules only 4 of 8
    assert "gpu mig" not in rows


def test_csv_of_one_h100_and_of_two_rtx_pro() -> None:
    one = facts.gpus_from_csv(text("nvidia-smi/query-gpu-csv-allfields-h100-driver590-idle-masked.txt"))
    assert one == [facts.GpuSeen(0, "NVIDIA H100 80GB HBM3", "590.48.01", False)]
    assert gpu_check(one, count=1)["gpus"].severity is Severity.OK
    assert gpu_check(one)["gpus"].severity is Severity.BLOCK  # 1 of 8
    two = facts.gpus_from_csv(text("nvidia-smi/query-gpu-csv-2x-rtxpro6000-blackwell-power-ecc.txt"))
    rows = gpu_check(two)
    assert rows["gpus"].found == "2 x NVIDIA RTX PRO 6000 Blackwell Server Edition"
    assert rows["gpus"].severity is Severity.BLOCK
    assert gpu_check(two, gpu_type="rtx-pro-6000", count=2)["gpus"].severity is Severity.OK
    assert rows["gpu driver"].found == "unknown"  # that query did not ask for driver_version


def test_mig_enabled_warns() -> None:
    seen = facts.gpus_from_query(parse_query_q(text("nvidia-smi/q-h100-mig-enabled-driver590-idle-masked.txt")))
    rows = gpu_check(seen, count=len(seen))
    assert rows["gpu mig"].severity is Severity.WARN and rows["gpus"].severity is Severity.OK


def ib_check(ports: list[IbPort], hcas: list[str], rate: int = 400, roce: bool = False) -> dict[str, Row]:
    rows = _Collect()
    ib_rows(rows, ports, hcas, rate, roce, False, "ibstat")
    return by_check(rows.rows)


def ibstat_ports(name: str) -> list[IbPort]:
    return [p for ca in parse_ibstat(text(f"infiniband/{name}")) for p in ca.ports]


def test_h100_node_with_its_eight_ndr_ports_up() -> None:
    rows = ib_check(ibstat_ports("ibstat-h100-node-cx7-some-ports-down.txt"), H100_HCAS)
    assert {r.severity for r in rows.values()} == {Severity.OK}
    assert rows["ib mlx5_0"].found == "ACTIVE 400 Gb/s InfiniBand"
    down = ib_check(ibstat_ports("ibstat-h100-node-cx7-some-ports-down.txt"), ["mlx5_2", "mlx5_12"])
    assert (down["ib mlx5_2"].severity, down["ib mlx5_2"].found) == (Severity.BLOCK, "DOWN 40 Gb/s Ethernet")
    assert (down["ib mlx5_12"].severity, down["ib mlx5_12"].found) == (Severity.BLOCK, "absent")


def test_roce_node_is_wrong_for_infiniband_and_right_for_roce() -> None:
    ports = ibstat_ports("ibstat-h100-node-cx7-ndr400-all-active.txt")
    assert {r.severity for r in ib_check(ports, H100_HCAS).values()} == {Severity.BLOCK}
    assert {r.severity for r in ib_check(ports, H100_HCAS, roce=True).values()} == {Severity.OK}


def test_hdr_ports_against_hdr_and_ndr() -> None:
    ports = parse_ibstatus(text("infiniband/ibstatus-a100-azure-hdr200-all-active.txt"))
    hcas = [f"mlx5_{i}" for i in range(8)]
    assert {r.severity for r in ib_check(ports, hcas, rate=200).values()} == {Severity.OK}
    assert {r.severity for r in ib_check(ports, hcas, rate=400).values()} == {Severity.BLOCK}


def test_account_ids_follow_the_controller() -> None:
    exp = expectations(parse_blueprint(LAB))
    ctl = recorded_node()
    other = recorded_node(users=result("users", "slurm:x:64030:64030::/:/bin/false\nmunge:x:999:999::/:/bin/false\n"))
    bare = recorded_node(users=result("users", "", rc=2), groups=result("groups", "", rc=2))
    probes = {"ctl": ctl, "login": other, "node1": bare}
    report = build_report(exp, probes)
    rows = {(r.host, r.check): r for r in report.rows}
    assert rows[("ctl", "uid munge")].severity is Severity.OK
    munge = rows[("login", "uid munge")]
    assert (munge.severity, munge.expected, munge.found) == (Severity.BLOCK, "103:106 as on ctl", "999:999")
    assert rows[("login", "uid slurm")].severity is Severity.OK
    absent = rows[("node1", "gid slurm")]
    assert absent.severity is Severity.WARN and absent.found.startswith("absent: create it as 64030")


def test_clock_offset_against_this_machine() -> None:
    def offset(remote: float) -> Row:
        return lab_rows(clock=result("clock", f"{remote}\n", at=1000.0))["clock"]

    assert offset(1000.1).severity is Severity.OK
    assert (offset(1005.1).severity, offset(1005.1).found) == (Severity.WARN, "+5.0 s")
    assert offset(1400.0).severity is Severity.BLOCK  # past munge's credential lifetime
    assert offset(600.0).severity is Severity.BLOCK


def test_disk_thresholds_and_network_filesystems(repo: Path) -> None:
    bp = load_blueprint(repo / "blueprints" / "h100-ib.yaml")
    plan = next(p for p in expectations(bp).plans if p.host == "gpu001")
    line = "{path} srv:/x {fstype} 1000 10 {kib} 1% /raid\n"
    dump = line.format(path="/raid/enroot/cache", fstype="nfs4", kib=900 * 2**20) + line.format(
        path="/raid/enroot/data", fstype="xfs", kib=20 * 2**20
    )
    dump += "/var/spool/slurmd /dev/sda1 ext4 1000 10 10000 1% /\n"
    rows = by_check(host_rows(plan, recorded_node(disk=result("disk", dump)), Context(emulated=False)))
    assert rows["disk /raid/enroot/cache"].severity is Severity.BLOCK  # enroot on NFS
    assert rows["disk /raid/enroot/data"].severity is Severity.WARN  # 20 GiB < 50
    assert rows["disk /var/spool/slurmd"].severity is Severity.BLOCK  # 10 MB
    assert rows["disk /var/spool/slurmd"].command == "df -h /"


def test_existing_filesystem_must_be_mounted_with_its_type(repo: Path) -> None:
    bp = load_blueprint(repo / "blueprints" / "h100-ib.yaml")
    plan = next(p for p in expectations(bp).plans if p.host == "login01")
    assert [m.name for m in plan.mounts] == ["scratch"]  # home is NFS: mounted by the deploy itself

    def check(mounts: str) -> Row:
        probes = HostProbes("login01", "10.10.0.11", {"mounts": result("mounts", mounts)})
        return by_check(host_rows(plan, probes, Context(emulated=False)))["mount scratch"]

    assert check("/ ext4\n/lustre lustre\n").severity is Severity.OK
    assert (check("/ ext4\n").severity, check("/ ext4\n").found) == (Severity.BLOCK, "not mounted")
    assert check("/lustre nfs4\n").severity is Severity.BLOCK


def test_unreachable_host_is_one_blocking_row() -> None:
    plan = HostPlan("node3", "10.77.9.23", "compute")
    rows = host_rows(plan, HostProbes("node3", "10.77.9.23", unreachable="cannot reach node3"), Context(False))
    assert [(r.check, r.severity) for r in rows] == [("ssh", Severity.BLOCK)]


def test_unsupported_or_mixed_os() -> None:
    rhel = 'NAME="Rocky Linux"\nID="rocky"\nVERSION_ID="9.3"\nPRETTY_NAME="Rocky Linux 9.3 (Blue Onyx)"\n'
    assert lab_rows(os=result("os", rhel))["os"].severity is Severity.BLOCK
    exp = expectations(parse_blueprint(LAB))
    jammy = 'NAME="Ubuntu"\nVERSION_ID="22.04"\nID=ubuntu\nPRETTY_NAME="Ubuntu 22.04.4 LTS"\n'
    report = build_report(exp, {"ctl": recorded_node(), "node1": recorded_node(os=result("os", jammy))})
    rows = {(r.host, r.check): r for r in report.rows}
    assert rows[("node1", "os")].severity is Severity.WARN and "as on ctl" in rows[("node1", "os")].expected


# --- probes, report, CLI -------------------------------------------------------------------------------------


@dataclass
class Replay(FakeTransport):
    """A connection that answers each probe from recorded output (or is unreachable)."""

    host: str
    answers: Mapping[str, tuple[int, str]]
    down: bool = False
    closed: bool = False

    def __post_init__(self) -> None:
        self.where = self.host

    @property
    def seen(self) -> list[str]:
        """The programs run (none where the host is down)."""
        return [] if self.down else [args[0] for args in self.calls]

    def answer(self, args: tuple[str, ...]) -> CommandResult:
        if self.down:
            raise TransportError(f"cannot reach {self.where} over SSH: [Errno 113] No route to host")
        name = next((p.name for p in _PROBES if p.argv == args), "")
        rc, out = self.answers.get(name, (127, ""))
        return self.result(args, rc, out, "" if rc != 127 else f"{args[0]}: command not found")

    def close(self) -> None:
        self.closed = True


# Every fixed probe command (the disk probe's script names the host's paths: it stays unanswered here).
_PROBES = probes_for(HostPlan("x", "x", "compute", mounts=(MountNeed("shared", "/shared", None),)))


def recorded_answers() -> dict[str, tuple[int, str]]:
    return {
        "os": (0, text("recorded/lab-node-os.txt")),
        "users": (0, text("recorded/lab-node-users.txt")),
        "groups": (0, text("recorded/lab-node-groups.txt")),
        "time_sync": (0, "0\n"),
        "cpu": (0, text("lscpu/lscpu-parse-lab-node-1socket-2cores.txt")),
        "memory": (0, text("recorded/lab-node-memory.txt")),
        "gpu_devices": (0, text("recorded/lab-node-gpu_devices.txt")),
        "ib": (2, ""),
        "mounts": (0, "/ ext4\n/shared ext4\n"),
    }


def test_probe_hosts_runs_every_host_on_its_own_connection() -> None:
    exp = expectations(parse_blueprint(LAB))
    conns: dict[str, Replay] = {}

    def connect(plan: HostPlan) -> Replay:
        conns[plan.host] = Replay(plan.host, recorded_answers(), down=plan.host == "login")
        return conns[plan.host]

    probes = probe_hosts(exp.plans, connect, workers=3)
    assert set(probes) == {"ctl", "login", "node1"} and all(c.closed for c in conns.values())
    assert probes["login"].unreachable is not None and not probes["login"].results
    assert "nvidia-smi" in conns["node1"].seen and "nvidia-smi" not in conns["ctl"].seen
    assert probes["node1"].results["gpus"].not_found


def test_report_groups_hosts_and_serialises(repo: Path) -> None:
    report = Report(["a1", "a2", "b"])
    for host in ("a1", "a2"):
        report.rows.append(Row(host, "memory", "at least 1 MB", "0 MB", Severity.BLOCK, "grep"))
    report.rows.append(Row("b", "memory", "at least 1 MB", "2 MB", Severity.OK, "grep"))
    grouped = report.grouped()
    assert [(g.hosts, g.count, g.severity) for g in grouped] == [("a[1-2]", 2, Severity.BLOCK)]
    assert len(report.grouped(include_ok=True)) == 2
    data = json.loads(json.dumps(report.as_dict()))
    assert data["ok"] is False and data["counts"]["BLOCK"] == 2 and data["rows"][2]["severity"] == "OK"


def test_cli_reports_and_exits_1_on_a_blocking_row(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from hpckit.cli import preflight as cli

    (tmp_path / "bp.yaml").write_text(LAB)
    answers = recorded_answers()

    class FakeTarget(Target):
        def transport(self, host: str) -> Replay:  # type: ignore[override]
            return Replay(host, answers)

    def prepare(bp: object) -> Target:
        return FakeTarget("t", SshAccess("root"), {}, lab=True)

    monkeypatch.setattr(cli, "prepare_target", prepare)
    ok = CliRunner().invoke(cli.preflight_cmd, [str(tmp_path / "bp.yaml"), "--json"])
    assert ok.exit_code == 0, ok.output
    rows = {(r["host"], r["check"]): r for r in json.loads(ok.output)["rows"]}
    assert rows[("node1", "gpus")]["severity"] == "ABSENT" and rows[("node1", "cpus")]["severity"] == "OK"
    answers["memory"] = (0, "MemTotal:         512000 kB\n")  # 500 MB < the declared 1000
    table = CliRunner().invoke(cli.preflight_cmd, [str(tmp_path / "bp.yaml")], env={"COLUMNS": "200"})
    assert table.exit_code == 1
    assert "BLOCK" in table.output and "500 MB" in table.output and "blocking mismatches" in table.output


def test_cli_bad_blueprint_is_a_message_not_a_traceback(tmp_path: Path) -> None:
    from hpckit.cli import preflight as cli

    (tmp_path / "bad.yaml").write_text("name: t\nprovider: {type: static}\n")
    done = CliRunner().invoke(cli.preflight_cmd, [str(tmp_path / "bad.yaml")])
    assert done.exit_code != 0 and "Traceback" not in done.output
