"""hpckit.lab: Linux-namespace machines on one Debian box, each with its own IP, hostname and sshd.

spec = LabSpec(cluster="lab", nodes=(LabNode("ctl", "10.77.0.10"), LabNode("node1", "10.77.0.21", gpus=2)))
lab_up(spec)                      # idempotent
lab_exec("lab", "node1", ["hostname"])
ssh_identity("lab")               # key + known_hosts for Ansible / fabric, user root
lab_down("lab")                   # nothing left behind

VM labs (hpckit.lab.vm): vm_up(VmSpec) brings up virtual machines; status, exec, ssh_identity and down
are the same calls.
"""

from hpckit.lab.blueprint import spec_from_blueprint, vm_spec_from_blueprint
from hpckit.lab.errors import LabError
from hpckit.lab.packages import install_packages, missing_packages, required_packages
from hpckit.lab.provider import (
    exec_argv,
    lab_down,
    lab_exec,
    lab_status,
    lab_up,
    list_labs,
    node_start_sshd,
    node_stop_sshd,
    shared_dir_source,
    ssh_identity,
)
from hpckit.lab.spec import DEFAULT_STATE_ROOT, LabNode, LabSpec
from hpckit.lab.ssh import NODE_PYTHON, SshIdentity
from hpckit.lab.status import LabStatus, NodeStatus
from hpckit.lab.vm.image import cached_image, ensure_image
from hpckit.lab.vm.machines import is_vm_lab, missing_vm_packages, vm_up
from hpckit.lab.vm.spec import VmSpec

__all__ = [
    "DEFAULT_STATE_ROOT",
    "NODE_PYTHON",
    "LabError",
    "LabNode",
    "LabSpec",
    "LabStatus",
    "NodeStatus",
    "SshIdentity",
    "VmSpec",
    "cached_image",
    "ensure_image",
    "exec_argv",
    "install_packages",
    "is_vm_lab",
    "lab_down",
    "lab_exec",
    "lab_status",
    "lab_up",
    "list_labs",
    "missing_packages",
    "missing_vm_packages",
    "node_start_sshd",
    "node_stop_sshd",
    "required_packages",
    "shared_dir_source",
    "spec_from_blueprint",
    "ssh_identity",
    "vm_spec_from_blueprint",
    "vm_up",
]
