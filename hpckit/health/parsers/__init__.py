"""Pure parsers of GPU and InfiniBand tool output: text in, frozen dataclasses out.

Every parser raises :class:`HwParseError` (source, line, message) for text it cannot read. Nothing here
runs a command or touches the network; ``read_sysfs_ports`` only reads files under the root it is given.
"""

from hpckit.health.parsers.dcgmi import (
    DcgmDiag,
    DcgmMessage,
    DcgmTest,
    parse_dcgmi_diag,
    parse_dcgmi_diag_all,
)
from hpckit.health.parsers.errors import HwParseError
from hpckit.health.parsers.ib import (
    IbCa,
    IbFabric,
    IbLink,
    IbNode,
    IbPort,
    IbstatReport,
    parse_ibnetdiscover,
    parse_ibstat,
    parse_ibstat_report,
    parse_ibstatus,
    read_sysfs_ports,
)
from hpckit.health.parsers.nvidia_smi import (
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
from hpckit.health.parsers.xid import XID_CLASSES, XidClass, XidEvent, classify_xid, parse_xid_events

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
