"""VM labs: virtual machines (qemu, software emulation) with their own kernel and systemd, on a
network namespace of hpckit's own. The same verbs as the namespace lab: up, status, exec, down.

State, under ``<state_root>/<cluster>/`` beside the namespace lab's (so both see each other's subnets)::

    spec.json                    the machines as a LabSpec (names, addresses, subnet, host link)
    vm.json                      the VmSpec (memory, CPUs): its presence makes the lab a VM lab
    ssh/id_ed25519, known_hosts  root's key for every machine; every machine's host key
    nodes/<name>/machine.json    qemu's pid and start time, and the image the disk sits on
    nodes/<name>/disk.qcow2      the machine's disk: a copy-on-write overlay on the image's base
    nodes/<name>/seed.tar        its host key, root's authorized key and /etc/hosts (see guest.py)
    nodes/<name>/console.log     its serial console
"""

from __future__ import annotations

import io
import json
import shlex
import shutil
import tarfile
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from hpckit import proc
from hpckit.lab import guards, procs, ssh, state
from hpckit.lab.errors import LabError
from hpckit.lab.net import node_mac
from hpckit.lab.packages import missing_packages, required_packages
from hpckit.lab.spec import DEFAULT_STATE_ROOT, LabNode
from hpckit.lab.ssh import SshIdentity
from hpckit.lab.state import LabPaths
from hpckit.lab.status import LabStatus, NodeStatus
from hpckit.lab.vm import guest, image, net
from hpckit.lab.vm.image import Image, Log
from hpckit.lab.vm.spec import VmSpec
from hpckit.paths import DATA_DIR
from hpckit.proc.ssh import SshTransport

PACKAGE_LIST = DATA_DIR / "vm-packages.txt"
SSH_WAIT_S = 900.0  # emulated CPUs: ~35 s for one machine to reach sshd, ~100 s for four on two cores
# sshd starts a process per connection before it greets: on emulated CPUs on a busy box, seconds.
SSH_GREETING_S = 10.0
QEMU = "qemu-system-x86_64"
_STOP_WAIT_S = 15.0


@dataclass(frozen=True)
class MachineRecord:
    """How to find a running machine again: qemu's pid and start time, and the image under its disk."""

    pid: int
    start: int
    image: str


def is_vm_lab(cluster: str, state_root: Path = DEFAULT_STATE_ROOT) -> bool:
    return _vm_file(LabPaths.of(state_root, cluster)).is_file()


def missing_vm_packages() -> list[str]:
    """Host packages a VM lab needs (qemu, qemu-img, debootstrap ...) that are not installed."""
    return missing_packages(required_packages(PACKAGE_LIST))


# ---------------------------------------------------------------- up


def vm_up(spec: VmSpec, log: Log | None = None) -> LabStatus:
    """Bring every machine of ``spec`` up with sshd answering; machines already up stay as they are.

    Builds the image first when the cache lacks it (minutes). Machines of an earlier `up` that
    ``spec`` no longer lists are stopped and their disks removed.
    """
    guards.require_root()
    missing = missing_vm_packages()
    if missing:
        raise LabError(f"VM labs need these host packages: {' '.join(missing)} (bash scripts/install.sh)")
    built = image.ensure_image(log=log)
    paths = LabPaths.of(spec.lab.state_root, spec.cluster)
    with guards.locked(spec.lab.state_root):
        running = _adopt_previous(spec, paths)
        net.check_host_network(spec)
        guards.check_other_labs(spec.lab)
        _create_state(spec, paths)
        net.ensure_network(spec)
        starting = [n for n in spec.nodes if n.name not in running]
        for node in spec.nodes:
            ssh.generate_key(_host_key(paths, node.name), f"root@{node.name}")
        for node in starting:
            _prepare_machine(spec, paths, node, built)
            _start_machine(spec, paths, node, built)
        _write_known_hosts(spec, paths)
    _wait_for_ssh(spec, paths)
    return vm_status(spec.cluster, spec.lab.state_root)


