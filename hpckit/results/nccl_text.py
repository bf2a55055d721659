"""nccl-tests text output (every era) -> one frame row per (size, placement) measurement."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from hpckit.results.lines import excerpt, split_lines, strip_prefix
from hpckit.results.model import ParseError, ParseResult, Value, extract
from hpckit.results.nccl_fields import (
    BINARY,
    NCCL_VERSION,
    UNITS,
    classify_header,
    collective_of,
)
from hpckit.results.nccl_table import Block, Schema, default_schema, parse_rows, schema_from_header

KIND = "nccl-tests"
FRAME_COLUMNS = [
    "run",
    "collective",
    "size_bytes",
    "count",
    "type",
    "redop",
    "root",
    "placement",
    "time_us",
    "algbw_gbps",
    "busbw_gbps",
    "wrong",
]
_DIGITS = frozenset("0123456789")
_STARTERS = frozenset({"version", "start", "params"})
_FOOTERS = frozenset({"oob", "avg", "end"})


@dataclass
class Run:
    """One invocation of an nccl-tests binary as it appears in the log."""

    index: int
    tag: int
    start_line: int
    info: dict[str, Value] = field(default_factory=dict)
    devices: list[dict[str, Value]] = field(default_factory=list)
    schema: Schema | None = None
    rows: list[str] = field(default_factory=list)
    linenos: list[int] = field(default_factory=list)
    finished: bool = False

    def starts_anew(self, event: str) -> bool:
        """Whether a header line of kind ``event`` belongs to a new run rather than this one."""
        if self.rows or self.schema is not None or "nthreads" in self.info:
            return True
        if event == "version":
            return "nccl_tests_version" in self.info or "binary" in self.info
        return event == "start" and "binary" in self.info


@dataclass
class Scan:
    """Everything one pass over the lines found."""

    source: str
    runs: list[Run] = field(default_factory=list)
    current: dict[int, Run] = field(default_factory=dict)
    nccl_version: str | None = None
    binaries: list[str] = field(default_factory=list)
    param_lines: list[tuple[int, str]] = field(default_factory=list)  # (tag, text) per `# nThread`
    interleaved: bool = False
    last_row_line: int = 0
    warnings: list[str] = field(default_factory=list)

    def new_run(self, tag: int, lineno: int) -> Run:
        run = Run(len(self.runs), tag, lineno)
        self.runs.append(run)
        self.current[tag] = run
        return run

    def run_for(self, tag: int, lineno: int) -> Run:
        run = self.current.get(tag) or (self.runs[-1] if self.runs else None)
        return run if run is not None else self.new_run(tag, lineno)


def scan(text: str, source: str) -> Scan:
    """One pass over the log; rows are only collected here (parsed in bulk later)."""
    sc = Scan(source)
    current = sc.current
    for lineno, raw in enumerate(split_lines(text), 1):
        line, tag = strip_prefix(raw)
        s = line.strip()
        if not s:
            continue
        c = s[0]
        if c in _DIGITS and _is_row(s):
            run = current.get(tag) or (sc.runs[-1] if sc.runs else None) or sc.new_run(tag, lineno)
            run.rows.append(s)
            run.linenos.append(lineno)
            sc.last_row_line = lineno
        elif c == "#":
            _header_line(sc, s, lineno, tag)
        else:
            _other_line(sc, s)
    return sc


def _is_row(s: str) -> bool:
    # the first token of a row is a number; an NCCL INFO line can also start with a digit
    # (a container-id hostname) but its first token is "host:pid:tid"
    end = s.find(" ")
    first = s if end < 0 else s[:end]
    if first.isdigit() and first.isascii():
        return True
    try:
        float(first)
    except ValueError:
        return False
    return first.isascii()


def _other_line(sc: Scan, s: str) -> None:
    if sc.nccl_version is None and "NCCL version" in s:
        version = NCCL_VERSION.search(s)
        if isinstance(version, str):
            sc.nccl_version = version
    if "_perf" in s:
        sc.binaries.extend(m.group(1) for m in BINARY.finditer(s))


def _header_line(sc: Scan, s: str, lineno: int, tag: int) -> None:
    rule = classify_header(s)
    if rule is None:
        _maybe_columns(sc, s, lineno, tag)
        return
    values = extract(rule.fields, s)
    event = rule.event
    run = sc.current.get(tag)
    if event in _STARTERS and (run is None or run.starts_anew(event)):
        if event == "params" and run is not None and "nthreads" in run.info and not run.rows:
            # a second header before the first run printed anything: concurrent processes
            sc.interleaved = True
        run = sc.new_run(tag, lineno)
    elif run is None:
        run = sc.run_for(tag, lineno)
    if event == "params":
        sc.param_lines.append((tag, s))
    if event == "device":
        run.devices.append(values)
        return
    run.info.update(values)
    if event in _FOOTERS:
        run.finished = True


def _maybe_columns(sc: Scan, s: str, lineno: int, tag: int) -> None:
    tokens = s[1:].split()
    if "size" not in tokens:
        return  # the "(B) (elements)" units line, the out-of-place/in-place titles, a bare "#"
    schema = schema_from_header(tokens)
    if schema is None:
        sc.warnings.append(f"line {lineno}: unrecognised column header ignored: {excerpt(s, 80)}")
        return
    run = sc.current.get(tag)
    # concurrent processes writing untagged lines: a second copy of the same header is not a new run
    same = sc.interleaved and run is not None and run.schema == schema
    if run is None or run.finished or (run.rows and not same):
        run = sc.new_run(tag, lineno)
    run.schema = schema


# ---------------------------------------------------------------- from scan to result


def parse_nccl_text(text: str, source: str = "<text>", collective: str | None = None) -> ParseResult:
    sc = scan(text, source)
    if not any(r.rows for r in sc.runs):
        return _no_rows(sc, text)
    partial = False
    frames: list[pd.DataFrame] = []
    for run in sc.runs:
        if not run.rows:
            continue
        block, truncated = _run_block(sc, run)
        partial |= truncated
        frames.append(_melt(block, _schema_of(sc, run), run))
    frame = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    meta = _meta(sc)
    coll = collective or _guess_collective(sc)
    _fill_collective(frame, sc, coll)
    meta["collective"] = coll if coll is not None else _first_collective(sc)
    independent = _independent_runs(sc)
    if independent:
        frame = _split_independent(frame, sc, independent, meta)
    partial |= _unfinished(sc)
    meta["units"] = {k: v for k, v in UNITS.items() if k in frame.columns}
    return ParseResult(KIND, frame, meta, partial, sc.warnings)


def _no_rows(sc: Scan, text: str) -> ParseResult:
    if not sc.runs:
        lines = split_lines(text)
        first = next((i for i, ln in enumerate(lines, 1) if ln.strip()), 1)
        raise ParseError(
            sc.source,
            first,
            excerpt(lines[first - 1]) if lines else "",
            "no nccl-tests output found (no '# nThread' header, column header or result row)",
        )
    sc.warnings.append("no result rows: the test printed its header but no measurements (crashed?)")
    frame = pd.DataFrame({c: pd.Series(dtype="float64") for c in FRAME_COLUMNS})
    return ParseResult(KIND, frame, _meta(sc), True, sc.warnings)


def _schema_of(sc: Scan, run: Run) -> Schema:
    if run.schema is not None:
        return run.schema
    width = len(run.rows[0].split())
    schema = default_schema(width)
    if schema is None:
        raise ParseError(
            sc.source,
            run.linenos[0],
            excerpt(run.rows[0]),
            f"result row before any column header, and {width} fields match no known nccl-tests layout",
        )
    run.schema = schema
    sc.warnings.append(
        f"line {run.linenos[0]}: no column header before the rows; assumed the {width}-field layout"
    )
    return schema


def _run_block(sc: Scan, run: Run) -> tuple[Block, bool]:
    """Parse the run's rows; a bad last row of an unfinished output is truncation, else an error."""
    block = parse_rows(_schema_of(sc, run), run.rows, run.linenos)
    truncated = False
    for lineno, line, why in block.bad:
        if lineno == sc.last_row_line and not run.finished:
            sc.warnings.append(f"line {lineno}: last row is incomplete (truncated output): {why}")
            truncated = True
            continue
        raise ParseError(sc.source, lineno, excerpt(line), f"malformed result row: {why}")
    return block, truncated


