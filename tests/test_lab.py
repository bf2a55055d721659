"""The lab end to end: three namespace machines on a test-only bridge and subnet, then nothing left.

Needs root and the lab's host packages (`hpckit lab install-packages`); skipped otherwise. Traffic
only ever goes to the lab's own addresses.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from hpckit.cli.lab import lab as lab_cli
from hpckit.lab import (
    LabError,
    LabNode,
    LabSpec,
    LabStatus,
    lab_down,
    lab_exec,
    lab_status,
    lab_up,
    missing_packages,
    node_start_sshd,
    node_stop_sshd,
    procs,
    shared_dir_source,
    ssh_identity,
)
from hpckit.proc import CommandResult

CLUSTER = "pytest-lab"
STATE_ROOT = Path("/var/lib/hpckit/lab-pytest")
SHARED = "/hpckit-pytest-shared"
SPEC = LabSpec(
    cluster=CLUSTER,
    nodes=(
        LabNode("ctl", "10.77.9.10"),
        LabNode("node1", "10.77.9.11", gpus=2),
        LabNode("node2", "10.77.9.12"),
    ),
    subnet="10.77.9.0/24",
    bridge="hpckt9",
    shared_dirs=(SHARED,),
    state_root=STATE_ROOT,
)


def _skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "the lab needs root"
    if shutil.which("dpkg-query") is None:
        return "the lab needs a Debian host"
    missing = missing_packages()
    if missing:
        return f"lab host packages missing ({' '.join(missing)}): run `hpckit lab install-packages`"
    return None


pytestmark = [pytest.mark.lab, pytest.mark.skipif(_skip_reason() is not None, reason=str(_skip_reason()))]


@pytest.fixture(scope="module")
def lab() -> Iterator[LabStatus]:
    lab_down(CLUSTER, STATE_ROOT)  # a leftover from an interrupted run
    try:
        yield lab_up(SPEC)
    finally:
        lab_down(CLUSTER, STATE_ROOT)
        if STATE_ROOT.is_dir() and not any(STATE_ROOT.iterdir()):
            STATE_ROOT.rmdir()


def run(node: str, *argv: str) -> CommandResult:
    return lab_exec(CLUSTER, node, argv, state_root=STATE_ROOT, timeout=30)


def out(node: str, *argv: str) -> str:
    result = run(node, *argv)
    assert result.rc == 0, result.stderr
    return result.stdout.strip()


def ssh(address: str, command: str) -> subprocess.CompletedProcess[str]:
    identity = ssh_identity(CLUSTER, STATE_ROOT)
    argv = identity.ssh_command(address, command)
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)


def test_every_node_is_up_with_sshd(lab: LabStatus) -> None:
    assert lab.all_up
    assert [(n.name, n.address, n.gpus) for n in lab.nodes] == [(n.name, n.address, n.gpus) for n in SPEC.nodes]
    assert all(n.pid is not None and procs.start_time(n.pid) is not None for n in lab.nodes)


def test_up_again_keeps_running_nodes(lab: LabStatus) -> None:
    again = lab_up(SPEC)
    assert [n.pid for n in again.nodes] == [n.pid for n in lab.nodes]


def test_hostname_and_address_per_node(lab: LabStatus) -> None:
    for node in SPEC.nodes:
        assert out(node.name, "hostname") == node.name
        assert f"inet {node.address}/24" in out(node.name, "ip", "-4", "-o", "addr", "show", "dev", "eth0")
        assert out(node.name, "getent", "ahostsv4", "ctl").split()[0] == "10.77.9.10"


def test_root_ssh_from_host_with_generated_key(lab: LabStatus) -> None:
    for node in SPEC.nodes:
        result = ssh(node.address, "hostname")
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == node.name


def test_fabric_reaches_a_node_with_strict_host_keys(lab: LabStatus, tmp_path: Path) -> None:
    """hpckit's own SSH transport (the one deploy, jobs and health use) reaches a node whose key the lab's
    known hosts hold, and refuses one whose key it does not know or that answers with another key."""
    from hpckit.clusters import SshAccess
    from hpckit.proc import TransportError
    from hpckit.slurm.connect import ssh_transport

    identity = ssh_identity(CLUSTER, STATE_ROOT)
    known = identity.known_hosts.read_text()

    def hostname(known_hosts: Path) -> str:
        access = SshAccess(identity.user, 22, str(identity.private_key), str(known_hosts))
        conn = ssh_transport(access, "10.77.9.11", "node1")
        try:
            return conn.run(["hostname"], timeout=20).stdout.strip()
        finally:
            conn.close()

    assert hostname(identity.known_hosts) == "node1"
    unknown = tmp_path / "unknown"  # every lab key but node1's: node1 is a host never seen
    unknown.write_text(
        "".join(line for line in known.splitlines(True) if "10.77.9.11" not in line.split()[0].split(","))
    )
    with pytest.raises(TransportError, match="not found in known_hosts"):
        hostname(unknown)
    impostor = tmp_path / "impostor"  # node1's address with ctl's key: a host answering with another key
    ctl_key = next(line.split(None, 1)[1] for line in known.splitlines() if "10.77.9.10" in line.split()[0].split(","))
    impostor.write_text(unknown.read_text() + f"10.77.9.11 {ctl_key}")
    with pytest.raises(TransportError, match="cannot reach node1"):
        hostname(impostor)


def test_ansible_facts_see_the_node(lab: LabStatus) -> None:
    ansible = Path(sys.executable).parent / "ansible"
    if not ansible.exists():
        pytest.skip("ansible is not installed next to this Python")
    identity = ssh_identity(CLUSTER, STATE_ROOT)
    extra_vars = json.dumps(identity.ansible_vars())
    argv = [str(ansible), "all", "-i", "10.77.9.10,10.77.9.11,", "-o", "-e", extra_vars, "-m", "setup",
            "-a", "filter=ansible_default_ipv4,ansible_hostname"]  # fmt: skip
    env = {**os.environ, "ANSIBLE_HOST_KEY_CHECKING": "True", "ANSIBLE_NOCOLOR": "1"}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    for line in done.stdout.splitlines():
        address, facts = line.split(" | SUCCESS => ", 1)
        ansible_facts = json.loads(facts)["ansible_facts"]
        assert ansible_facts["ansible_default_ipv4"]["address"] == address
        assert ansible_facts["ansible_hostname"] == {"10.77.9.10": "ctl", "10.77.9.11": "node1"}[address]


def test_nodes_reach_each_other_by_name(lab: LabStatus) -> None:
    for peer in ("node1", "node2"):
        assert run("ctl", "ping", "-c", "1", "-W", "2", peer).rc == 0
        assert out("ctl", "ssh", peer, "hostname") == peer


def test_default_route_exists_but_leads_nowhere(lab: LabStatus) -> None:
    assert "default dev dead0" in out("node1", "ip", "route", "show", "default")
    # The routing decision for an outside address, asked without sending anything: into dead0,
    # whose only peer (dead1) is inside the node too.
    assert " dev dead0 " in out("node1", "ip", "route", "get", "192.0.2.77")
    assert "dead1" in out("node1", "ip", "-o", "link", "show", "dead1")
    assert "via" not in out("node1", "ip", "route", "show")


def test_etc_slurm_run_and_tmp_are_private(lab: LabStatus) -> None:
    marker = "hpckit-pytest-private"
    for directory in ("/etc/slurm", "/run", "/tmp", "/var/log", "/var/spool"):
        path = f"{directory}/{marker}"
        assert run("ctl", "sh", "-c", f"echo ctl > {path}").rc == 0
        assert out("ctl", "cat", path) == "ctl"
        assert run("node1", "test", "-e", path).rc != 0, f"{path} leaked to node1"
        assert not Path(path).exists(), f"{path} leaked to the host"


def test_gpu_devices_only_on_gpu_node(lab: LabStatus) -> None:
    kinds = out("node1", "stat", "-c", "%n %F %t:%T", "/dev/nvidia0", "/dev/nvidia1").splitlines()
    assert kinds == ["/dev/nvidia0 character special file 1:3", "/dev/nvidia1 character special file 1:3"]
    assert run("node1", "test", "-e", "/dev/nvidia2").rc != 0
    assert run("ctl", "sh", "-c", "ls /dev/nvidia*").rc != 0


def test_basic_devices_work(lab: LabStatus) -> None:
    assert out("node2", "sh", "-c", "echo x > /dev/null && head -c 16 /dev/urandom | wc -c") == "16"
    assert out("node2", "sh", "-c", "echo shm > /dev/shm/t && cat /dev/shm/t") == "shm"
    identity = ssh_identity(CLUSTER, STATE_ROOT)
    with_tty = ["ssh", *identity.ssh_options(), "-tt", "root@10.77.9.12", "tty"]
    result = subprocess.run(with_tty, capture_output=True, text=True, timeout=30, check=False)
    assert result.stdout.startswith("/dev/pts/"), result.stdout + result.stderr


def test_sysfs_shows_the_node_and_keeps_cgroups(lab: LabStatus) -> None:
    assert sorted(out("node1", "ls", "/sys/class/net").split()) == ["dead0", "dead1", "eth0", "lo"]
    host_has_cgroups = subprocess.run(["mountpoint", "-q", "/sys/fs/cgroup"], check=False).returncode == 0
    assert (run("node1", "mountpoint", "-q", "/sys/fs/cgroup").rc == 0) == host_has_cgroups


SLURM_CONF = f"""\
ClusterName={CLUSTER}
SlurmctldHost=ctl
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SlurmdParameters=config_overrides
GresTypes=gpu
ReturnToService=2
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
NodeName=node1 CPUs=1 RealMemory=200 Gres=gpu:2 State=UNKNOWN
PartitionName=gpu Nodes=node1 Default=YES MaxTime=INFINITE State=UP
"""


def test_slurm_hands_out_the_fake_gpus(lab: LabStatus) -> None:
    """The lab's reason to be: real Slurm daemons in nodes, GPUs scheduled from /dev/nvidiaN."""
    for name in ("ctl", "node1"):
        write = "cat > /etc/slurm/slurm.conf && echo 'Name=gpu File=/dev/nvidia[0-1]' > /etc/slurm/gres.conf"
        assert lab_exec(CLUSTER, name, ["sh", "-c", write], state_root=STATE_ROOT, stdin=SLURM_CONF).rc == 0
    assert run("ctl", "sh", "-c", "service munge start && service slurmctld start").rc == 0
    assert run("node1", "sh", "-c", "service munge start && service slurmd start").rc == 0
    for _ in range(100):
        if out("ctl", "sinfo", "-h", "-n", "node1", "-o", "%t") == "idle":
            break
        time.sleep(0.2)
    job = out("ctl", "srun", "-N1", "--gres=gpu:2", "sh", "-c", "echo $(hostname) $CUDA_VISIBLE_DEVICES")
    assert job == "node1 0,1"