def _adopt_previous(spec: VmSpec, paths: LabPaths) -> dict[str, MachineRecord]:
    """Records of machines still running from an earlier `up`, after checking they fit ``spec``."""
    if paths.spec_file.exists() and not _vm_file(paths).exists():
        raise LabError(f"lab {spec.cluster!r} is a namespace lab; run `hpckit lab down` first")
    if not _vm_file(paths).exists():
        return {}
    previous = load_spec(paths)
    running = _running(previous, paths)
    if running and (previous.lab.subnet, previous.lab.bridge) != (spec.lab.subnet, spec.lab.bridge):
        raise LabError(f"VM lab {spec.cluster!r} is up with another subnet or link; run `hpckit lab down` first")
    wanted = {n.name: n for n in spec.nodes}
    for name, record in list(running.items()):
        node = wanted.get(name)
        if node is not None and (previous.lab.node(name) != node or previous.memory_of(name) != spec.memory_of(name)):
            raise LabError(
                f"machine {name} of lab {spec.cluster!r} is up with another address or memory; "
                "run `hpckit lab down` first"
            )
        if node is None:
            _stop(record)
            del running[name]
    for gone in previous.nodes:
        if gone.name not in wanted:
            shutil.rmtree(paths.node_dir(gone.name), ignore_errors=True)
    return running


def _create_state(spec: VmSpec, paths: LabPaths) -> None:
    paths.root.mkdir(parents=True, exist_ok=True)
    paths.root.chmod(0o700)  # it holds the lab's private keys
    state.save_spec(paths, spec.lab)
    state.write_atomic(_vm_file(paths), spec.to_json())
    ssh.generate_key(paths.client_key, f"hpckit-lab-{spec.cluster}")


def _prepare_machine(spec: VmSpec, paths: LabPaths, node: LabNode, built: Image) -> None:
    """Seed disk and, unless the machine keeps its disk from an earlier `up` on the same image, a fresh one."""
    folder = paths.node_dir(node.name)
    folder.mkdir(parents=True, exist_ok=True)
    record = load_record(paths, node.name)
    disk = folder / "disk.qcow2"
    if not disk.exists() or record is None or record.image != str(built.folder):
        disk.unlink(missing_ok=True)
        create = ["qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", str(built.base), str(disk)]
        _checked(create, f"creating the disk of machine {node.name}")
    (folder / "seed.tar").write_bytes(seed_tar(_seed_files(spec, paths, node)))


def _seed_files(spec: VmSpec, paths: LabPaths, node: LabNode) -> dict[str, tuple[str, int]]:
    """What the machine unpacks on first boot: path in the machine -> (text, mode)."""
    key = _host_key(paths, node.name)
    return {
        "/etc/hostname": (f"{node.name}\n", 0o644),
        "/etc/hosts": (guest.hosts_text({n.name: n.address for n in spec.nodes}), 0o644),
        "/etc/ssh/ssh_host_ed25519_key": (key.read_text(encoding="ascii"), 0o600),
        "/etc/ssh/ssh_host_ed25519_key.pub": (key.with_name(key.name + ".pub").read_text(encoding="ascii"), 0o644),
        "/etc/ssh/ssh_known_hosts": (ssh.known_hosts_text(spec.lab, _host_keys(spec, paths)), 0o644),
        "/root/.ssh/authorized_keys": (ssh.public_key(paths.client_key) + "\n", 0o600),
    }


def seed_tar(files: Mapping[str, tuple[str, int]]) -> bytes:
    """A tar archive of ``files``, owned by root; /root/.ssh as a 0700 directory of its own."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as tar:
        folder = tarfile.TarInfo("root/.ssh")
        folder.type, folder.mode = tarfile.DIRTYPE, 0o700
        tar.addfile(folder)
        for path, (text, mode) in sorted(files.items()):
            data = text.encode()
            info = tarfile.TarInfo(path.lstrip("/"))
            info.size, info.mode, info.mtime = len(data), mode, 0
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _write_known_hosts(spec: VmSpec, paths: LabPaths) -> None:
    state.write_atomic(paths.known_hosts, ssh.known_hosts_text(spec.lab, _host_keys(spec, paths)))


def _host_keys(spec: VmSpec, paths: LabPaths) -> dict[str, str]:
    return {n.name: ssh.public_key(_host_key(paths, n.name)) for n in spec.nodes}


def _host_key(paths: LabPaths, name: str) -> Path:
    return paths.node_dir(name) / "ssh_host_ed25519_key"


def machine_mac(address: str) -> str:
    """A fixed, locally administered MAC per address, as the namespace lab's: ARP caches survive a restart."""
    return node_mac(LabNode("m", address))


