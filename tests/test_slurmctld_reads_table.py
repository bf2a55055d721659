"""The per-release table against a real slurmctld: the slurm.conf hpckit renders for that daemon's release
starts it, and for every case below the daemon accepts or refuses the file exactly as the table says.

The daemon runs in a network namespace of its own (loopback and a veth pair, nothing leaves it), with a
munged of this test's own, for a few seconds. The box's slurmctld (Debian 12: 22.05) is always checked; a
build of another release is checked too when ``HPCKIT_SLURMCTLD`` names its slurmctld (its plugins found
next to it in ``../lib/x86_64-linux-gnu/slurm``, or in ``HPCKIT_SLURM_PLUGINDIR``).
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from hpckit.deploy.topology import block_topology_conf
from hpckit.slurm_releases import Version, key_problem, topology_small_blocks, unread_keys, value_problems
from tests.test_ansible_static import _contract_vars, _render

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("munged"),
        reason="needs root, unshare and munged",
    ),
]
NODES = ["node1", "node2", "node3", "node4"]


def _daemons() -> list[tuple[str, str | None]]:
    """(slurmctld, PluginDir or None for its built-in one) for each release to check."""
    found: list[tuple[str, str | None]] = []
    if Path("/usr/sbin/slurmctld").is_file():
        found.append(("/usr/sbin/slurmctld", None))
    other = os.environ.get("HPCKIT_SLURMCTLD")
    if other:
        plugins = os.environ.get("HPCKIT_SLURM_PLUGINDIR") or str(
            Path(other).resolve().parent.parent / "lib" / "x86_64-linux-gnu" / "slurm"
        )
        found.append((other, plugins))
    return found


@pytest.fixture(scope="module")
def work() -> Iterator[Path]:
    """A folder the munge and slurm users can reach (pytest's own are root's alone)."""
    path = Path(tempfile.mkdtemp(prefix="hpckit-slurmctld-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def munge(work: Path) -> Iterator[Path]:
    """A munged of this test's own; its socket."""
    home = work / "munge"
    home.mkdir()
    home.chmod(0o755)
    key = home / "key"
    key.write_bytes(os.urandom(1024))
    shutil.chown(key, "munge", "munge")
    key.chmod(0o400)
    shutil.chown(home, "munge", "munge")
    sock = home / "sock"
    args = ["--socket", str(sock), "--key-file", str(key), "--pid-file", str(home / "pid")]
    args += ["--log-file", str(home / "log"), "--seed-file", str(home / "seed"), "-F"]
    setpriv = ["setpriv", "--reuid", "munge", "--regid", "munge", "--clear-groups"]
    munged = shutil.which("munged") or "munged"
    proc = subprocess.Popen([*setpriv, munged, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait(lambda: sock.exists(), 10, "munged did not create its socket")
        yield sock
    finally:
        proc.terminate()
        proc.wait(10)


def _wait(check: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(what)
        time.sleep(0.1)


def _version(slurmctld: str, env: dict[str, str]) -> Version:
    out = subprocess.run([slurmctld, "-V"], capture_output=True, text=True, env=env, check=True).stdout
    return Version.parse(out.split()[1].rsplit("-", 1)[0])


def _slurm_conf(release: Version, work: Path, munge: Path, plugin_dir: str | None) -> str:
    """The slurm.conf hpckit renders for ``release``, pointed at this test's files and loopback, without
    accounting (no slurmdbd here)."""
    variables = _contract_vars(slurm_common_skip_keys=unread_keys(release), slurm_accounting=False)
    text = _render("slurm_common", "slurm.conf.j2", variables)
    host = socket.gethostname().split(".")[0]
    text = re.sub(r"^SlurmctldHost=.*$", f"SlurmctldHost={host}(127.0.0.1)", text, flags=re.M)
    text = re.sub(r"NodeAddr=\S+", "NodeAddr=127.0.0.[21-24]", text)
    for key, path in (("StateSaveLocation", "state"), ("SlurmctldPidFile", "pid"), ("SlurmctldLogFile", "log")):
        text = re.sub(rf"^{key}=.*$", f"{key}={work / path}", text, flags=re.M)
    text += f"AuthInfo=socket={munge}\nMailProg=/bin/true\n"
    return text + (f"PluginDir={plugin_dir}\n" if plugin_dir else "")


def _start(slurmctld: str, conf: str, topology: str | None, work: Path, env: dict[str, str]) -> tuple[bool, str]:
    """Whether slurmctld started on this slurm.conf (and topology.conf), and what it said."""
    (work / "state").mkdir(parents=True)
    shutil.chown(work / "state", "slurm", "slurm")
    (work / "slurm.conf").write_text(conf)
    if topology is not None:
        (work / "topology.conf").write_text(topology)
    net = "ip link set lo up && ip link add hcv0 type veth peer name hcv1 && ip addr add 10.77.159.2/24 dev hcv0"
    script = f"{net} && ip link set hcv0 up && exec {slurmctld} -D -f {work / 'slurm.conf'}"
    proc = subprocess.Popen(
        ["unshare", "-n", "sh", "-c", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env
    )
    log = work / "log"
    deadline = time.monotonic() + 30
    while proc.poll() is None and time.monotonic() < deadline:
        text = log.read_text(errors="replace") if log.exists() else ""
        if "started on cluster" in text and (
            "Running as primary controller" in text or time.monotonic() > deadline - 25
        ):
            break
        time.sleep(0.2)
    alive = proc.poll() is None
    if alive:
        time.sleep(1.0)  # what a bad setting makes it do, it does right after it starts
        alive = proc.poll() is None
        proc.kill()
    out = (proc.communicate(timeout=10)[0] or b"").decode(errors="replace")
    said = out + (log.read_text(errors="replace") if log.exists() else "")
    return alive, "\n".join(line for line in said.splitlines() if "fatal" in line or "rror" in line)


CASES = [
    # (name, extra slurm.conf lines, topology.conf blocks, BlockSizes)
    ("as rendered", "", None, []),
    ("unknown key", "SchedulerTyp=sched/backfill\n", None, []),
    ("FastSchedule", "FastSchedule=2\n", None, []),
    ("SallocDefaultCommand", "SallocDefaultCommand=srun\n", None, []),
    ("AccountingStoreJobComment", "AccountingStoreJobComment=YES\n", None, []),
    ("select/cons_res", "SelectType=select/cons_res\n", None, []),
    ("topology/block", "TopologyPlugin=topology/block\n", [NODES[:2], NODES[2:]], []),
    ("block smaller than the base", "TopologyPlugin=topology/block\n", [NODES[:3], NODES[3:]], []),
]


def _table_accepts(release: Version, extra: str, blocks: list[list[str]] | None) -> bool:
    for line in extra.splitlines():
        key, _, value = line.partition("=")
        if key_problem(key, release) or value_problems(key, value, release):
            return False
    if blocks is not None and not topology_small_blocks(release):
        return all(len(b) >= len(blocks[0]) for b in blocks)
    return True


@pytest.mark.parametrize(("slurmctld", "plugin_dir"), _daemons())
def test_slurmctld_agrees_with_the_table(slurmctld: str, plugin_dir: str | None, munge: Path, work: Path) -> None:
    env = {**os.environ}
    if plugin_dir:
        env["LD_LIBRARY_PATH"] = plugin_dir
    release = _version(slurmctld, env)
    disagree = []
    tmp_path = work / release.series
    for i, (name, extra, blocks, sizes) in enumerate(CASES):
        base = _slurm_conf(release, tmp_path / f"case{i}", munge, plugin_dir)
        topology = block_topology_conf([(f"b{j}", b) for j, b in enumerate(blocks)], sizes) if blocks else None
        started, said = _start(slurmctld, base + extra, topology, tmp_path / f"case{i}", env)
        if started != _table_accepts(release, extra, blocks):
            disagree.append(f"{name}: slurmctld {release} {'started' if started else 'refused'}: {said[-400:]}")
        if name == "as rendered":
            assert started, f"slurmctld {release} refused hpckit's slurm.conf: {said[-1500:]}"
    assert disagree == []
