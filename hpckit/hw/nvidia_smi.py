"""Parsers of ``nvidia-smi`` output: ``-q``, ``--query-gpu`` CSV, ``nvlink --status`` and ``topo -m``.

Each lives in its own private module; this module is the public entry point.
"""

from __future__ import annotations

from hpckit.hw._smi_csv import CsvValue, normalise_field, parse_query_gpu_csv
from hpckit.hw._smi_nvlink import NvlinkGpu, NvlinkLink, parse_nvlink_status
from hpckit.hw._smi_query import (
    EccCounts,
    GpuInfo,
    MigDevice,
    RemappedRows,
    RetiredPages,
    parse_query_q,
)
from hpckit.hw._smi_topo import GpuAffinity, TopoMatrix, parse_topo_m

__all__ = [
    "CsvValue",
    "EccCounts",
    "GpuAffinity",
    "GpuInfo",
    "MigDevice",
    "NvlinkGpu",
    "NvlinkLink",
    "RemappedRows",
    "RetiredPages",
    "TopoMatrix",
    "normalise_field",
    "parse_nvlink_status",
    "parse_query_gpu_csv",
    "parse_query_q",
    "parse_topo_m",
]
