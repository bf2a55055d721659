"""Slurm accounting: `sacct --parsable2` (any delimiter) and `sacct --json` -> one row per job/step.

Every raw field of the parsable form is kept under its sacct name; a small declarative table adds
typed, unit-carrying columns (job_id, state, elapsed_s, nnodes, alloc_gpus, ...) that the JSON form
fills too, so that both forms can be compared column for column.
"""

from __future__ import annotations

import json
import re

import pandas as pd

from hpckit.results.lines import excerpt, split_lines
from hpckit.results.model import Field, ParseError, ParseResult, Value

# (typed column, unit, sacct field name regex, kind): the first matching field fills the column
NORMALIZED: tuple[Field, ...] = (
    Field("job_id", "", r"JobID", "str"),
    Field("job_name", "", r"JobName", "str"),
    Field("state", "", r"State", "str"),
    Field("partition", "", r"Partition", "str"),
    Field("elapsed_s", "s", r"ElapsedRaw", "int"),
    Field("elapsed_s", "s", r"Elapsed", "hms"),
    Field("timelimit_s", "s", r"TimelimitRaw", "float", factor=60.0),
    Field("nnodes", "", r"NNodes", "int"),
    Field("ncpus", "", r"NCPUS|AllocCPUS", "int"),
    Field("node_list", "", r"NodeList", "str"),
    Field("exit_code", "", r"ExitCode", "str"),
    Field("alloc_tres", "", r"AllocTRES", "str"),
    Field("submit", "", r"Submit", "str"),
    Field("start", "", r"Start", "str"),
    Field("end", "", r"End", "str"),
)
UNITS = {f.name: f.unit for f in NORMALIZED} | {"alloc_gpus": "", "step": ""}
GPU_TRES = re.compile(r"gres/gpu(?::[^=,]*)?=(\d+)")
TIME_COLUMNS = ("submit", "start", "end")


# ---------------------------------------------------------------- --parsable2


def parse_sacct_text(text: str, kind: str = "sacct", source: str = "<text>") -> ParseResult:
    lines = split_lines(text)
    start = next((i for i, ln in enumerate(lines) if ln.strip()), None)
    if start is None:
        raise ParseError(source, 1, "", "empty input: no sacct header")
    header = lines[start].rstrip("\r")
    delim = _delimiter(header, source, start + 1)
    names = _fields(header, delim)
    rows, numbers, partial, warnings = _rows(lines, start, names, delim, source)
    raw = pd.DataFrame(rows, columns=names, dtype="str")
    frame = pd.concat([_normalize(raw, names), raw], axis=1)
    frame["line"] = numbers
    meta: dict[str, object] = {"delimiter": delim, "fields": names, "rows": len(frame), "units": UNITS}
    return ParseResult(kind, frame, meta, partial, warnings)


def _delimiter(header: str, source: str, lineno: int) -> str:
    """The delimiter between the first two field names: `|` by default, anything via --delimiter."""
    m = re.match(r"\s*[A-Za-z][A-Za-z0-9]*([^A-Za-z0-9\s][^A-Za-z0-9]*)[A-Za-z]", header)
    if m is None or "JobID" not in header:
        raise ParseError(source, lineno, excerpt(header), "not a sacct --parsable header (need JobID and a delimiter)")
    return m.group(1)


def _fields(line: str, delim: str) -> list[str]:
    parts = line.split(delim)
    if parts and parts[-1] == "":  # --parsable (not 2) ends every line with the delimiter
        parts.pop()
    return parts


def _rows(
    lines: list[str], start: int, names: list[str], delim: str, source: str
) -> tuple[list[list[str]], list[int], bool, list[str]]:
    rows: list[list[str]] = []
    numbers: list[int] = []
    body = [(i + 1, ln.rstrip("\r")) for i, ln in enumerate(lines[start + 1 :], start + 1) if ln.strip()]
    for k, (lineno, line) in enumerate(body):
        parts = line.split(delim)
        if len(parts) == len(names) + 1 and parts[-1] == "":
            parts.pop()  # --parsable: a trailing delimiter
        if len(parts) == len(names):
            rows.append(parts)
            numbers.append(lineno)
            continue
        if k == len(body) - 1 and len(parts) < len(names):
            warning = f"line {lineno}: last row has {len(parts)} of {len(names)} fields (truncated)"
            return rows, numbers, True, [warning]
        raise ParseError(source, lineno, excerpt(line), f"expected {len(names)} fields, found {len(parts)}")
    return rows, numbers, False, []