def _melt(block: Block, schema: Schema, run: Run) -> pd.DataFrame:
    """One row per (table line, placement), out-of-place before in-place, as printed."""
    n = len(block.lines)
    p = len(schema.placements)
    keep = block.present.ravel()
    cols: dict[str, object] = {"run": np.full(n * p, run.index, dtype=np.int64)[keep]}
    cols["collective"] = None
    for name in ("size_bytes", "count", "type", "redop", "root"):
        cols[name] = _repeat(block.keys.get(name), n, p, keep, name)
    for name, values in block.keys.items():
        if name not in cols:
            cols[name] = _repeat(values, n, p, keep, name)
    cols["placement"] = np.tile(np.asarray(schema.placements, dtype=object), n)[keep]
    names = list(dict.fromkeys(k for g in block.metrics for k in g))
    for name in names:
        stacked = np.column_stack([g.get(name, np.full(n, np.nan)) for g in block.metrics])
        cols[name] = stacked.ravel()[keep]
    if "wrong" not in cols:
        cols["wrong"] = np.full(int(keep.sum()), np.nan)
    if block.timestamps is not None:
        stamps = pd.to_datetime(pd.Series(block.timestamps), format="%Y-%m-%d %H:%M:%S", errors="coerce")
        cols["timestamp"] = np.repeat(stamps.to_numpy(), p)[keep]
    cols["line"] = np.repeat(block.lines, p)[keep]
    return pd.DataFrame(cols)


