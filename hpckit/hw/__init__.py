"""Hardware tool parsers: GPU and InfiniBand tool output (nvidia-smi, ibstat, ibnetdiscover, dcgmi, kernel XID
lines) in, frozen dataclasses out; :mod:`hpckit.hw.nvml` turns NVML's values into the same records.

Every parser raises :class:`HwParseError` (source, line, message) for text it cannot read. Nothing here
runs a command or touches the network; ``read_sysfs_ports`` only reads files under the root it is given.
Health, deploy and preflight all read hardware through this room, which imports no other room of hpckit.
"""

from hpckit.hw.dcgmi import (
    DcgmDiag,
    DcgmMessage,
    DcgmTest,
    parse_dcgmi_diag,
    parse_dcgmi_diag_all,
)
from hpckit.hw.errors import HwParseError
from hpckit.hw.ib import (
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
