"""The lab provider: bring a LabSpec's nodes up, report on them, run commands in them, take them down.

Every call finds the lab again from its state dir, so `down`, `status` and `exec` work from any
process. Calls that change a lab hold a lock on the state root.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path, PurePosixPath
from typing import TypeVar

from hpckit.lab import etcfiles, guards, net, node, procs, ssh, state
from hpckit.lab.errors import LabError
from hpckit.lab.packages import missing_packages
from hpckit.lab.spec import DEFAULT_STATE_ROOT, LabNode, LabSpec
from hpckit.lab.ssh import SshIdentity
from hpckit.lab.state import LabPaths, NodeRecord
from hpckit.lab.status import LabStatus, NodeStatus
from hpckit.lab.vm import machines
from hpckit.proc import CommandResult, Transport

SSHD_WAIT_S = 30.0
_MAX_PARALLEL = 8
_T = TypeVar("_T")


# ---------------------------------------------------------------- up


def lab_up(spec: LabSpec) -> LabStatus:
    """Bring every node of ``spec`` up with sshd answering; nodes already up stay as they are.

    Nodes of an earlier `up` that ``spec`` no longer lists are stopped and forgotten.
    """
    guards.require_root()
    missing = missing_packages()
    if missing:
        raise LabError(f"the lab needs these host packages: {' '.join(missing)} (run `hpckit lab install-packages`)")
    if _under_private_root(str(spec.state_root)):
        raise LabError(f"state root {spec.state_root} lies in a directory each node replaces with its own")
    paths = LabPaths.of(spec.state_root, spec.cluster)
    with guards.locked(spec.state_root):
        if machines.is_vm_lab(spec.cluster, spec.state_root):
            raise LabError(f"lab {spec.cluster!r} is a VM lab; run `hpckit lab down` first")
        records = _adopt_previous(spec, paths)
        net.check_host_network(spec)
        guards.check_other_labs(spec)
        _create_state(spec, paths)
        net.ensure_bridge(spec)
        _prepare_shared_dirs(spec, paths)
        starting = [n for n in spec.nodes if n.name not in records]
        for lab_node in starting:
            _prepare_node(spec, paths, lab_node)
        _write_lab_files(spec, paths, records)
        _ensure_shared_mounts(spec, paths, records)
        records.update(_parallel(starting, lambda n: _start_node(spec, paths, n)))
        _ensure_sshd(spec, records)
    return lab_status(spec.cluster, spec.state_root)


def _adopt_previous(spec: LabSpec, paths: LabPaths) -> dict[str, NodeRecord]:
    """Records of nodes still running from an earlier `up`, after checking they fit ``spec``."""
    if not paths.spec_file.exists():
        return {}
    previous = state.load_spec(paths)
    running = _running_records(previous, paths)
    if running and _lab_shape(previous) != _lab_shape(spec):
        raise LabError(
            f"lab {spec.cluster!r} is up with another subnet, bridge or shared dirs; run `hpckit lab down` first"
        )
    wanted = {n.name: n for n in spec.nodes}
    for name in running:
        if name in wanted and previous.node(name) != wanted[name]:
            raise LabError(
                f"node {name} of lab {spec.cluster!r} is up with another address or GPU count; "
                "run `hpckit lab down` first"
            )
    for name in [n for n in running if n not in wanted]:
        node.stop(running.pop(name))
    for lab_node in previous.nodes:
        if lab_node.name not in wanted:
            net.delete_link(previous.veth_name(lab_node))
            shutil.rmtree(paths.node_dir(lab_node.name), ignore_errors=True)
    return running


def _lab_shape(spec: LabSpec) -> tuple[str, str, tuple[str, ...]]:
    return (spec.subnet, spec.bridge, spec.shared_dirs)


def _running_records(spec: LabSpec, paths: LabPaths) -> dict[str, NodeRecord]:
    records = {}
    for lab_node in spec.nodes:
        record = state.load_record(paths, lab_node.name)
        if record is not None and procs.is_alive(record.init_pid, record.init_start):
            records[lab_node.name] = record
    return records


def _create_state(spec: LabSpec, paths: LabPaths) -> None:
    paths.root.mkdir(parents=True, exist_ok=True)
    paths.root.chmod(0o700)  # it holds the lab's private keys
    state.save_spec(paths, spec)
    ssh.generate_key(paths.client_key, f"hpckit-lab-{spec.cluster}")


def _prepare_shared_dirs(spec: LabSpec, paths: LabPaths) -> None:
    """Create each shared dir's host side, and its mount point where the host lacks one."""
    created = state.load_mountpoints(paths)
    for shared in spec.shared_dirs:
        paths.shared_source(shared).mkdir(parents=True, exist_ok=True)
        if not _under_private_root(shared):
            created += _mkdirs(Path(shared))
    state.save_mountpoints(paths, created)


