"""``ibnetdiscover`` -> the fabric's switches, adapters and the links between their ports.

The parser is the infiniband role's filter plugin (ansible/roles/infiniband/filter_plugins/hpckit_topology.py),
the one implementation of the fabric and of the topology.conf built from it: it must run under a plain
``ansible-playbook`` that has no hpckit to import, so hpckit loads that file instead of the other way round.
Its dataclasses (IbFabric, IbNode, IbLink) are the ones named here.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from types import ModuleType
from typing import Any

from hpckit.hw.errors import HwParseError
from hpckit.paths import ansible_dir

__all__ = ["IbFabric", "IbLink", "IbNode", "fabric_module", "parse_ibnetdiscover", "topology_module"]

MODULE_NAME = "hpckit_topology_filter"
# The plugin's place under ansible/.
PLUGIN = "roles/infiniband/filter_plugins/hpckit_topology.py"


@cache
def topology_module() -> ModuleType:
    """The infiniband role's filter plugin, loaded once."""
    path = ansible_dir() / PLUGIN
    spec = importlib.util.spec_from_file_location(MODULE_NAME, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[MODULE_NAME] = module  # pickle finds its dataclasses through sys.modules
    spec.loader.exec_module(module)
    return module


@contextmanager
def fabric_module() -> Iterator[ModuleType]:
    """The filter plugin's module, its FabricError raised as HwParseError, as every hardware parser raises."""
    module = topology_module()
    try:
        yield module
    except module.FabricError as exc:
        raise HwParseError(*exc.args) from None


def parse_ibnetdiscover(text: str, source: str = "ibnetdiscover") -> Any:
    """The fabric: an ``IbFabric``."""
    with fabric_module() as module:
        return module.parse_ibnetdiscover(text, source)


IbFabric: Any = topology_module().IbFabric
IbNode: Any = topology_module().IbNode
IbLink: Any = topology_module().IbLink
