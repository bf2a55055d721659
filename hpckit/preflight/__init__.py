"""Preflight: compare every host with the blueprint before a deploy (OS, CPU and memory, GPUs and driver,
InfiniBand ports, service accounts, time, disks, mounts).

probes (one command per fact, over SSH, hosts in parallel) -> facts (parsers) -> compare (pure, against
the blueprint) -> rows (host, check, expected, found, severity, command) -> table or JSON.
"""

from hpckit.preflight.compare import Context, build_report, host_rows
from hpckit.preflight.expect import DiskNeed, Expectations, HostPlan, MountNeed, expectations
from hpckit.preflight.model import GroupedRow, Report, Row, Severity
from hpckit.preflight.probes import HostProbes, Probe, ProbeResult, probe_hosts, probes_for, run_probes
from hpckit.preflight.run import PreflightOptions, preflight

__all__ = [
    "Context",
    "DiskNeed",
    "Expectations",
    "GroupedRow",
    "HostPlan",
    "HostProbes",
    "MountNeed",
    "PreflightOptions",
    "Probe",
    "ProbeResult",
    "Report",
    "Row",
    "Severity",
    "build_report",
    "expectations",
    "host_rows",
    "preflight",
    "probe_hosts",
    "probes_for",
    "run_probes",
]