def _repeat(values: object, n: int, p: int, keep: np.ndarray, name: str) -> object:
    if values is None:
        if name == "root":
            return pd.array([pd.NA] * int(keep.sum()), dtype="Int64")
        return None if name in ("type", "redop") else np.full(int(keep.sum()), -1, dtype=np.int64)
    arr = np.repeat(np.asarray(values, dtype=object if name in ("type", "redop") else None), p)[keep]
    if name == "root":
        return pd.array(arr, dtype="Int64")
    return arr


# ---------------------------------------------------------------- meta, collective, run checks


def _meta(sc: Scan) -> dict[str, object]:
    main = next((r for r in sc.runs if r.rows), sc.runs[0] if sc.runs else None)
    meta: dict[str, object] = {"runs": len([r for r in sc.runs if r.rows]) or len(sc.runs)}
    if sc.nccl_version is not None:
        meta["nccl_version"] = sc.nccl_version
    if main is None:
        return meta
    params = {k: v for k, v in main.info.items() if k in _PARAM_KEYS}
    if params:
        meta["params"] = params
    meta.update({k: v for k, v in main.info.items() if k not in _PARAM_KEYS})
    for run in sc.runs:  # version lines may sit in a run of their own (printed before the header)
        for key in ("nccl_tests_version", "nccl_headers", "nccl_library"):
            if key in run.info:
                meta.setdefault(key, run.info[key])
    devices = [d for r in sc.runs for d in r.devices]
    if devices:
        meta["devices"] = devices
        meta["ranks"] = len({d.get("rank") for d in main.devices}) if main.devices else len(devices)
        meta["hosts"] = sorted({str(d["host"]) for d in devices if "host" in d})
    if main.schema is not None:
        meta["columns"] = list(main.schema.header)
    if len(sc.runs) > 1:
        meta["runs_meta"] = [dict(r.info, devices=len(r.devices), rows=len(r.rows)) for r in sc.runs]
    return meta