def visible_in_nodes(path: str) -> bool:
    """Whether a path of this machine is the same path inside every node (not under a node-private root)."""
    return not _under_private_root(path)


def _under_private_root(path: str) -> bool:
    p = PurePosixPath(path)
    return any(p == PurePosixPath(r) or PurePosixPath(r) in p.parents for r in node.PRIVATE_ROOTS)


def _mkdirs(path: Path) -> list[str]:
    """mkdir -p, returning the directories it created (so `down` can remove exactly those)."""
    missing = [p for p in (path, *path.parents) if not p.exists()]
    for p in reversed(missing):
        p.mkdir()
    return [str(p) for p in missing]


def _prepare_node(spec: LabSpec, paths: LabPaths, lab_node: LabNode) -> None:
    dirs = node.node_dirs(paths, lab_node)
    node.prepare_dirs(dirs)
    host_key = dirs.upper("/etc") / "ssh" / "ssh_host_ed25519_key"
    node.make_etc_dir(dirs, "ssh")
    ssh.generate_key(host_key, f"root@{lab_node.name}")
    for rel, (text, mode) in etcfiles.node_files(spec, lab_node, paths.client_key).items():
        node.write_etc_file(dirs, None, rel, text, mode)
    dirs.boot_script.write_text(node.boot_script(spec, paths, lab_node), encoding="utf-8")


def _write_lab_files(spec: LabSpec, paths: LabPaths, records: Mapping[str, NodeRecord]) -> None:
    """Hosts and known_hosts list every node: (re)write them on every node and on the host side."""
    host_keys = {
        n.name: ssh.public_key(node.node_dirs(paths, n).upper("/etc") / "ssh" / "ssh_host_ed25519_key")
        for n in spec.nodes
    }
    files = etcfiles.lab_files(spec, host_keys)
    for lab_node in spec.nodes:
        dirs = node.node_dirs(paths, lab_node)
        for rel, (text, mode) in files.items():
            node.write_etc_file(dirs, records.get(lab_node.name), rel, text, mode)
    paths.known_hosts.write_text(ssh.known_hosts_text(spec, host_keys), encoding="utf-8")


def _start_node(spec: LabSpec, paths: LabPaths, lab_node: LabNode) -> NodeRecord:
    record = node.launch(paths, lab_node)
    state.save_record(paths, lab_node.name, record)  # at once: an interrupted `up` must not hide a node from `down`
    try:
        net.attach_node(spec, lab_node, record.init_pid)
        in_node = node.NodeTransport(record, lab_node.name)
        result = in_node.run(["ip", "-batch", "-"], stdin=net.node_network_batch(spec, lab_node))
        if result.rc != 0:
            raise LabError(f"node {lab_node.name}: network setup failed: {result.stderr.strip()}")
    except LabError:
        node.stop(record)
        raise
    node.start_sshd(record, lab_node)
    return record


def _ensure_shared_mounts(spec: LabSpec, paths: LabPaths, records: Mapping[str, NodeRecord]) -> None:
    """A running node whose shared dir was unmounted (by hand, by a test) gets it bound again."""
    for name, record in records.items():
        try:
            mountinfo = Path(f"/proc/{record.init_pid}/mountinfo").read_text(encoding="utf-8")
        except OSError:
            continue
        mounted = {line.split()[4] for line in mountinfo.splitlines() if len(line.split()) > 4}
        for shared in spec.shared_dirs:
            if shared in mounted:
                continue
            source = str(paths.shared_source(shared))
            bind = ["sh", "-c", 'mkdir -p "$2" && mount --bind "$1" "$2"', "sh", source, shared]
            done = node.NodeTransport(record, name).run(bind)
            if done.rc != 0:
                raise LabError(f"node {name}: cannot mount {shared} again: {done.stderr.strip()}")


