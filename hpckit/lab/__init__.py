"""hpckit.lab: Linux-namespace machines on one Debian box, each with its own IP, hostname and sshd.

spec = LabSpec(cluster="lab", nodes=(LabNode("ctl", "10.77.0.10"), LabNode("node1", "10.77.0.21", gpus=2)))
lab_up(spec)                      # idempotent
lab_exec("lab", "node1", ["hostname"])
ssh_identity("lab")               # key + known_hosts for Ansible / fabric, user root
lab_down("lab")                   # nothing left behind
"""

from hpckit.lab.blueprint import spec_from_blueprint
from hpckit.lab.errors import LabError
from hpckit.lab.packages import install_packages, missing_packages, required_packages
from hpckit.lab.provider import (
    LabStatus,
    NodeStatus,
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

__all__ = [
    "DEFAULT_STATE_ROOT",
    "NODE_PYTHON",
    "LabError",
    "LabNode",
    "LabSpec",
    "LabStatus",
    "NodeStatus",
    "SshIdentity",
    "exec_argv",
    "install_packages",
    "lab_down",
    "lab_exec",
    "lab_status",
    "lab_up",
    "list_labs",
    "missing_packages",
    "node_start_sshd",
    "node_stop_sshd",
    "required_packages",
    "shared_dir_source",
    "spec_from_blueprint",
    "ssh_identity",
]
