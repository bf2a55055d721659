"""One node: its private filesystem layers, the boot script its PID 1 runs, launching and stopping it.

A node is `unshare --net --uts --mount --pid --ipc` around /bin/sh running ``boot.sh``, which mounts
the node's private view (overlays on /etc, the daemons' /var dirs and the package-managed trees,
tmpfs /run and /dev, its own /tmp) and then becomes tini, the node's zombie-reaping PID 1. The host's
installed packages are every node's base; a package installed or removed inside a node changes that
node only.
"""

from __future__ import annotations

import os
import select
import shlex
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from hpckit import proc
from hpckit.lab import procs
from hpckit.lab.errors import LabError
from hpckit.lab.spec import LabNode, LabSpec
from hpckit.lab.state import LabPaths, NodeRecord
from hpckit.paths import cache_dir
from hpckit.proc import CommandResult

# Copy-on-write over the host: a node starts from what the packages installed (MariaDB's system
# tables, munge key, /etc/default files) and whatever it writes (Ansible, daemons) stays its own.
OVERLAY_DIRS = (
    "/etc",
    "/var/log",
    "/var/spool",
    "/var/cache",
    "/var/lib/munge",
    "/var/lib/mysql",
    "/var/lib/slurm",
    "/var/lib/prometheus",  # Prometheus' database and node exporter's textfiles: each node's own
)
# Plain per-node directories: scratch space that starts empty.
SCRATCH_DIRS = {"/tmp": "tmp", "/var/tmp": "var-tmp"}
# tmpfs, fresh at every boot, like on a real machine.
TMPFS_DIRS = ("/run", "/dev")
PRIVATE_ROOTS = (*OVERLAY_DIRS, *SCRATCH_DIRS, *TMPFS_DIRS)
# What dpkg writes (/bin, /sbin and /lib are links into /usr on Debian 12): copy-on-write too, so that
# nodes of one lab can run different Slurm releases (a rolling upgrade). Not in PRIVATE_ROOTS: a node
# reads the host's files there as they are, so an hpckit installed under /usr is still the same in
# every node, until a package inside the node replaces it.
PACKAGE_DIRS = ("/usr", "/var/lib/dpkg", "/var/lib/apt", "/var/lib/systemd")

# Runtime dirs daemons expect under /run: (path, mode, owner); owner None means root.
RUN_DIRS = (
    ("/run/lock", "1777", None),
    ("/run/sshd", "0755", None),
    ("/run/munge", "0755", "munge"),
    ("/run/mysqld", "0755", "mysql"),
    ("/run/slurm", "0755", "slurm"),
)
# Minimal /dev: (name, major, minor).
CHAR_DEVICES = (
    ("null", 1, 3),
    ("zero", 1, 5),
    ("full", 1, 7),
    ("random", 1, 8),
    ("urandom", 1, 9),
    ("tty", 5, 0),
)
DEV_LINKS = (
    ("fd", "/proc/self/fd"),
    ("stdin", "/proc/self/fd/0"),
    ("stdout", "/proc/self/fd/1"),
    ("stderr", "/proc/self/fd/2"),
    ("ptmx", "pts/ptmx"),
)
NODE_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": "/root",
    "LANG": "C.UTF-8",
}
BOOT_TIMEOUT_S = 20.0
READY_LINE = "hpckit-node-ready"
_LAUNCHER_GRACE_S = 2.0

# Launchers this process started, so that stopping a node also reaps it (the host's PID 1 may not).
_LAUNCHED: dict[int, proc.Process] = {}


@dataclass(frozen=True)
class NodeDirs:
    """Host-side paths of one node."""

    root: Path

    @property
    def boot_script(self) -> Path:
        return self.root / "boot.sh"

    @property
    def console(self) -> Path:
        return self.root / "console.log"

    def upper(self, private_dir: str) -> Path:
        return self.root / "layers" / _layer_name(private_dir) / "upper"

    def work(self, private_dir: str) -> Path:
        return self.root / "layers" / _layer_name(private_dir) / "work"

    def scratch(self, private_dir: str) -> Path:
        return self.root / SCRATCH_DIRS[private_dir]

    @property
    def cache_hold(self) -> Path:
        """Where the host's cache is held while the node's overlays cover its path."""
        return self.root / "hpckit-cache"


def _layer_name(private_dir: str) -> str:
    return private_dir.strip("/").replace("/", "-")


def node_dirs(paths: LabPaths, node: LabNode) -> NodeDirs:
    return NodeDirs(paths.node_dir(node.name))


