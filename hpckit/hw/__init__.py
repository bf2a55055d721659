"""Hardware tool parsers: GPU and InfiniBand tool output (nvidia-smi, ibstat, ibnetdiscover, dcgmi, kernel XID
lines) in, frozen dataclasses out; :mod:`hpckit.hw.nvml` turns NVML's values into the same records.

Every parser raises :class:`HwParseError` (source, line, message) for text it cannot read. Nothing here
runs a command or touches the network; ``read_sysfs_ports`` only reads files under the root it is given.
Health, deploy and preflight all read hardware through this room, which imports no other room of hpckit
(but paths: the ibnetdiscover parser is the infiniband role's filter plugin, see hpckit.hw.fabric).

A name is imported from its module when first asked for: compiling every parser's patterns would cost each
quick health run start-up time that only a GPU or InfiniBand check needs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hpckit.hw.dcgmi import (
        DcgmDiag,
        DcgmMessage,
        DcgmTest,
        parse_dcgmi_diag,
        parse_dcgmi_diag_all,
    )
    from hpckit.hw.errors import HwParseError
    from hpckit.hw.fabric import IbFabric, IbLink, IbNode, parse_ibnetdiscover
    from hpckit.hw.ib import (
        IbCa,
        IbPort,
        IbstatReport,
        parse_ibstat,
        parse_ibstat_report,
        parse_ibstatus,
        read_sysfs_ports,
    )
    from hpckit.hw.nvidia_smi import (
        EccCounts,
        GpuAffinity,
        GpuInfo,
        MigDevice,
        NvlinkGpu,
        NvlinkLink,
        RemappedRows,
        RetiredPages,
        TopoMatrix,
        parse_nvlink_status,
        parse_query_gpu_csv,
        parse_query_q,
        parse_topo_m,
    )
    from hpckit.hw.xid import XID_CLASSES, XidClass, XidEvent, classify_xid, parse_xid_events

__all__ = [
    "XID_CLASSES",
    "DcgmDiag",
    "DcgmMessage",
    "DcgmTest",
    "EccCounts",
    "GpuAffinity",
    "GpuInfo",
    "HwParseError",
    "IbCa",
    "IbFabric",
    "IbLink",
    "IbNode",
    "IbPort",
    "IbstatReport",
    "MigDevice",
    "NvlinkGpu",
    "NvlinkLink",
    "RemappedRows",
    "RetiredPages",
    "TopoMatrix",
    "XidClass",
    "XidEvent",
    "classify_xid",
    "parse_dcgmi_diag",
    "parse_dcgmi_diag_all",
    "parse_ibnetdiscover",
    "parse_ibstat",
    "parse_ibstat_report",
    "parse_ibstatus",
    "parse_nvlink_status",
    "parse_query_gpu_csv",
    "parse_query_q",
    "parse_topo_m",
    "parse_xid_events",
    "read_sysfs_ports",
]

# Searched in this order, the most asked for first; never more than the eager imports this replaces.
_MODULES = ("errors", "meminfo", "nvidia_smi", "xid", "ib", "dcgmi", "fabric")


def __getattr__(name: str) -> Any:
    """PEP 562: ``from hpckit.hw import X`` imports only the module that defines X."""
    if name in __all__:
        for module in _MODULES:
            found = importlib.import_module(f"{__name__}.{module}")
            if name in vars(found):
                return vars(found)[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
