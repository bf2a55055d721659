"""Declarative tables for nccl-tests output: table columns, header/footer lines, device lines."""

from __future__ import annotations

import re
from dataclasses import dataclass

from hpckit.results.model import Field

# Table columns, matched against the header tokens of the `#  size  count  type ...` line.  The
# header decides which columns a row has and in which order (eras differ: `root` appeared in 2.x,
# `error` became `#wrong`, `-I 1` adds i_* columns, `-S 1` a trailing timestamp, `-C 1` cputime).
KEY_COLUMNS: tuple[Field, ...] = (
    Field("size_bytes", "B", r"size", "int"),
    Field("count", "elements", r"count", "int"),
    Field("type", "", r"type", "str"),
    Field("redop", "", r"redop", "str"),
    Field("root", "", r"root", "int"),
)
METRIC_COLUMNS: tuple[Field, ...] = (
    Field("time_us", "us", r"time|cputime"),
    Field("algbw_gbps", "GB/s", r"algbw"),
    Field("busbw_gbps", "GB/s", r"busbw"),
    Field("wrong", "elements", r"#?wrong|error"),
    Field("iter_min_us", "us", r"i_min"),
    Field("iter_max_us", "us", r"i_max"),
    Field("iter_p99_us", "us", r"i_p99"),
    Field("iter_cv_pct", "%", r"i_cv%"),
)
TIMESTAMP_TOKEN = "timestamp"  # printed as two tokens in rows: "%Y-%m-%d %H:%M:%S"
# A placement group starts at a time column: out-of-place first, then in-place.
GROUP_START = re.compile(r"time|cputime")
PLACEMENTS = ("out", "in")
# Columns that may legitimately read N/A (validation off) or be absent from a placement.
NULLABLE = frozenset({"wrong", "iter_min_us", "iter_max_us", "iter_p99_us", "iter_cv_pct"})

UNITS: dict[str, str] = {f.name: f.unit for f in (*KEY_COLUMNS, *METRIC_COLUMNS)}


@dataclass(frozen=True)
class LineRule:
    """A kind of `#` line: the trigger regex says which event it is, the fields what it carries."""

    event: str
    trigger: re.Pattern[str]
    fields: tuple[Field, ...]


def _rule(event: str, trigger: str, *fields: Field) -> LineRule:
    return LineRule(event, re.compile(trigger), fields)


HEADER_RULES: tuple[LineRule, ...] = (
    _rule(
        "version",
        r"^#\s*nccl-tests version\b",
        Field("nccl_tests_version", "", r"version\s+(\S+)", "str"),
        Field("nccl_headers", "", r"nccl-headers=(\d+)", "int"),
        Field("nccl_library", "", r"nccl-library=(\d+)", "int"),
    ),
    _rule("start", r"^#\s*Collective test starting:", Field("binary", "", r"starting:\s*(\S+)", "str")),
    _rule("end", r"^#\s*Collective test concluded:", Field("binary", "", r"concluded:\s*(\S+)", "str")),
    _rule(
        "params",
        r"^#\s*nThread\s+\d",
        Field("nthreads", "", r"nThread\s+(\d+)", "int"),
        Field("ngpus", "", r"nGpus\s+(\d+)", "int"),
        Field("min_bytes", "B", r"minBytes\s+(\d+)", "int"),
        Field("max_bytes", "B", r"maxBytes\s+(\d+)", "int"),
        Field("step", "", r"step:\s*(\d+)", "int"),
        Field("step_kind", "", r"step:\s*\d+\((\w+)\)", "str"),
        Field("warmup_iters", "", r"warmup iters:\s*(\d+)", "int"),
        Field("iters", "", r"(?<!warmup )(?<!agg )iters:\s*(\d+)", "int"),
        Field("agg_iters", "", r"agg iters:\s*(\d+)", "int"),
        Field("validation", "", r"validation:\s*(\d+)", "int"),
        Field("graph", "", r"graph:\s*(\d+)", "int"),
        Field("unalign", "", r"unalign:\s*(\d+)", "int"),
    ),
    _rule(
        "device",
        r"^#\s*Rank\s+\d+\b.*\bdevice\s+\d+",
        Field("rank", "", r"Rank\s+(\d+)", "int"),
        Field("group", "", r"Group\s+(\d+)", "int"),
        Field("pid", "", r"Pid\s+(\d+)", "int"),
        Field("host", "", r"\bon\s+(\S+)", "str"),
        Field("device", "", r"\bdevice\s+(\d+)", "int"),
        # old builds print the PCI bus as [0x0f], newer ones as domain:bus:device [0000:0b:00]
        Field("busid", "", r"\bdevice\s+\d+\s+\[([^\]]*)\]", "str"),
        Field("name", "", r"\bdevice\s+\d+\s+\[[^\]]*\]\s*(.*?)\s*$", "str"),
    ),
    _rule(
        "oob",
        r"^#\s*Out of bounds values\s*:",
        Field("out_of_bounds", "", r":\s*(\d+)", "int"),
        Field("out_of_bounds_status", "", r":\s*\d+\s+(OK|FAILED)", "str"),
    ),
    _rule(
        "avg",
        r"^#\s*Avg bus bandwidth\s*:",
        Field("avg_busbw_gbps", "GB/s", r":\s*(\S+)"),
        Field("avg_busbw_check", "", r":\s*\S+\s+(OK|FAILED)", "str"),
    ),
    _rule("json", r"^#\s*Writing JSON output to\b", Field("json_output", "", r"to\s+(.*?)\s*$", "str")),
    _rule("error", r"^#\s*error:", Field("error", "", r"error:\s*(.*?)\s*$", "str")),
    _rule("memory", r"^#\s*GPU memory usage\s*:", Field("gpu_memory", "", r":\s*(.*?)\s*$", "str")),
)

NCCL_VERSION = Field("nccl_version", "", r"\bNCCL version (\d+\.\d+\.\d+\S*)", "str")
# A binary name mentioned anywhere (a command echo, a Slurm job name): all_reduce_perf[_mpi]
BINARY = re.compile(r"\b([a-z][a-z_]*?)_perf(?:_mpi)?\b")
KNOWN_COLLECTIVES = frozenset(
    {
        "all_reduce",
        "all_gather",
        "alltoall",
        "alltoallv",
        "broadcast",
        "gather",
        "hypercube",
        "reduce",
        "reduce_scatter",
        "scatter",
        "sendrecv",
    }
)


def collective_of(binary: str) -> str | None:
    """all_reduce_perf_mpi -> all_reduce; None for a name that is not an nccl-tests binary."""
    name = binary.rsplit("/", 1)[-1]
    m = BINARY.fullmatch(name) or BINARY.search(name)
    return m.group(1) if m else None


def classify_header(line: str) -> LineRule | None:
    for rule in HEADER_RULES:
        if rule.trigger.match(line):
            return rule
    return None