def test_shared_dir_is_one_directory_everywhere(lab: LabStatus) -> None:
    for node in SPEC.nodes:
        assert run(node.name, "sh", "-c", f"echo {node.name} > {SHARED}/{node.name}").rc == 0
    for node in SPEC.nodes:
        assert sorted(out(node.name, "ls", SHARED).split()) == ["ctl", "node1", "node2"]
    host_side = shared_dir_source(CLUSTER, SHARED, STATE_ROOT)
    assert (host_side / "node2").read_text() == "node2\n"


def test_exec_reports_exit_status_and_refuses_unknown_nodes(lab: LabStatus) -> None:
    result = run("node2", "sh", "-c", "echo out; echo err >&2; exit 3")
    assert (result.rc, result.stdout, result.stderr) == (3, "out\n", "err\n")
    with pytest.raises(LabError, match="no node 'node9'"):
        run("node9", "true")


def test_exec_timeout_kills_the_command_inside_the_node(lab: LabStatus) -> None:
    with pytest.raises(LabError, match="did not finish within 1"):
        lab_exec(CLUSTER, "node1", ["sleep", "417"], state_root=STATE_ROOT, timeout=1)
    assert "sleep 417" not in out("node1", "ps", "-eo", "args")


def test_sshd_stop_and_start(lab: LabStatus) -> None:
    node_stop_sshd(CLUSTER, "node2", STATE_ROOT)
    status = lab_status(CLUSTER, STATE_ROOT).node("node2")
    assert status.up and not status.sshd
    assert ssh("10.77.9.12", "true").returncode != 0
    node_start_sshd(CLUSTER, "node2", STATE_ROOT)
    assert lab_status(CLUSTER, STATE_ROOT).node("node2").sshd
    assert ssh("10.77.9.12", "true").returncode == 0


