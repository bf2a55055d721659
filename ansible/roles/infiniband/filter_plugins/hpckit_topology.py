"""Ansible filter ``hpckit_topology_conf``: ibnetdiscover output -> Slurm topology.conf, by hpckit's generator.

Ansible runs from hpckit's own environment, where hpckit is importable; from a source checkout that is
not installed, the checkout this file lives in is used.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from ansible.errors import AnsibleFilterError


def _gpu_vars() -> ModuleType:
    try:
        from hpckit.deploy import gpu_vars
    except ImportError:
        checkout = Path(__file__).resolve().parents[4]  # <checkout>/ansible/roles/infiniband/filter_plugins
        if not (checkout / "hpckit" / "__init__.py").is_file():
            raise AnsibleFilterError("hpckit_topology_conf needs hpckit importable by Ansible's Python") from None
        sys.path.insert(0, str(checkout))
        from hpckit.deploy import gpu_vars
    return gpu_vars


def hpckit_topology_conf(text: Any, nodes: Any) -> str:
    """topology.conf for the Slurm nodes ``nodes``; "" when none of them is on the fabric."""
    try:
        return str(_gpu_vars().topology_for(str(text), [str(n) for n in nodes]))
    except ValueError as exc:  # the parser's HwParseError says where the dump is unreadable
        raise AnsibleFilterError(f"cannot read the ibnetdiscover output: {exc}") from None


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"hpckit_topology_conf": hpckit_topology_conf}
