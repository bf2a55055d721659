"""Declarative tables for nccl-tests output: table columns, header/footer lines, device lines."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from hpckit.results.model import Field, Value, extract

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
    Field("wrong", "elements", r"#?wrong"),
    # legacy builds print the largest relative error (a float, 2e-06), not a count of wrong values:
    # a column of its own, or history would read a good run as one with wrong values
    Field("max_error", "", r"error"),
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
NULLABLE = frozenset({"wrong", "max_error", "iter_min_us", "iter_max_us", "iter_p99_us", "iter_cv_pct"})

UNITS: dict[str, str] = {f.name: f.unit for f in (*KEY_COLUMNS, *METRIC_COLUMNS)}


@dataclass(frozen=True)
class LineRule:
    """A kind of `#` line: ``after_hash`` (regex of what follows "# ") says which event it is, the
    fields what it carries."""

    event: str
    after_hash: str
    fields: tuple[Field, ...]
    # optional: the whole line in one regex, one named group per field, for lines that come by the
    # hundred (device lines); when it does not match, the fields are searched one by one
    whole: re.Pattern[str] | None = None

    def extract(self, line: str) -> dict[str, Value]:
        m = self.whole.match(line) if self.whole is not None else None
        if m is None:
            return extract(self.fields, line)
        found: dict[str, Value] = {}
        for f in self.fields:
            text = m.group(f.name)
            value = None if text is None else f.convert(text)
            if value is not None:
                found[f.name] = value
        return found


def _rule(event: str, after_hash: str, *fields: Field, whole: str | None = None) -> LineRule:
    return LineRule(event, after_hash, fields, re.compile(whole) if whole else None)


HEADER_RULES: tuple[LineRule, ...] = (
    _rule(
        "version",
        r"nccl-tests version\b",
        Field("nccl_tests_version", "", r"version\s+(\S+)", "str"),
        Field("nccl_headers", "", r"nccl-headers=(\d+)", "int"),
        Field("nccl_library", "", r"nccl-library=(\d+)", "int"),
    ),
    _rule("start", r"Collective test starting:", Field("binary", "", r"starting:\s*(\S+)", "str")),
    _rule("end", r"Collective test concluded:", Field("binary", "", r"concluded:\s*(\S+)", "str")),
    _rule(
        "params",
        r"nThread\s+\d",
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
        whole=r"#\s*nThread\s+(?P<nthreads>\d+)\s+nGpus\s+(?P<ngpus>\d+)\s+minBytes\s+(?P<min_bytes>\d+)"
        r"\s+maxBytes\s+(?P<max_bytes>\d+)\s+step:\s*(?P<step>\d+)\((?P<step_kind>\w+)\)"
        r"\s+warmup iters:\s*(?P<warmup_iters>\d+)\s+iters:\s*(?P<iters>\d+)"
        r"(?:\s+agg iters:\s*(?P<agg_iters>\d+))?"
        r"\s+validation:\s*(?P<validation>\d+)(?:\s+graph:\s*(?P<graph>\d+))?(?:\s+unalign:\s*(?P<unalign>\d+))?",
    ),
    _rule(
        "device",
        r"Rank\s+\d+\b.*\bdevice\s+\d+",
        Field("rank", "", r"Rank\s+(\d+)", "int"),
        Field("group", "", r"Group\s+(\d+)", "int"),
        Field("pid", "", r"Pid\s+(\d+)", "int"),
        Field("host", "", r"\bon\s+(\S+)", "str"),
        Field("device", "", r"\bdevice\s+(\d+)", "int"),
        # old builds print the PCI bus as [0x0f], newer ones as domain:bus:device [0000:0b:00]
        Field("busid", "", r"\bdevice\s+\d+\s+\[([^\]]*)\]", "str"),
        Field("name", "", r"\bdevice\s+\d+\s+\[[^\]]*\]\s*(.*?)\s*$", "str"),
        whole=r"#\s*Rank\s+(?P<rank>\d+)(?:\s+Group\s+(?P<group>\d+))?\s+Pid\s+(?P<pid>\d+)\s+on\s+(?P<host>\S+)"
        r"\s+device\s+(?P<device>\d+)\s+\[(?P<busid>[^\]]*)\]\s*(?P<name>.*?)\s*$",
    ),
    _rule(
        "oob",
        r"Out of bounds values\s*:",
        Field("out_of_bounds", "", r":\s*(\d+)", "int"),
        Field("out_of_bounds_status", "", r":\s*\d+\s+(OK|FAILED)", "str"),
    ),
    _rule(
        "avg",
        r"Avg bus bandwidth\s*:",
        Field("avg_busbw_gbps", "GB/s", r":\s*(\S+)"),
        Field("avg_busbw_check", "", r":\s*\S+\s+(OK|FAILED)", "str"),
    ),
    _rule("json", r"Writing JSON output to\b", Field("json_output", "", r"to\s+(.*?)\s*$", "str")),
    _rule("error", r"error:", Field("error", "", r"error:\s*(.*?)\s*$", "str")),
    _rule("memory", r"GPU memory usage\s*:", Field("gpu_memory", "", r":\s*(.*?)\s*$", "str")),
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


@lru_cache(maxsize=1024)  # a log of many runs names the same few binaries
def collective_of(binary: str) -> str | None:
    """all_reduce_perf_mpi -> all_reduce; None for a name that is not an nccl-tests binary."""
    name = binary.rsplit("/", 1)[-1]
    m = BINARY.fullmatch(name) or BINARY.search(name)
    return m.group(1) if m else None


# All triggers in one regex: a `#` line costs one match, whatever its kind.
_BY_EVENT = {rule.event: rule for rule in HEADER_RULES}
_ANY_HEADER = re.compile(r"^#\s*(?:" + "|".join(f"(?P<{r.event}>{r.after_hash})" for r in HEADER_RULES) + ")")


def triggers(rules: tuple[LineRule, ...]) -> tuple[str, tuple[str, ...]]:
    """What the scan looks for after a line's "# ": the device rule's trigger (device lines come
    by the hundred and are taken in blocks), and every other rule's with the column header's first
    column.  All from the tables above: a rule added there is found by the scan, nothing else to
    change."""
    device = next(r.after_hash for r in rules if r.event == "device")
    others = tuple(r.after_hash for r in rules if r.event != "device")
    return device, (*others, KEY_COLUMNS[0].regex + r"\b")


# Lines that only nccl-tests prints (for telling a log's kind from its head)
NCCL_MARKERS = re.compile(
    r"^(?:\s*\S*?:)?\s*#\s*(?:nThread\s+\d|nccl-tests version|Using devices|Avg bus bandwidth"
    r"|Out of bounds values|\s*size\s+count\s+type\b)",
    re.MULTILINE,
)
# A test that died says so (nccl-tests' common.h: "%s: Test NCCL failure %s:%d '%s'", "Test CUDA
# failure", then " .. %s pid %d: Test failure %s:%d"; 1.x builds print "NCCL failure file.cu:95")
FAILURE = re.compile(r"\bTest (?:NCCL |CUDA )?failure\b|\b(?:NCCL|CUDA) failure \S+\.cu:\d+")
# What says why a test died (NCCL's or CUDA's error, "host: " before it), wherever its line puts it:
# a kernel fault may cut a result row, which then ends in "node0: Test CUDA failure common.cu:389 ..."
CAUSE = re.compile(r"(?:[^\s:]+:[ \t]+)?(?:Test (?:NCCL|CUDA) failure\b|\b(?:NCCL|CUDA) failure \S+\.cu:\d+)")


def failure_message(line: str) -> tuple[str, bool]:
    """A failure line as shown: from where NCCL's or CUDA's message starts (what came before on its
    line, a cut row or a launcher prefix, dropped), and whether it is such a message (a cause) or
    only the trace nccl-tests prints after one (" .. host pid N: Test failure common.cu:519")."""
    m = CAUSE.search(line)
    return (line.strip(), False) if m is None else (line[m.start() :].strip(), True)


def classify_header(line: str) -> LineRule | None:
    m = _ANY_HEADER.match(line)
    return _BY_EVENT[m.lastgroup] if m is not None and m.lastgroup else None