def overlay_dirs() -> tuple[str, ...]:
    """The overlay targets that exist on this host (an absent package dir is simply not overlaid)."""
    return tuple(d for d in (*OVERLAY_DIRS, *PACKAGE_DIRS) if Path(d).is_dir())


def prepare_dirs(dirs: NodeDirs) -> None:
    """Create the node's layer and scratch dirs; each upper root mirrors its lower dir's owner and mode,
    because the merged directory takes them from the upper one."""
    for private_dir in overlay_dirs():
        upper, work = dirs.upper(private_dir), dirs.work(private_dir)
        upper.mkdir(parents=True, exist_ok=True)
        work.mkdir(parents=True, exist_ok=True)
        mirror_owner_mode(Path(private_dir), upper)
    for private_dir in SCRATCH_DIRS:
        scratch = dirs.scratch(private_dir)
        scratch.mkdir(parents=True, exist_ok=True)
        scratch.chmod(0o1777)
    dirs.cache_hold.mkdir(exist_ok=True)
    cache_dir().mkdir(parents=True, exist_ok=True)


def mirror_owner_mode(source: Path, target: Path) -> None:
    st = source.stat()
    os.chown(target, st.st_uid, st.st_gid)
    target.chmod(st.st_mode & 0o7777)


def write_etc_file(dirs: NodeDirs, record: NodeRecord | None, rel: str, text: str, mode: int) -> None:
    """Write ``/etc/<rel>`` as the node sees it.

    A running node gets the file through its own mount namespace (/proc/PID/root), since writing an
    overlay's upper dir under a mounted overlay is undefined; a stopped node gets it in the upper dir.
    Parent dirs that exist on the host are created with the host's owner and mode.
    """
    if record is not None and procs.is_alive(record.init_pid, record.init_start):
        target = Path(f"/proc/{record.init_pid}/root/etc") / rel
        target.parent.mkdir(parents=True, exist_ok=True)
    else:
        base = dirs.upper("/etc")
        target = base / rel
        _make_parents(base, Path("/etc"), Path(rel).parent)
    tmp = target.with_name(f".{target.name}.hpckit-tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.chmod(mode)
    host_file = Path("/etc") / rel
    if host_file.exists():  # e.g. /etc/shadow belongs to group shadow
        st = host_file.stat()
        os.chown(tmp, st.st_uid, st.st_gid)
    tmp.replace(target)


def make_etc_dir(dirs: NodeDirs, rel_dir: str) -> None:
    """Create ``/etc/<rel_dir>`` in a stopped node's upper layer, with the host's owner and mode."""
    _make_parents(dirs.upper("/etc"), Path("/etc"), Path(rel_dir))


def _make_parents(base: Path, lower: Path, rel_dir: Path) -> None:
    current, current_lower = base, lower
    for part in rel_dir.parts:
        current, current_lower = current / part, current_lower / part
        if not current.is_dir():
            current.mkdir()
            if current_lower.is_dir():
                mirror_owner_mode(current_lower, current)


def boot_script(spec: LabSpec, paths: LabPaths, node: LabNode) -> str:
    """The shell script the node's PID 1 runs (kept on disk for whoever debugs a node)."""
    dirs = node_dirs(paths, node)
    q = shlex.quote
    lines = [
        "#!/bin/sh",
        f"# hpckit lab {spec.cluster}: boot of node {node.name}, run as PID 1 of its new namespaces.",
        "# Everything mounted here is private to the node and vanishes with it.",
        "set -eu",
    ]
    # hpckit's cache (sources, built packages) is the host's in every node: a build on a lab controller
    # is kept for the next lab, and one already on the host is used.
    hold, cache = q(str(dirs.cache_hold)), q(str(cache_dir()))
    lines.append(f"mount --bind {cache} {hold}")
    for d in overlay_dirs():
        options = f"lowerdir={d},upperdir={dirs.upper(d)},workdir={dirs.work(d)}"
        lines.append(f"mount -t overlay hpckit-{_layer_name(d)} -o {q(options)} {d}")
    lines += _run_lines()
    lines += _sys_lines()
    lines += [f"mount --bind {q(str(dirs.scratch(d)))} {d}" for d in SCRATCH_DIRS]
    lines += [f"mkdir -p {cache}", f"mount --move {hold} {cache}"]
    lines += _dev_lines(node)
    lines += _home_lines()
    for shared in spec.shared_dirs:
        lines += [f"mkdir -p {q(shared)}", f"mount --bind {q(str(paths.shared_source(shared)))} {q(shared)}"]
    lines += [
        f"hostname {q(node.name)}",
        f"echo {READY_LINE}",
        "exec >&2 </dev/null",  # the launcher's pipe was only for the ready line
        "exec tini -- sleep infinity",
    ]
    return "\n".join(lines) + "\n"


def _home_lines() -> list[str]:
    """root's shell start-up files from the distribution's defaults (/etc/skel), over the host's.

    Nodes share /root with the host, and bash reads ~/.bashrc for every command sshd runs: a version
    manager or prompt set up there for a person would run on each of Ansible's ssh commands (on one
    box, pyenv's init made every one 0.15 s slower). A fresh machine has the defaults."""
    return [
        "for f in .bashrc .profile; do",
        '  if [ -f "/etc/skel/$f" ] && [ -f "/root/$f" ]; then mount --bind "/etc/skel/$f" "/root/$f"; fi',
        "done",
    ]


def _run_lines() -> list[str]:
    lines = ["mount -t tmpfs -o mode=0755,nosuid,nodev hpckit-run /run"]
    for path, mode, owner in RUN_DIRS:
        lines.append(f"mkdir -m {mode} {path}")
        if owner is not None:
            lines.append(f"if getent passwd {owner} >/dev/null; then chown {owner} {path}; fi")
    return lines


def _sys_lines() -> list[str]:
    """A sysfs mounted from inside the node's network namespace shows the node's interfaces (Ansible's
    facts read them there). The host's cgroup mounts are carried over: slurmd will not start without a
    filesystem on /sys/fs/cgroup, even with proctrack/linuxproc."""
    keep = "/run/.hpckit-cgroup"
    sysfs = "mount -t sysfs -o nosuid,nodev,noexec sysfs /sys"
    return [
        "if mountpoint -q /sys/fs/cgroup; then",
        f"  mkdir {keep} && mount --rbind /sys/fs/cgroup {keep}",
        f"  {sysfs}",
        f"  mount --move {keep} /sys/fs/cgroup && rmdir {keep}",
        "else",
        f"  {sysfs}",
        "fi",
    ]


def _dev_lines(node: LabNode) -> list[str]:
    lines = ["mount -t tmpfs -o mode=0755,nosuid,size=1m hpckit-dev /dev"]
    lines += [f"mknod -m 0666 /dev/{name} c {major} {minor}" for name, major, minor in CHAR_DEVICES]
    # Fake GPUs: character devices (plain files make slurmd reject the gres), harmless like /dev/null.
    lines += [f"mknod -m 0666 /dev/nvidia{i} c 1 3" for i in range(node.gpus)]
    lines += [f"ln -s {target} /dev/{name}" for name, target in DEV_LINKS]
    lines += [
        "mkdir /dev/pts /dev/shm /dev/mqueue",
        "mount -t devpts -o newinstance,ptmxmode=0666,mode=0620,gid=5 devpts /dev/pts",
        "mount -t tmpfs -o mode=1777,nosuid,nodev hpckit-shm /dev/shm",
        "mount -t mqueue mqueue /dev/mqueue",
    ]
    return lines


def launch(paths: LabPaths, node: LabNode) -> NodeRecord:
    """Start the node and wait for its boot script to finish; returns the pids to find it again."""
    dirs = node_dirs(paths, node)
    argv = [
        "unshare",
        "--net",
        "--uts",
        "--mount",
        "--pid",
        "--ipc",
        "--fork",
        "--kill-child",
        "--mount-proc",
        "--propagation",
        "private",
        "--",
        "/bin/sh",
        str(dirs.boot_script),
    ]
    with dirs.console.open("ab") as console:
        # A new session: a Ctrl-C aimed at the command that started the lab must not reach the nodes.
        launcher = proc.spawn(argv, stderr=console, env=NODE_ENV)
    _LAUNCHED[launcher.pid] = launcher
    assert launcher.stdout is not None
    try:
        ready = _read_ready(launcher.stdout.fileno(), BOOT_TIMEOUT_S)
    finally:
        launcher.stdout.close()
    if not ready:
        _kill_launcher(launcher)
        raise LabError(f"node {node.name} did not boot; end of {dirs.console}:\n{_tail(dirs.console)}")
    return _record_for(launcher, node)


def _read_ready(fd: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    buffer = b""
    while READY_LINE.encode() not in buffer:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return False
        chunk = os.read(fd, 4096)
        if not chunk:
            return False
        buffer += chunk
    return True


def _record_for(launcher: proc.Process, node: LabNode) -> NodeRecord:
    children = procs.children_of(launcher.pid)
    launcher_start = procs.start_time(launcher.pid)
    init_start = procs.start_time(children[0]) if len(children) == 1 else None
    if launcher_start is None or init_start is None:
        _kill_launcher(launcher)
        raise LabError(f"node {node.name} died right after booting")
    return NodeRecord(launcher.pid, launcher_start, children[0], init_start)


def _kill_launcher(launcher: proc.Process) -> None:
    launcher.kill()
    launcher.wait()
    _LAUNCHED.pop(launcher.pid, None)


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no console log)"


def stop(record: NodeRecord, timeout: float = 10.0) -> None:
    """Kill the node's PID 1 (the kernel then kills everything in its PID namespace), then its launcher.

    SIGKILL because `unshare --kill-child` ignores SIGTERM while it waits. The launcher is given a
    moment to reap PID 1 and exit by itself: killed first, it would leave PID 1 to the host's init,
    which may never reap it.
    """
    procs.kill_exactly(record.init_pid, record.init_start)
    if not procs.wait_gone(record.launcher_pid, record.launcher_start, _LAUNCHER_GRACE_S):
        procs.kill_exactly(record.launcher_pid, record.launcher_start)
    launched = _LAUNCHED.pop(record.launcher_pid, None)
    if launched is not None:
        launched.wait(timeout)
    gone = procs.wait_gone(record.init_pid, record.init_start, timeout)
    if not (gone and procs.wait_gone(record.launcher_pid, record.launcher_start, timeout)):
        raise LabError(f"node processes {record.init_pid}/{record.launcher_pid} did not end within {timeout:.0f}s")


def nsenter_argv(record: NodeRecord, argv: Sequence[str]) -> list[str]:
    """Command line running ``argv`` inside the node, in all of its namespaces, from its root dir."""
    return [
        "nsenter",
        f"--target={record.init_pid}",
        "--mount",
        "--uts",
        "--net",
        "--pid",
        "--ipc",
        "--wd=/",
        "--",
        *argv,
    ]


@dataclass
class NodeTransport:
    """Commands inside a running node, as root from its root dir: the lab's Transport (nsenter), beside the
    local and SSH ones of hpckit.proc. Past ``timeout`` the whole command is killed, inside the node too."""

    record: NodeRecord
    where: str = "lab node"

    def run(
        self,
        argv: Sequence[str],
        *,
        stdin: str | None = None,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
    ) -> CommandResult:
        if not procs.is_alive(self.record.init_pid, self.record.init_start):
            raise LabError(f"node process {self.record.init_pid} is gone")
        full = nsenter_argv(self.record, argv)
        try:
            return proc.run(full, stdin=stdin, timeout=timeout, env=env, where=self.where, own_group=True)
        except proc.CommandTimedOut:
            raise LabError(f"{shlex.join(argv)} did not finish within {timeout}s") from None

    def close(self) -> None:
        """Nothing to close: each command is its own nsenter."""


def start_sshd(record: NodeRecord, node: LabNode) -> None:
    """Start sshd through Debian's init script, as Ansible's `service` module would."""
    result = NodeTransport(record, node.name).run(["/etc/init.d/ssh", "start"], env=NODE_ENV, timeout=30)
    if result.rc != 0:
        raise LabError(f"node {node.name}: starting sshd failed: {(result.stdout + result.stderr).strip()}")


def stop_sshd(record: NodeRecord, node: LabNode, *, sessions: bool = False) -> None:
    """Stop sshd through Debian's init script, which ends only the listener; with ``sessions``, kill every
    sshd process of the node as well, so that the connections open to it (Ansible's ControlPersist
    masters) drop as they would when the node goes away. pkill runs in the node's PID namespace and reads
    the node's own /proc, so it sees no process outside the node."""
    transport = NodeTransport(record, node.name)
    result = transport.run(["/etc/init.d/ssh", "stop"], env=NODE_ENV, timeout=30)
    if result.rc != 0:
        raise LabError(f"node {node.name}: stopping sshd failed: {(result.stdout + result.stderr).strip()}")
    if not sessions:
        return
    # OpenSSH 9.8 and later run each session as sshd-session; rc 1 is "no such process".
    killed = transport.run(["pkill", "--signal", "KILL", "--exact", "sshd|sshd-session"], env=NODE_ENV, timeout=30)
    if killed.rc not in (0, 1):
        raise LabError(f"node {node.name}: ending sshd's sessions failed: {(killed.stdout + killed.stderr).strip()}")


def remove_dirs(dirs: NodeDirs) -> None:
    shutil.rmtree(dirs.root, ignore_errors=False)