_PARAM_KEYS = frozenset(
    {
        "nthreads",
        "ngpus",
        "min_bytes",
        "max_bytes",
        "step",
        "step_kind",
        "warmup_iters",
        "iters",
        "agg_iters",
        "validation",
        "graph",
        "unalign",
    }
)


def _guess_collective(sc: Scan) -> str | None:
    """The collective named by a binary mentioned outside the header (a command echo)."""
    known = [b for b in sc.binaries if collective_of(b + "_perf")]
    return known[0] if known else None


def _first_collective(sc: Scan) -> str | None:
    for run in sc.runs:
        binary = run.info.get("binary")
        if isinstance(binary, str) and collective_of(binary):
            return collective_of(binary)
    return None


def _fill_collective(frame: pd.DataFrame, sc: Scan, fallback: str | None) -> None:
    per_run: dict[int, str | None] = {}
    for run in sc.runs:
        binary = run.info.get("binary")
        per_run[run.index] = collective_of(binary) if isinstance(binary, str) else None
        per_run[run.index] = per_run[run.index] or fallback
    frame["collective"] = frame["run"].map(per_run).astype("str")


def _independent_runs(sc: Scan) -> int:
    """N when the log holds N copies of the same single-process test run side by side.

    That is what mpirun/srun print when the binary was built without MPI (MPI=1 not set): every
    process believes it is rank 0 of its own job, prints its own header and runs alone.
    """
    if len(sc.param_lines) < 2:
        return 0
    texts = {text for _, text in sc.param_lines}
    rank0 = sum(1 for r in sc.runs for d in r.devices if d.get("rank") == 0)
    tags = {tag for tag, _ in sc.param_lines}
    concurrent = sc.interleaved or len(tags) > 1
    if len(texts) == 1 and concurrent and rank0 >= len(sc.param_lines):
        return len(sc.param_lines)
    return 0


def _split_independent(frame: pd.DataFrame, sc: Scan, n: int, meta: dict[str, object]) -> pd.DataFrame:
    per_run_ranks = _ranks_per_run(sc)
    what = "single-rank" if per_run_ranks == 1 else f"{per_run_ranks}-rank"
    sc.warnings.append(f"repeated headers: {n} independent {what} runs (MPI not built in?)")
    meta["independent_runs"] = n
    if frame["run"].nunique() < n:
        # untagged, interleaved output: the k-th row of a given size belongs to the k-th process
        keys = ["size_bytes", "type", "redop", "placement"]
        occurrence = frame.groupby(keys, sort=False, dropna=False).cumcount()
        frame["run"] = occurrence.clip(upper=n - 1).to_numpy()
        sc.warnings.append("rows were not tagged by rank; assigned to runs in order of appearance")
    else:
        frame["run"] = frame["run"].rank(method="dense").astype(np.int64) - 1
    return frame


def _ranks_per_run(sc: Scan) -> int:
    for run in sc.runs:
        nthreads, ngpus = run.info.get("nthreads"), run.info.get("ngpus")
        if isinstance(nthreads, int) and isinstance(ngpus, int):
            return nthreads * ngpus
    return 1


def _unfinished(sc: Scan) -> bool:
    """A run that printed rows but never its footer stopped early: flag the result partial."""
    flagged = False
    for run in sc.runs:
        if run.rows and not run.finished and "nthreads" in run.info:
            last = run.rows[-1].split()[0]
            sc.warnings.append(
                f"run {run.index} (line {run.start_line}): no '# Avg bus bandwidth' footer after the "
                f"last row (size {last} of max {run.info.get('max_bytes')}): truncated or crashed"
            )
            flagged = True
    return flagged