def _ensure_sshd(spec: LabSpec, records: Mapping[str, NodeRecord]) -> None:
    """Start sshd where it does not answer, then wait until every node's does."""
    silent = [n for n in spec.nodes if not ssh.sshd_answers(n.address, timeout=1.0)]
    _parallel(silent, lambda n: node.start_sshd(records[n.name], n))
    deadline = time.monotonic() + SSHD_WAIT_S
    for lab_node in spec.nodes:
        while not ssh.sshd_answers(lab_node.address, timeout=1.0):
            if time.monotonic() > deadline:
                raise LabError(f"sshd on node {lab_node.name} ({lab_node.address}) does not answer")
            time.sleep(0.1)


def _parallel(items: Sequence[LabNode], work: Callable[[LabNode], _T]) -> dict[str, _T]:
    """Run ``work`` for each node on a few threads; every failure is reported, not just the first."""
    if not items:
        return {}
    results: dict[str, _T] = {}
    errors: list[str] = []
    with ThreadPoolExecutor(max_workers=min(_MAX_PARALLEL, len(items))) as pool:
        futures = {n.name: pool.submit(work, n) for n in items}
        for name, future in futures.items():
            try:
                results[name] = future.result()
            except LabError as exc:
                errors.append(str(exc))
    if errors:
        raise LabError("\n".join(errors) + "\n(nodes that came up are still running; `hpckit lab down` stops all)")
    return results


# ---------------------------------------------------------------- down


def lab_down(cluster: str, state_root: Path = DEFAULT_STATE_ROOT) -> None:
    """Stop every node and remove the lab's links, bridge, mount points and state dir."""
    if machines.is_vm_lab(cluster, state_root):
        machines.vm_down(cluster, state_root)
        return
    guards.require_root()
    paths = LabPaths.of(state_root, cluster)
    if not paths.root.exists():
        return
    with guards.locked(state_root):
        spec = state.load_spec(paths) if paths.spec_file.exists() else None
        _stop_all(paths)
        if spec is not None:
            for lab_node in spec.nodes:
                net.delete_link(spec.veth_name(lab_node))
            net.delete_link(spec.bridge)
        _remove_mountpoints(paths)
        shutil.rmtree(paths.root)


def _stop_all(paths: LabPaths) -> None:
    nodes_dir = paths.root / "nodes"
    names = sorted(p.name for p in nodes_dir.iterdir()) if nodes_dir.is_dir() else []
    records = [r for r in (state.load_record(paths, name) for name in names) if r is not None]
    for record in records:  # kill them all first, then wait: much faster than one by one
        procs.kill_exactly(record.init_pid, record.init_start)
    for record in records:
        node.stop(record)


def _remove_mountpoints(paths: LabPaths) -> None:
    for path in sorted(state.load_mountpoints(paths), key=len, reverse=True):
        try:
            Path(path).rmdir()
        except FileNotFoundError:
            pass
        except OSError:
            pass  # something was put there meanwhile: not ours to delete


# ---------------------------------------------------------------- status, exec, ssh


def lab_status(cluster: str, state_root: Path = DEFAULT_STATE_ROOT) -> LabStatus:
    if machines.is_vm_lab(cluster, state_root):
        return machines.vm_status(cluster, state_root)
    paths = LabPaths.of(state_root, cluster)
    spec = state.load_spec(paths)
    records = _running_records(spec, paths)

    def one(lab_node: LabNode) -> NodeStatus:
        record = records.get(lab_node.name)
        up = record is not None
        answers = up and ssh.sshd_answers(lab_node.address, timeout=1.0)
        pid = record.init_pid if record is not None else None
        return NodeStatus(lab_node.name, lab_node.address, lab_node.gpus, up, pid, answers)

    with ThreadPoolExecutor(max_workers=_MAX_PARALLEL) as pool:
        nodes = tuple(pool.map(one, spec.nodes))
    return LabStatus(spec.cluster, spec.bridge, spec.subnet, spec.host_address, paths.root, nodes)


def lab_exec(
    cluster: str,
    node_name: str,
    argv: Sequence[str],
    *,
    state_root: Path = DEFAULT_STATE_ROOT,
    stdin: str | None = None,
    timeout: float | None = None,
    env: Mapping[str, str] | None = None,
) -> CommandResult:
    """Run ``argv`` inside a node's namespaces (as root, from /), or on a VM lab's machine over SSH; output is
    captured as text."""
    guards.require_root()
    if not argv:
        raise LabError("lab exec needs a command")
    transport: Transport
    if machines.is_vm_lab(cluster, state_root):
        transport = machines.vm_transport(cluster, node_name, state_root)
    else:
        transport = node.NodeTransport(_running_record(cluster, node_name, state_root), node_name)
    try:
        return transport.run(argv, stdin=stdin, timeout=timeout, env=env)
    finally:
        transport.close()


