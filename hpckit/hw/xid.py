"""NVIDIA Xid events from kernel logs, and what each Xid means for a node.

Reads ``dmesg`` (plain, ``-T``, ``--decode --time-format iso``), ``journalctl -k`` and syslog lines; only
lines carrying ``NVRM: Xid`` become events, every other line of the log is skipped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from hpckit.hw.errors import HwParseError

__all__ = ["XID_CLASSES", "XidClass", "XidEvent", "XidSeverity", "classify_xid", "parse_xid_events"]

SOURCE = "kernel log"

# hardware -> the node should FAIL its check and be drained; disputed -> WARN (could be the job, the
# driver or the GPU: look at recurrence); application -> INFO (the job's own fault, the node is fine).
XidSeverity = Literal["hardware", "disputed", "application"]


@dataclass(frozen=True)
class XidClass:
    name: str  # NVIDIA's short description
    severity: XidSeverity
    action: str  # what an admin should do, in a few words
    catalog_action: str | None = None  # NVIDIA's "Resolution Bucket (Immediate Action)", where it has one


def _c(name: str, severity: XidSeverity, action: str, catalog: str | None = None) -> XidClass:
    return XidClass(name, severity, action, catalog)


_DRAIN_RESET = "drain the node and reset the GPU; replace it if the Xid recurs after the reset"
_APP = "application fault: check the job; act on the node only if it recurs across different jobs"
_NVLINK5 = "drain; decode intrInfo/errorStatus with NVIDIA's Xid 144-150 table before replacing anything"
_RECUR = "watch for recurrence; if it repeats across jobs, drain and reset the GPU, then run DCGM diag -r 3"

# From NVIDIA's Xid catalog for Ampere and newer ("Analyzing Xid Errors with the Xid Catalog",
# docs.nvidia.com/deploy/xid-errors) and its older Xid Error Listing of possible causes. The catalog's
# immediate action is kept in catalog_action. Where this table is stricter than the catalog (63, 92, 94 and
# 157, which the catalog lets a running job ride through), the event leaves a remap, retirement or ECC
# condition that only a GPU reset (or a new GPU) clears, so a health check drains the node rather than
# handing it to the next job.
XID_CLASSES: dict[int, XidClass] = {
    8: _c("GPU stopped processing", "disputed", _RECUR, "RESTART_APP"),
    11: _c("Invalid or corrupted push buffer stream", "disputed", _RECUR, "RESTART_APP"),
    13: _c("Graphics Engine Exception", "application", _APP, "RESTART_APP"),
    25: _c("Invalid or illegal push buffer stream", "disputed", _RECUR, "RESTART_APP"),
    31: _c("GPU memory page fault", "application", _APP, "RESTART_APP"),
    32: _c("Invalid or corrupted push buffer stream", "disputed", _RECUR, "RESTART_APP"),
    38: _c("Driver firmware error", "disputed", "check the driver version; " + _RECUR),
    43: _c("GPU stopped processing", "application", _APP, "IGNORE"),
    44: _c("Graphics Engine fault during context switch", "disputed", _RECUR, "RESET_GPU"),
    45: _c("Preemptive cleanup, due to previous errors", "application", "follow the Xid that preceded it"),
    46: _c("GPU stopped processing", "hardware", _DRAIN_RESET, "RESET_GPU"),
    48: _c(
        "Double Bit ECC Error",
        "hardware",
        _DRAIN_RESET + "; check SRAM Threshold Exceeded",
        "WORKFLOW_XID_48",
    ),
    61: _c("Internal micro-controller breakpoint/warning", "disputed", _RECUR),
    62: _c("Internal micro-controller halt", "hardware", _DRAIN_RESET, "RESET_GPU"),
    63: _c(
        "ECC page retirement or row remapping recording event",
        "hardware",
        "row remap pending: drain and reset the GPU to apply it (nvidia-smi -q -d ROW_REMAPPER)",
        "IGNORE",
    ),
    64: _c(
        "ECC page retirement or row remapper recording failure",
        "hardware",
        "remapping failed: drain the node and replace the GPU",
        "RESET_GPU",
    ),
    69: _c("Graphics Engine class error", "disputed", _RECUR),
    74: _c(
        "NVLINK Error",
        "hardware",
        "drain, reset the GPU, check `nvidia-smi nvlink -s`; replace if it recurs",
        "WORKFLOW_NVLINK_ERR",
    ),
    79: _c(
        "GPU has fallen off the bus",
        "hardware",
        "drain and power-cycle the node; check seating, risers and power if it recurs",
        "RESTART_BM",
    ),
    92: _c("High single-bit ECC error rate", "hardware", _DRAIN_RESET + "; run DCGM diag -r 3", "IGNORE"),
    94: _c(
        "Contained ECC error",
        "hardware",
        "drain and reset the GPU to apply the pending row remap",
        "RESTART_APP",
    ),
    95: _c("Uncontained ECC error", "hardware", _DRAIN_RESET, "RESET_GPU"),
    109: _c("Context Switch Timeout Error", "disputed", _RECUR, "RESET_GPU"),
    110: _c("Security Fault Error", "disputed", _RECUR, "RESET_GPU"),
    119: _c("GSP RPC Timeout", "hardware", _DRAIN_RESET + "; check the GSP firmware/driver", "RESET_GPU"),
    120: _c("GSP Error", "hardware", _DRAIN_RESET + "; check the GSP firmware/driver", "RESET_GPU"),
    136: _c("Link Training Failed", "hardware", _DRAIN_RESET, "RESET_GPU"),
    137: _c("NVLink Privilege Error", "application", _APP, "IGNORE"),
    140: _c("ECC Unrecovered Error", "hardware", _DRAIN_RESET, "RESET_GPU"),
    143: _c("GPU Initialization Failure", "hardware", _DRAIN_RESET, "RESET_GPU"),
    144: _c("NVLINK: SAW Error", "hardware", _NVLINK5, "WORKFLOW_NVLINK5_ERR"),
    145: _c("NVLINK: RLW Error", "hardware", _NVLINK5, "WORKFLOW_NVLINK5_ERR"),
    146: _c("NVLINK: TLW Error", "hardware", _NVLINK5, "WORKFLOW_NVLINK5_ERR"),
    147: _c("NVLINK: TREX Error", "hardware", _NVLINK5, "WORKFLOW_NVLINK5_ERR"),
    148: _c("NVLINK: NVLPW_CTRL Error", "hardware", _NVLINK5, "WORKFLOW_NVLINK5_ERR"),
    149: _c("NVLINK: NETIR Error", "hardware", _NVLINK5, "WORKFLOW_NVLINK5_ERR"),
    150: _c("NVLINK: MSE Error", "hardware", _NVLINK5, "WORKFLOW_NVLINK5_ERR"),
    154: _c("GPU Recovery Action Changed", "disputed", "do what the message's recovery action says"),
    155: _c("NVLINK: SW Defined Error", "disputed", _RECUR, "RESET_GPU"),
    156: _c(
        "Resource Retirement Event",
        "hardware",
        "drain and reset the GPU to apply the retirement",
        "RESET_GPU",
    ),
    157: _c("Resource Retirement Failure", "hardware", "retirement failed: drain and replace the GPU", "IGNORE"),
    158: _c("GPU Fatal Timeout", "hardware", _DRAIN_RESET, "RESET_GPU"),
}

UNKNOWN_XID = XidClass("Xid not in the table", "disputed", "look the Xid up in NVIDIA's Xid catalog")


def classify_xid(xid: int) -> XidClass:
    """The table entry, or a 'disputed' placeholder for Xids the table does not know."""
    return XID_CLASSES.get(xid, UNKNOWN_XID)


@dataclass(frozen=True)
class XidEvent:
    line: int
    bus_id: str  # PCI address as the driver prints it, e.g. "0000:9b:00"
    xid: int
    pid: int | None
    process: str | None
    message: str
    timestamp: str | None = None  # the log's own time text (dmesg -T, ISO, or syslog), unparsed
    uptime_s: float | None = None  # the "[12345.678901]" kernel time, when present
    host: str | None = None  # from a syslog/journal prefix
    gpu_uuid: str | None = None  # from an earlier "NVRM: GPU at PCI:<bus>: GPU-<uuid>" line

    @property
    def xid_class(self) -> XidClass:
        return classify_xid(self.xid)

    @property
    def severity(self) -> XidSeverity:
        return self.xid_class.severity


_XID = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<bus>[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-9A-Fa-f])?)\): "
    r"(?P<xid>\d+),\s*(?P<rest>.*)$"
)
_PID = re.compile(r"^pid=(?:'<unknown>'|<unknown>|(?P<pid>\d+)),\s*(?:name=(?P<name>[^,]*),\s*)?")
_GPU_AT = re.compile(r"NVRM: GPU at (?:PCI:)?(?P<bus>[0-9A-Fa-f:.]+): (?P<uuid>GPU-[0-9A-Fa-f-]+)")
# Prefixes in front of "NVRM:", outermost first: syslog/journal, dmesg --decode, dmesg -T / uptime.
_SYSLOG = re.compile(
    r"^(?P<time>\w{3} [ \d]\d \d\d:\d\d:\d\d|\d{4}-\d\d-\d\dT\S+) (?P<host>\S+) kernel:(?:\s+(?P<rest>.*))?$"
)
_DECODE = re.compile(r"^\w+\s*:\w+\s*: (?P<time>\d{4}-\d\d-\d\dT\S+)(?:\s+(?P<rest>.*))?$")
_BRACKET = re.compile(r"^\[\s*(?P<stamp>[^\]]+)\]\s?(?P<rest>.*)$")


def parse_xid_events(text: str, source: str = SOURCE, strict: bool = True) -> list[XidEvent]:
    """Every ``NVRM: Xid`` event in a kernel log, in log order.

    A line that mentions ``NVRM: Xid`` but cannot be read raises :class:`HwParseError` when ``strict``
    (the default); with ``strict=False`` such lines are skipped, for logs where printk lines interleave.
    """
    events: list[XidEvent] = []
    uuids: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        gpu_at = _GPU_AT.search(line)
        if gpu_at is not None:
            uuids[_bus_key(gpu_at.group("bus"))] = gpu_at.group("uuid")
        if "NVRM: Xid" not in line:
            continue
        event = _event(line, number, uuids)
        if event is None and strict:
            raise HwParseError(source, number, f"unreadable Xid line: {line.strip()[:200]!r}")
        if event is not None:
            events.append(event)
    return events


def _bus_key(bus: str) -> str:
    """``0000:9b:00.0`` and ``0000:9b:00`` name the same GPU."""
    return bus.lower().split(".")[0]


def _event(line: str, number: int, uuids: dict[str, str]) -> XidEvent | None:
    xid = _XID.search(line)
    if xid is None:
        return None
    timestamp, uptime, host = _prefix(line[: xid.start()].strip())
    pid, process, message = _payload(xid.group("rest"))
    return XidEvent(
        line=number,
        bus_id=xid.group("bus"),
        xid=int(xid.group("xid")),
        pid=pid,
        process=process,
        message=message.strip(),
        timestamp=timestamp,
        uptime_s=uptime,
        host=host,
        gpu_uuid=uuids.get(_bus_key(xid.group("bus"))),
    )


def _prefix(prefix: str) -> tuple[str | None, float | None, str | None]:
    """Split what precedes ``NVRM:`` into (time text, kernel uptime seconds, host)."""
    timestamp: str | None = None
    host: str | None = None
    uptime: float | None = None
    for pattern in (_SYSLOG, _DECODE):
        match = pattern.match(prefix)
        if match is not None:
            timestamp = match.group("time")
            host = match.groupdict().get("host")
            prefix = (match.group("rest") or "").strip()
    bracket = _BRACKET.match(prefix)
    if bracket is not None:
        stamp = bracket.group("stamp").strip()
        if re.fullmatch(r"\d+\.\d+", stamp):
            uptime = float(stamp)
        else:
            timestamp = timestamp or stamp  # dmesg -T: "[Sun Feb 23 16:24:18 2025]"
    return timestamp, uptime, host


def _payload(rest: str) -> tuple[int | None, str | None, str]:
    """``pid=123, name=python, <message>`` (newer drivers) or just ``<message>`` (older ones)."""
    match = _PID.match(rest)
    if match is None:
        return None, None, rest
    pid = int(match.group("pid")) if match.group("pid") else None
    name = match.group("name")
    process = name.strip() if name and name.strip() not in ("<unknown>", "") else None
    return pid, process, rest[match.end() :]