def test_cli_status_and_exec(lab: LabStatus) -> None:
    common = ["--cluster", CLUSTER, "--state-root", str(STATE_ROOT)]
    result = CliRunner().invoke(lab_cli, ["status", *common])
    assert result.exit_code == 0, result.output
    assert [line.split()[0] for line in result.output.splitlines()[2:]] == ["ctl", "node1", "node2"]
    command = "import sys; from hpckit.cli.lab import lab; sys.argv[0] = 'lab'; lab()"
    argv = [sys.executable, "-c", command, "exec", *common, "node1", "--", "sh", "-c", "hostname; exit 4"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    assert (done.returncode, done.stdout) == (4, "node1\n"), done.stderr


def test_dead_node_comes_back_with_its_files(lab: LabStatus) -> None:
    assert run("node2", "sh", "-c", "echo kept > /etc/slurm/hpckit-pytest-kept").rc == 0
    pid = lab_status(CLUSTER, STATE_ROOT).node("node2").pid
    assert pid is not None
    subprocess.run(["kill", "-KILL", str(pid)], check=True)
    procs.wait_gone(pid, procs.start_time(pid) or 0, 10)
    assert not lab_status(CLUSTER, STATE_ROOT).node("node2").up
    with pytest.raises(LabError, match="not running"):
        run("node2", "true")
    assert lab_up(SPEC).all_up
    assert out("node2", "cat", "/etc/slurm/hpckit-pytest-kept") == "kept"
    assert out("ctl", "ssh", "node2", "hostname") == "node2"


def test_down_leaves_nothing_behind(lab: LabStatus) -> None:
    status = lab_status(CLUSTER, STATE_ROOT)
    init_pids = [n.pid for n in status.nodes if n.pid is not None]
    pid_namespaces = {procs.namespace_id(pid, "pid") for pid in init_pids}
    net_namespaces = {procs.namespace_id(pid, "net") for pid in init_pids}
    lab_pids = {p for ns in pid_namespaces if ns for p in procs.pids_in_namespace("pid", ns)}
    lab_pids |= {p for pid in init_pids if (p := procs.parent_of(pid)) is not None}  # the launchers
    assert len(lab_pids) > len(init_pids)

    lab_down(CLUSTER, STATE_ROOT)

    assert not [pid for pid in lab_pids if Path(f"/proc/{pid}").exists()]
    assert not [ns for ns in net_namespaces if ns and procs.pids_in_namespace("net", ns)]
    assert CLUSTER not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=True).stdout
    assert "hpckt9" not in links
    mounts = Path("/proc/mounts").read_text()
    assert str(STATE_ROOT) not in mounts and SHARED not in mounts and "hpckit" not in mounts
    assert not Path(SHARED).exists()
    assert not (STATE_ROOT / CLUSTER).exists()
    with pytest.raises(LabError, match="no lab"):
        lab_status(CLUSTER, STATE_ROOT)