def exec_argv(cluster: str, node_name: str, argv: Sequence[str], state_root: Path = DEFAULT_STATE_ROOT) -> list[str]:
    """The host command line that runs ``argv`` in a node, for callers that want its terminal (the CLI), with the
    environment an SSH session on the node gets (a VM lab's goes over SSH): this shell's PATH would miss what
    is installed for the node alone, such as a login node's hpckit."""
    if machines.is_vm_lab(cluster, state_root):
        return machines.vm_exec_argv(cluster, node_name, argv, state_root)
    guards.require_root()
    if not argv:
        raise LabError("lab exec needs a command")
    session = [f"{k}={v}" for k, v in ssh.session_environment(os.environ).items()]
    return node.nsenter_argv(_running_record(cluster, node_name, state_root), ["env", "-i", *session, *argv])


def list_labs(state_root: Path = DEFAULT_STATE_ROOT) -> list[str]:
    """Names of the labs with state under ``state_root`` (up, or partly up)."""
    if not state_root.is_dir():
        return []
    return sorted(p.parent.name for p in state_root.glob("*/spec.json"))


def ssh_identity(cluster: str, state_root: Path = DEFAULT_STATE_ROOT) -> SshIdentity:
    """The key and known_hosts file that let Ansible or fabric log in to every node as root."""
    paths = LabPaths.of(state_root, cluster)
    if not paths.client_key.exists():
        raise LabError(f"lab {cluster!r} has no ssh key under {paths.ssh_dir} (is it up?)")
    return SshIdentity(user="root", private_key=paths.client_key, known_hosts=paths.known_hosts)


def shared_dir_source(cluster: str, shared_dir: str, state_root: Path = DEFAULT_STATE_ROOT) -> Path:
    """Where a shared directory's contents live on the host."""
    spec = state.load_spec(LabPaths.of(state_root, cluster))
    if shared_dir not in spec.shared_dirs:
        raise LabError(f"lab {cluster!r} has no shared dir {shared_dir!r} (has: {', '.join(spec.shared_dirs)})")
    return LabPaths.of(state_root, cluster).shared_source(shared_dir)


def node_stop_sshd(
    cluster: str, node_name: str, state_root: Path = DEFAULT_STATE_ROOT, *, sessions: bool = False
) -> None:
    """Stop a node's sshd (the node keeps running): what a test needs for 'a node SSH cannot reach'. New
    connections are refused; those already open stay unless ``sessions``, which ends them too: a node lost
    in the middle of a run."""
    guards.require_root()
    spec = state.load_spec(LabPaths.of(state_root, cluster))
    lab_node = spec.node(node_name)
    node.stop_sshd(_running_record(cluster, node_name, state_root), lab_node, sessions=sessions)
    deadline = time.monotonic() + SSHD_WAIT_S
    while ssh.sshd_answers(lab_node.address, timeout=0.5):
        if time.monotonic() > deadline:
            raise LabError(f"sshd on node {node_name} still answers after stop")
        time.sleep(0.05)


def node_start_sshd(cluster: str, node_name: str, state_root: Path = DEFAULT_STATE_ROOT) -> None:
    guards.require_root()
    spec = state.load_spec(LabPaths.of(state_root, cluster))
    lab_node = spec.node(node_name)
    node.start_sshd(_running_record(cluster, node_name, state_root), lab_node)
    deadline = time.monotonic() + SSHD_WAIT_S
    while not ssh.sshd_answers(lab_node.address, timeout=0.5):
        if time.monotonic() > deadline:
            raise LabError(f"sshd on node {node_name} does not answer after start")
        time.sleep(0.05)


def _running_record(cluster: str, node_name: str, state_root: Path) -> NodeRecord:
    paths = LabPaths.of(state_root, cluster)
    state.load_spec(paths).node(node_name)  # a clear error for an unknown node
    record = state.load_record(paths, node_name)
    if record is None or not procs.is_alive(record.init_pid, record.init_start):
        raise LabError(f"node {node_name} of lab {cluster!r} is not running (`hpckit lab up` starts it)")
    return record