def _normalize(raw: pd.DataFrame, names: list[str]) -> pd.DataFrame:
    cols: dict[str, object] = {}
    for f in NORMALIZED:
        if f.name in cols:
            continue
        # by position: a header may repeat a name (sinfo does; a garbled sacct one may)
        pos = next((i for i, n in enumerate(names) if f.pattern.fullmatch(n)), None)
        if pos is not None:
            cols[f.name] = [_typed(f, v) for v in raw.iloc[:, pos]]
    frame = pd.DataFrame(cols, index=raw.index)
    return _finish(frame)


def _typed(f: Field, text: str) -> Value:
    if f.name == "state":
        return text.split(" ")[0] if text else None  # "CANCELLED by 1234" -> CANCELLED
    if f.kind == "str":
        return text or None
    return f.convert(text) if text else None


def _finish(frame: pd.DataFrame) -> pd.DataFrame:
    if "job_id" in frame.columns:
        frame.insert(1, "step", [_step_of(j) for j in frame["job_id"]])
    if "alloc_tres" in frame.columns:
        frame["alloc_gpus"] = [_gpus(t) for t in frame["alloc_tres"]]
    for name in TIME_COLUMNS:
        if name in frame.columns:
            # "Unknown" (not started/ended yet) and "None" become NaT
            stamps = pd.to_datetime(frame[name], format="%Y-%m-%dT%H:%M:%S", errors="coerce")
            frame[name] = stamps.astype("datetime64[s]")
    if "timelimit_s" in frame.columns:
        frame["timelimit_s"] = pd.to_numeric(frame["timelimit_s"], errors="coerce").astype("float64")
    for name in ("elapsed_s", "nnodes", "ncpus", "alloc_gpus"):
        if name in frame.columns:
            frame[name] = frame[name].astype("Int64")
    for name in ("job_id", "step", "job_name", "state", "partition", "node_list", "exit_code", "alloc_tres"):
        if name in frame.columns:
            frame[name] = frame[name].astype("str")
    return frame


def _step_of(job_id: object) -> str | None:
    """8012944_24093.batch -> "batch"; a job's own row has no step."""
    text = str(job_id or "")
    return text.rsplit(".", 1)[1] if "." in text else None


def _gpus(tres: object) -> int | None:
    if not isinstance(tres, str) or not tres:
        return None
    return sum(int(n) for n in GPU_TRES.findall(tres)) if "gres/gpu" in tres else 0


# ---------------------------------------------------------------- --json


def parse_sacct_json(text: str, kind: str = "sacct-json", source: str = "<text>") -> ParseResult:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        lines = text.split("\n")  # json counts lines by \n only
        line = lines[exc.lineno - 1] if 0 < exc.lineno <= len(lines) else ""
        raise ParseError(source, exc.lineno, excerpt(line), f"invalid JSON: {exc.msg} (column {exc.colno})") from None
    jobs = doc.get("jobs") if isinstance(doc, dict) else None
    if not isinstance(jobs, list):
        raise ParseError(source, 1, excerpt(text[:160]), "not sacct --json output (no 'jobs' list)")
    records: list[dict[str, object]] = []
    for job in jobs:
        if isinstance(job, dict):
            records.append(_job_record(job))
            records.extend(_step_record(job, s) for s in job.get("steps") or [] if isinstance(s, dict))
    frame = _finish(pd.DataFrame.from_records(records, columns=_JSON_COLUMNS))
    meta: dict[str, object] = {"jobs": len(jobs), "rows": len(frame), "units": UNITS}
    meta.update(_json_meta(doc))
    return ParseResult(kind, frame, meta, False, [])


_JSON_COLUMNS = [
    "job_id",
    "job_name",
    "state",
    "partition",
    "elapsed_s",
    "timelimit_s",
    "nnodes",
    "ncpus",
    "node_list",
    "exit_code",
    "alloc_tres",
    "submit",
    "start",
    "end",
]