def qemu_argv(spec: VmSpec, node: LabNode, folder: Path, built: Image, tap: str) -> list[str]:
    """qemu's command line for one machine. Software emulation (tb-size keeps its code cache, and so the
    process, small); the kernel booted directly; no -no-reboot: a reboot inside restarts the machine."""
    cmdline = guest.kernel_cmdline(node.address, spec.lab.network.prefixlen, node.name)
    return [
        QEMU,
        "-name", f"hpckit-{spec.cluster}-{node.name}",
        "-machine", "pc",
        "-accel", "tcg,tb-size=64",
        "-cpu", "max",
        "-smp", str(spec.cpus),
        "-m", str(spec.memory_of(node.name)),
        "-kernel", str(built.kernel),
        "-initrd", str(built.initrd),
        "-append", cmdline,
        # cache=unsafe: a lab machine's disk is thrown away with it; its guest's fsyncs need not reach this disk
        "-drive", f"file={folder / 'disk.qcow2'},format=qcow2,if=virtio,cache=unsafe",
        "-drive", f"file={folder / 'seed.tar'},format=raw,if=virtio,readonly=on",
        "-netdev", f"tap,id=net0,ifname={tap},script=no,downscript=no",
        "-device", f"virtio-net-pci,netdev=net0,mac={machine_mac(node.address)}",
        "-device", "virtio-rng-pci",
        "-display", "none",
        "-vga", "none",
        "-monitor", "none",
        "-serial", f"file:{folder / 'console.log'}",
        "-pidfile", str(folder / "qemu.pid"),
        "-daemonize",
    ]  # fmt: skip


def _start_machine(spec: VmSpec, paths: LabPaths, node: LabNode, built: Image) -> None:
    folder = paths.node_dir(node.name)
    tap = net.ensure_tap(spec, node)
    pidfile = folder / "qemu.pid"
    pidfile.unlink(missing_ok=True)
    argv = ["ip", "netns", "exec", spec.netns, *qemu_argv(spec, node, folder, built, tap)]
    _checked(argv, f"starting machine {node.name}", timeout=120)
    pid = int(pidfile.read_text(encoding="ascii").strip())
    started = procs.start_time(pid)
    if started is None:
        raise LabError(f"machine {node.name}: qemu (pid {pid}) exited at once; see {folder / 'console.log'}")
    save_record(paths, node.name, MachineRecord(pid, started, str(built.folder)))


def _wait_for_ssh(spec: VmSpec, paths: LabPaths) -> None:
    """Until every machine's sshd answers; a machine whose qemu died or that stays silent is an error."""
    deadline = time.monotonic() + SSH_WAIT_S
    waiting = list(spec.nodes)
    while waiting:
        waiting = [n for n in waiting if not ssh.sshd_answers(n.address, timeout=SSH_GREETING_S)]
        for node in waiting:
            record = load_record(paths, node.name)
            if record is None or not procs.is_alive(record.pid, record.start):
                raise LabError(f"machine {node.name} stopped while booting:\n{_console_tail(paths, node.name)}")
        if waiting and time.monotonic() > deadline:
            names = ", ".join(n.name for n in waiting)
            raise LabError(
                f"sshd on {names} does not answer after {SSH_WAIT_S:.0f} s; "
                f"console of {waiting[0].name}:\n{_console_tail(paths, waiting[0].name)}"
            )
        if waiting:
            time.sleep(1.0)


def _console_tail(paths: LabPaths, name: str, lines: int = 15) -> str:
    console = paths.node_dir(name) / "console.log"
    try:
        text = console.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return f"(no console log at {console})"
    return "\n".join(text.splitlines()[-lines:]) + f"\n(all of it: {console})"


# ---------------------------------------------------------------- down


