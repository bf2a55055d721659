"""Where a blueprint's hosts are and how to reach them: the lab's namespace machines or static hosts."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from hpckit.blueprint.models import Blueprint, StaticProvider, VmProvider
from hpckit.clusters import SshAccess
from hpckit.deploy.inventory import host_entries
from hpckit.deploy.wheel import checkout_wheel
from hpckit.lab.blueprint import spec_from_blueprint, vm_spec_from_blueprint
from hpckit.lab.errors import LabError
from hpckit.lab.node import PRIVATE_ROOTS
from hpckit.lab.provider import lab_status, lab_up, ssh_identity, visible_in_nodes
from hpckit.lab.spec import LabSpec
from hpckit.lab.ssh import NODE_BIN
from hpckit.lab.vm.machines import vm_up
from hpckit.paths import PACKAGE_DIR, cache_dir
from hpckit.proc.ssh import SshTransport
from hpckit.slurm.connect import ssh_transport


@dataclass(frozen=True)
class Target:
    cluster: str
    access: SshAccess
    addresses: dict[str, str]  # host -> address SSH uses (the name itself when none is declared)
    lab: bool
    # Lab hosts of the blueprint whose machine is not running (a plan leaves them so; deploy starts them).
    not_started: tuple[str, ...] = ()
    # What depends on this machine rather than the blueprint (lab_extravars, vm_extravars).
    runtime: Mapping[str, str] = field(default_factory=dict)

    def runtime_extravars(self) -> dict[str, str]:
        return dict(self.runtime)

    def transport(self, host: str) -> SshTransport:
        return ssh_transport(self.access, self.addresses.get(host, host), host)


def lab_extravars(access: SshAccess) -> dict[str, str]:
    """Lab nodes share this machine's filesystem, so the login node runs hpckit straight from the interpreter
    and source tree running this deploy, and the sweep host checks nodes over SSH with the lab's own key."""
    return {
        "hpckit_install_mode": "shared",
        "hpckit_python": sys.executable,
        "hpckit_source": str(PACKAGE_DIR.parent),
        "hpckit_login_bin": f"{NODE_BIN}/hpckit",  # node-private: never this machine's /usr/local/bin
        "hpckit_health_probe_key": access.key_file or "",
        "hpckit_health_probe_known_hosts": access.known_hosts or "",
        # Lab nodes see this machine's hpckit cache at the same path (hpckit.lab.node), so a Slurm build on a
        # lab controller lands in, and is found in, it.
        "slurm_build_cache_dir": str(cache_dir()),
    }


def vm_extravars(wheel: Path) -> dict[str, str]:
    """VMs have a filesystem of their own and no network beyond the cluster's: the login node and the compute
    nodes (which run the health checks) pip-install the wheel of this checkout into the image's virtualenv,
    which holds hpckit's dependencies already, without an index."""
    return {
        "hpckit_install_mode": "wheel",
        "hpckit_login_wheel": str(wheel),
        "hpckit_login_pip_extra_args": "--no-index --no-deps",
    }


def check_lab_can_run_hpckit() -> None:
    """Lab nodes run hpckit from this machine's filesystem, but each has its own /tmp, /etc, /run ...:
    an hpckit installed under one of those is invisible there. Refuse before Ansible starts, saying so."""
    wanted = {"this Python environment": sys.prefix, "the hpckit package": str(PACKAGE_DIR)}
    hidden = [f"{what} ({path})" for what, path in wanted.items() if not visible_in_nodes(os.path.realpath(path))]
    if hidden:
        raise LabError(
            f"lab nodes cannot see {' or '.join(hidden)}: each node has its own {', '.join(PRIVATE_ROOTS)}. "
            "Install hpckit elsewhere (e.g. python3 -m venv /opt/hpckit) and deploy from there"
        )


def _not_running(spec: LabSpec) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The spec's nodes whose machine does not run (all of them when the lab is down, the added ones when
    the blueprint gained nodes), and the running machines the spec no longer has (removed from the
    blueprint: `lab up` stops them, slurmd with them). A node whose sshd is down counts as running: deploy
    reports it, it does not heal it."""
    try:
        status = lab_status(spec.cluster, spec.state_root)
    except LabError:
        return tuple(n.name for n in spec.nodes), ()
    up = {n.name for n in status.nodes if n.up}
    wanted = {n.name for n in spec.nodes}
    return tuple(n.name for n in spec.nodes if n.name not in up), tuple(sorted(up - wanted))


def prepare_target(bp: Blueprint, *, bring_up_lab: bool = True) -> Target:
    """For a lab blueprint, bring the lab up (idempotent; nodes added to the blueprint are started) and use
    its SSH identity. With ``bring_up_lab=False`` nothing is started and the target lists what is not."""
    addresses = {e.name: e.address or e.name for e in host_entries(bp)}
    if isinstance(bp.provider, StaticProvider):
        ssh = bp.provider.ssh
        key = str(Path(ssh.key).expanduser()) if ssh.key else None
        return Target(bp.cluster_name, SshAccess(ssh.user, ssh.port, key), addresses, lab=False)
    if isinstance(bp.provider, VmProvider):
        return _vm_target(bp, addresses, bring_up_lab)
    check_lab_can_run_hpckit()
    spec = spec_from_blueprint(bp)
    not_started, removed = _not_running(spec)
    if bring_up_lab and (not_started or removed):
        # lab_up starts only the missing machines and stops the removed ones; running ones (and their
        # jobs) are left as they are, and every node's /etc/hosts and known hosts are rewritten.
        lab_up(spec)
        not_started = ()
    ident = ssh_identity(spec.cluster, spec.state_root)
    access = SshAccess(ident.user, 22, str(ident.private_key), str(ident.known_hosts))
    return Target(bp.cluster_name, access, addresses, lab=True, not_started=not_started, runtime=lab_extravars(access))


def _vm_target(bp: Blueprint, addresses: dict[str, str], bring_up: bool) -> Target:
    """As the lab's, with virtual machines: started when missing (the image is built first when the cache
    lacks it), reached with the VM lab's key; their hpckit is a wheel of this checkout."""
    spec = vm_spec_from_blueprint(bp)
    not_started, removed = _not_running(spec.lab)
    if bring_up and (not_started or removed):
        vm_up(spec)
        not_started = ()
    ident = ssh_identity(spec.cluster, spec.lab.state_root)
    access = SshAccess(ident.user, 22, str(ident.private_key), str(ident.known_hosts))
    runtime = vm_extravars(checkout_wheel())
    return Target(bp.cluster_name, access, addresses, lab=False, not_started=not_started, runtime=runtime)