def _number(value: object) -> float | int | None:
    """Slurm's number forms: plain, or {set, infinite, number} (data_parser >= v0.0.39)."""
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        return int(value) if isinstance(value, int) or str(value).isdigit() else float(value)
    except ValueError:
        return None


def _state(value: object) -> str | None:
    if isinstance(value, dict):  # {"current": [...] or "X", "reason": ...}
        value = value.get("current")
    if isinstance(value, list):
        return str(value[0]) if value else None
    return str(value) if value else None


def _exit(value: object) -> str | None:
    """`ExitCode` as sacct prints it: return_code:signal."""
    if not isinstance(value, dict):
        return None
    rc = _number(value.get("return_code"))
    signal = value.get("signal")
    sig = _number(signal.get("id")) if isinstance(signal, dict) else _number(signal)
    return f"{rc or 0}:{sig or 0}"


def _tres(value: object) -> str | None:
    if not isinstance(value, list):
        return None
    parts = []
    for t in value:
        if isinstance(t, dict):
            name = f"{t.get('type')}/{t.get('name')}" if t.get("name") else str(t.get("type"))
            parts.append(f"{name}={t.get('count')}")
    return ",".join(parts)


def _epoch(value: object) -> str | None:
    n = _number(value)
    if not n:
        return None
    return pd.Timestamp(int(n), unit="s").strftime("%Y-%m-%dT%H:%M:%S")


def _job_record(job: dict[str, object]) -> dict[str, object]:
    time = job.get("time") if isinstance(job.get("time"), dict) else {}
    assert isinstance(time, dict)
    tres = job.get("tres") if isinstance(job.get("tres"), dict) else {}
    assert isinstance(tres, dict)
    limit = _number(time.get("limit"))
    required = job.get("required") if isinstance(job.get("required"), dict) else {}
    assert isinstance(required, dict)
    return {
        "job_id": str(job.get("job_id")),
        "job_name": job.get("name"),
        "state": _state(job.get("state")),
        "partition": job.get("partition"),
        "elapsed_s": _number(time.get("elapsed")),
        "timelimit_s": None if limit is None else float(limit) * 60.0,
        "nnodes": _number(job.get("allocation_nodes")),
        "ncpus": _number(required.get("CPUs")),
        "node_list": job.get("nodes"),
        "exit_code": _exit(job.get("exit_code")),
        "alloc_tres": _tres(tres.get("allocated")),
        "submit": _epoch(time.get("submission")),
        "start": _epoch(time.get("start")),
        "end": _epoch(time.get("end")),
    }


def _step_record(job: dict[str, object], step: dict[str, object]) -> dict[str, object]:
    time = step.get("time") if isinstance(step.get("time"), dict) else {}
    assert isinstance(time, dict)
    ident = step.get("step") if isinstance(step.get("step"), dict) else {}
    assert isinstance(ident, dict)
    sid = str(ident.get("id", ""))
    nodes = step.get("nodes") if isinstance(step.get("nodes"), dict) else {}
    assert isinstance(nodes, dict)
    tres = step.get("tres") if isinstance(step.get("tres"), dict) else {}
    assert isinstance(tres, dict)
    return {
        "job_id": sid if "." in sid else f"{job.get('job_id')}.{sid}",
        "job_name": ident.get("name"),
        "state": _state(step.get("state")),
        "partition": job.get("partition"),
        "elapsed_s": _number(time.get("elapsed")),
        "nnodes": _number(nodes.get("count")),
        "node_list": nodes.get("range"),
        "exit_code": _exit(step.get("exit_code")),
        "alloc_tres": _tres(tres.get("allocated")),
        "start": _epoch(time.get("start")),
        "end": _epoch(time.get("end")),
    }


def _json_meta(doc: dict[str, object]) -> dict[str, object]:
    meta = doc.get("meta")
    if not isinstance(meta, dict):
        return {}
    slurm = meta.get("slurm") or meta.get("Slurm")
    out: dict[str, object] = {}
    if isinstance(slurm, dict) and slurm.get("release"):
        out["slurm_version"] = str(slurm["release"])
    plugin = meta.get("plugin") or meta.get("plugins")
    if isinstance(plugin, dict):
        out["data_parser"] = plugin.get("data_parser") or plugin.get("type")
    return out