def vm_down(cluster: str, state_root: Path = DEFAULT_STATE_ROOT) -> None:
    """Stop every machine (by the pid recorded), remove the namespace, the host link and every disk."""
    guards.require_root()
    paths = LabPaths.of(state_root, cluster)
    if not paths.root.exists():
        return
    with guards.locked(state_root):
        spec = load_spec(paths)
        records = [r for r in (load_record(paths, n.name) for n in spec.nodes) if r is not None]
        for record in records:  # kill them all first, then wait: faster than one by one
            procs.kill_exactly(record.pid, record.start)
        for record in records:
            _stop(record)
        net.remove_network(spec)
        shutil.rmtree(paths.root)


def _stop(record: MachineRecord) -> None:
    procs.kill_exactly(record.pid, record.start)
    if not procs.wait_gone(record.pid, record.start, _STOP_WAIT_S):
        raise LabError(f"qemu (pid {record.pid}) does not exit")


# ---------------------------------------------------------------- status, exec


def vm_status(cluster: str, state_root: Path = DEFAULT_STATE_ROOT) -> LabStatus:
    paths = LabPaths.of(state_root, cluster)
    spec = load_spec(paths)
    running = _running(spec, paths)

    def one(node: LabNode) -> NodeStatus:
        record = running.get(node.name)
        answers = record is not None and ssh.sshd_answers(node.address, timeout=SSH_GREETING_S)
        return NodeStatus(node.name, node.address, 0, record is not None, record.pid if record else None, answers)

    with ThreadPoolExecutor(max_workers=8) as pool:
        nodes = tuple(pool.map(one, spec.nodes))
    lab = spec.lab
    return LabStatus(lab.cluster, lab.bridge, lab.subnet, lab.host_address, paths.root, nodes)


def vm_transport(cluster: str, node_name: str, state_root: Path = DEFAULT_STATE_ROOT) -> SshTransport:
    """Commands on a machine as root, over SSH with the lab's key (close it when done)."""
    node, identity = _reach(cluster, node_name, state_root)
    return SshTransport(node.address, key_file=identity.private_key, known_hosts=identity.known_hosts, where=node.name)


def vm_exec_argv(cluster: str, node_name: str, argv: Sequence[str], state_root: Path = DEFAULT_STATE_ROOT) -> list[str]:
    """The ssh command line that runs ``argv`` on a machine, for callers that want its terminal."""
    if not argv:
        raise LabError("lab exec needs a command")
    node, identity = _reach(cluster, node_name, state_root)
    return identity.ssh_command(node.address, shlex.join(argv))


def _reach(cluster: str, node_name: str, state_root: Path) -> tuple[LabNode, SshIdentity]:
    paths = LabPaths.of(state_root, cluster)
    node = load_spec(paths).lab.node(node_name)
    record = load_record(paths, node_name)
    if record is None or not procs.is_alive(record.pid, record.start):
        raise LabError(f"machine {node_name} of lab {cluster!r} is not running (`hpckit lab up` starts it)")
    return node, SshIdentity(user="root", private_key=paths.client_key, known_hosts=paths.known_hosts)


# ---------------------------------------------------------------- state


def _vm_file(paths: LabPaths) -> Path:
    return paths.root / "vm.json"


def load_spec(paths: LabPaths) -> VmSpec:
    try:
        text = _vm_file(paths).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise LabError(f"no VM lab {paths.root.name!r} under {paths.root.parent} (is it up?)") from None
    return VmSpec.from_json(text, origin=str(_vm_file(paths)))


def _running(spec: VmSpec, paths: LabPaths) -> dict[str, MachineRecord]:
    found = {n.name: load_record(paths, n.name) for n in spec.nodes}
    return {name: r for name, r in found.items() if r is not None and procs.is_alive(r.pid, r.start)}


def save_record(paths: LabPaths, name: str, record: MachineRecord) -> None:
    state.write_atomic(paths.node_dir(name) / "machine.json", json.dumps(asdict(record)) + "\n")


def load_record(paths: LabPaths, name: str) -> MachineRecord | None:
    path = paths.node_dir(name) / "machine.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return MachineRecord(int(data["pid"]), int(data["start"]), str(data["image"]))
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError) as exc:
        raise LabError(f"{path} is damaged ({exc}); run `hpckit lab down`") from None


def _checked(argv: Sequence[str], what: str, timeout: float = 60) -> None:
    result = proc.run(argv, timeout=timeout)
    if result.rc != 0:
        raise LabError(f"{what} failed: {(result.stderr or result.stdout).strip()}")
