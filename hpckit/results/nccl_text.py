"""nccl-tests text output (every era) -> one frame row per (size, placement) measurement."""

from __future__ import annotations

import itertools
import re

import numpy as np
import pandas as pd

from hpckit.results.chunks import release
from hpckit.results.lines import excerpt, strip_prefix
from hpckit.results.model import ParseError, ParseResult
from hpckit.results.nccl_fields import UNITS, collective_of
from hpckit.results.nccl_scan import Chunk, Run, Scan, scan_chunk
from hpckit.results.nccl_table import Block, Column, Schema, default_schema, parse_rows, plain

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
KEEP_FAILURES = 20  # failure lines kept in meta (a 512-rank job may print one per rank)


class NcclReader:
    """nccl-tests text fed a chunk at a time: each chunk is scanned and its rows parsed at once,
    so that only the columns of the rows stay (not the text they came from)."""

    def __init__(self, kind: str, source: str, collective: str | None) -> None:
        self.kind, self.collective = kind, collective
        self.sc = Scan(source)
        self.parts: list[dict[str, Column]] = []
        self.bad: list[tuple[int, str, str, int]] = []  # (line number, line, why, run index)

    def feed(self, text: str, first_line: int, lines: int | None = None) -> None:
        scan_chunk(self.sc, text, first_line, lines)
        self._parse_pending(plain(text))

    def finish(self) -> ParseResult:
        sc = self.sc
        for run in sc.runs:
            run.schema = run.schema or run.assumed
        _cut_last_line(sc, self.bad)
        if not any(r.nrows for r in sc.runs):
            return _no_rows(self.kind, sc)
        partial = _bad_rows(sc, self.bad)
        if not self.parts:  # every row was a bad last row
            return _no_rows(self.kind, sc)
        frame = _concat(self.parts)
        self.parts = []
        return _result(self.kind, sc, frame, partial, self.collective)

    def _parse_pending(self, plain: bool) -> None:
        """The rows the scan found since the last call, runs sharing a layout in one go."""
        groups: dict[int, tuple[Schema, list[Run]]] = {}  # by identity: equal headers share a Schema
        for run in sorted(self.sc.pending, key=lambda r: r.index):
            schema = _schema_of(self.sc, run)
            groups.setdefault(id(schema), (schema, []))[1].append(run)
        parts = []
        for schema, runs in groups.values():
            chunks = [(run.index, c) for run in runs for c in run.chunks]
            linenos, owner = _numbering(chunks)
            block = parse_rows(schema, [c.text for _, c in chunks], linenos, plain)
            if block.bad:
                run_of = dict(zip(linenos.tolist(), owner.tolist(), strict=True))
                self.bad.extend((n, line, why, run_of[n]) for n, line, why in block.bad)
            if len(block.lines):
                parts.append(_melt(block, schema, owner[block.index]))
        # a chunk's layouts merged in file order now, while small: the parts of a whole log then
        # follow each other and need no sort (one that would cost a few columns of memory)
        if parts:
            self.parts.append(_merged(parts, trim=False) if len(parts) > 1 else parts[0])
        for run in self.sc.pending:
            run.chunks.clear()
        self.sc.pending.clear()


def _result(kind: str, sc: Scan, frame: pd.DataFrame, partial: bool, collective: str | None) -> ParseResult:
    meta = _meta(sc)
    coll = collective or _guess_collective(sc)
    _fill_collective(frame, sc, coll)
    meta["collective"] = _first_collective(sc) or coll  # what the log says wins over the caller's hint
    independent = _independent_runs(sc)
    if independent:
        frame = _split_independent(frame, sc, independent, meta)
    partial |= _unfinished(sc)
    failed = _failed(sc, meta)
    meta["units"] = {k: v for k, v in UNITS.items() if k in frame.columns}
    return ParseResult(kind, frame, meta, partial or failed, sc.warnings, failed)


def _failed(sc: Scan, meta: dict[str, object]) -> bool:
    """A test that printed "Test NCCL failure" (or CUDA) failed, whatever rows came before.  The
    first line that says why (NCCL's or CUDA's error, wherever on its line) is the stated cause and
    comes first: in the warnings, in meta["cause"] and at the head of meta["failures"] (the
    " .. Test failure" trace lines only say where it was caught)."""
    if not sc.failures:
        return False
    cause = sc.cause or sc.failures[0]
    rest = [f for f in sc.failures if f != cause]
    more = f" ({len(rest)} more failure lines)" if rest else ""
    sc.warnings.insert(0, f"line {cause[0]}: the test failed: {excerpt(cause[1])}{more}")
    meta["cause"] = f"{cause[0]}: {cause[1]}"
    meta["failures"] = [f"{n}: {text}" for n, text in [cause, *rest][:KEEP_FAILURES]]
    return True


def _no_rows(kind: str, sc: Scan) -> ParseResult:
    if not sc.runs and not sc.failures:
        lineno, line = sc.first_line
        raise ParseError(
            sc.source,
            lineno,
            excerpt(line),
            "no nccl-tests output found (no '# nThread' header, column header or result row)",
        )
    if not sc.failures and not any(r.nrows for r in sc.runs):
        sc.warnings.append("no result rows: the test printed its header but no measurements (crashed?)")
    frame = pd.DataFrame({c: pd.Series(dtype="float64") for c in FRAME_COLUMNS})
    meta = _meta(sc)
    failed = _failed(sc, meta)
    return ParseResult(kind, frame, meta, True, sc.warnings, failed)


def _schema_of(sc: Scan, run: Run) -> Schema:
    """The run's layout: its header's, or, for rows before any header, the known layout of their
    width.  (That one is kept apart from the header's until the end, so that the scan of the lines
    after does not depend on where the chunks were cut.)"""
    if run.schema is not None:
        return run.schema
    if run.assumed is not None:
        return run.assumed
    first_row = run.chunks[0].text.split("\n", 1)[0]
    width = len(first_row.split())
    schema = default_schema(width)
    if schema is None:
        raise ParseError(
            sc.source,
            run.chunks[0].first_line,
            excerpt(first_row),
            f"result row before any column header, and {width} fields match no known nccl-tests layout",
        )
    run.assumed = schema
    sc.warnings.append(
        f"line {run.chunks[0].first_line}: no column header before the rows; assumed the {width}-field layout"
    )
    return schema


def _numbering(chunks: list[tuple[int, Chunk]]) -> tuple[np.ndarray, np.ndarray]:
    """(line number, run index) of every row of the chunks, built whole: thousands of short runs
    would otherwise cost one small array each."""
    counts = np.asarray([c.rows for _, c in chunks], dtype=np.int64)
    firsts = np.asarray([c.first_line for _, c in chunks], dtype=np.int64)
    ahead = np.cumsum(counts) - counts  # rows before each chunk
    linenos = np.arange(int(counts.sum()), dtype=np.int64) + np.repeat(firsts - ahead, counts)
    owner = np.repeat(np.asarray([i for i, _ in chunks], dtype=np.int64), counts)
    return linenos, owner


def _bad_rows(sc: Scan, bad: list[tuple[int, str, str, int]]) -> bool:
    """A bad last row of a run that never finished is where its output stopped (truncated, or cut
    by a failure): partial.  Anywhere else it is an error."""
    truncated = False
    for lineno, line, why, index in sorted(bad):
        run = sc.runs[index]
        if lineno == run.last_row[0] and not run.finished:
            sc.warnings.append(f"line {lineno}: last row is incomplete (truncated output): {why}")
            truncated = True
            continue
        cause = sc.cause or (sc.failures[0] if sc.failures else None)
        said = "" if cause is None else f"the test failed: {excerpt(cause[1])} (line {cause[0]}); then a "
        raise ParseError(sc.source, lineno, excerpt(line), f"{said}malformed result row: {why}")
    return truncated


def _cut_last_line(sc: Scan, bad: list[tuple[int, str, str, int]]) -> None:
    """A log that stops inside a row's first field leaves one number on its last line, which no
    line test takes for a row: it is the unfinished run's last row, cut."""
    lineno, raw = sc.last_line
    line, tag = strip_prefix(raw)
    run = sc.current.get(tag) or (sc.runs[-1] if sc.runs else None)
    token = line.strip()
    if run is None or run.finished or not run.nrows or lineno <= run.last_row[0] or " " in token:
        return
    if token and token[0].isdigit() and _is_number(token):
        run.last_row = (lineno, line)
        run.nrows += 1
        bad.append((lineno, line, "cut after its first field", run.index))


def _is_number(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True


_TEXT_KEYS = ("type", "redop")


def _melt(block: Block, schema: Schema, runs: np.ndarray) -> dict[str, Column]:
    """One row per (table line, placement), out-of-place before in-place, as printed."""
    n = len(block.lines)
    p = len(schema.placements)
    # every placement printed (the bulk readers' rows always): no mask, no copy through it
    present = block.present.ravel()
    everywhere = bool(present.all())
    keep: np.ndarray | slice = slice(None) if everywhere else present
    kept = len(present) if everywhere else int(present.sum())
    cols: dict[str, Column] = {"run": np.repeat(runs, p)[keep]}
    for name in ("size_bytes", "count", *_TEXT_KEYS, "root"):
        cols[name] = _repeat(block.keys.get(name), p, keep, kept, name)
    for name, values in block.keys.items():
        if name not in cols:
            cols[name] = _repeat(values, p, keep, kept, name)
    codes: np.ndarray = np.tile(np.arange(p, dtype=np.int8), n)[keep]
    cols["placement"] = pd.Categorical.from_codes(codes, categories=pd.Index(list(schema.placements)))
    for name in dict.fromkeys(k for g in block.metrics for k in g):
        # (a filler made only where a group lacks the metric: these are columns of every row)
        groups = [_owned(g[name]) if name in g else np.full(n, np.nan) for g in block.metrics]
        cols[name] = Interleaved(groups) if everywhere else np.column_stack(groups).ravel()[present]
    if block.timestamps is not None:
        stamps = pd.to_datetime(pd.Series(block.timestamps), format="%Y-%m-%d %H:%M:%S", errors="coerce")
        cols["timestamp"] = np.repeat(stamps.to_numpy(dtype="datetime64[s]"), p)[keep]
    cols["line"] = np.repeat(block.lines, p)[keep]
    return cols


def _owned(values: np.ndarray) -> np.ndarray:
    """An array that owns its memory: a view of an Arrow buffer (the row reader's casts) is
    copied out, so that a chunk's Arrow memory is all freed when the chunk is done (a few kept
    arrays would pin the pool's pages, and they would add up over a long log)."""
    return values if values.base is None else values.copy()


def _repeat(values: Column, p: int, keep: np.ndarray | slice, kept: int, name: str) -> Column:
    """A per-line key column as per-row; text becomes categorical (factorised once per line)."""
    text = name in _TEXT_KEYS or isinstance(values, list | pd.Categorical)
    if values is None:  # legacy tables have no root column
        return _missing_text(kept) if text else np.full(kept, np.nan)
    if text:
        cat = values if isinstance(values, pd.Categorical) else pd.Categorical(values)
        return pd.Categorical.from_codes(np.repeat(cat.codes, p)[keep], categories=cat.categories)
    repeated: np.ndarray = np.repeat(np.asarray(values), p)
    kept_values: np.ndarray = repeated[keep]
    return kept_values


def _missing_text(n: int) -> Column:
    """n missing text values, built from codes (a list of n Nones is slow to infer)."""
    return pd.Categorical.from_codes(np.full(n, -1, dtype=np.int8), categories=pd.Categorical([None]).categories)


def _filler(n: int, like: Column) -> Column:
    """What a column holds for rows of a layout that lacks it (timestamps, per-iteration stats)."""
    if isinstance(like, pd.Categorical):
        return _missing_text(n)
    if like.dtype.kind == "M":
        return np.full(n, np.datetime64("NaT"), dtype=like.dtype)
    return np.full(n, np.nan)


class Interleaved:
    """A metric column of one layout as its placements' arrays (row i*p+g is groups[g][i]),
    written straight into the frame's column: a stacked copy first would be one more column of
    fresh pages (page faults) per metric on a long log."""

    def __init__(self, groups: list[np.ndarray]) -> None:
        self.groups = groups
        self.dtype = np.result_type(*groups)

    def __len__(self) -> int:
        return len(self.groups[0]) * len(self.groups)

    def put(self, out: np.ndarray, where: np.ndarray | slice) -> None:
        """out[where] = the rows (where: this piece's row positions in ``out``)."""
        p = len(self.groups)
        for g, values in enumerate(self.groups):
            if isinstance(where, slice):
                out[where.start + g : where.stop : p] = values
            else:
                out[where[g::p]] = values


def _join(pieces: list[Column]) -> Column:
    if any(isinstance(piece, Interleaved) for piece in pieces):
        return _scatter(pieces, None)
    if len(pieces) == 1:
        return pieces[0]
    if isinstance(pieces[0], pd.Categorical):
        first = list(pieces[0].categories)
        if all(list(piece.categories) == first for piece in pieces):  # (placement: out, in as printed)
            return pd.Categorical.from_codes(np.concatenate([p.codes for p in pieces]), dtype=pieces[0].dtype)
        # union by hand: pieces may differ in the dtype of their categories (an empty filler)
        categories = pd.Index(sorted({c for piece in pieces for c in piece.categories}, key=str))
        codes = [piece.set_categories(categories).codes for piece in pieces]
        return pd.Categorical.from_codes(np.concatenate(codes), categories=categories)
    return np.concatenate(pieces)


def _concat(parts: list[dict[str, Column]]) -> pd.DataFrame:
    """Build the frame once from every part's columns, in file order (run, then line)."""
    cols = _merged(parts)
    n = len(cols["run"])
    cols["collective"] = pd.Categorical.from_codes(np.full(n, -1, dtype=np.int8), categories=pd.Index([], dtype=str))
    cols["root"] = _nullable_ints(cols["root"])
    cols.setdefault("wrong", np.full(n, np.nan))
    front = [c for c in FRAME_COLUMNS if c in cols]
    order = [*front, *(c for c in cols if c not in front and c != "line"), "line"]
    # copy=False: one block per column, as built, rather than a copy of them all into blocks
    # by dtype (tens of MB of fresh pages for a long log)
    return pd.DataFrame({c: cols.pop(c) for c in order}, copy=False)


def _merged(parts: list[dict[str, Column]], trim: bool = True) -> dict[str, Column]:
    """The parts' columns joined, in file order (run, then line).  Each column's pieces are
    dropped as soon as the column is built (``trim``: and their memory given back), so that a
    long log's rows are held about once, not twice."""
    lengths = [len(part["run"]) for part in parts]
    n = sum(lengths)
    sort = _file_order(parts)
    # layouts read apart go back to file order column by column, before the frame exists (cheaper
    # than reordering the frame's blocks): each numeric column is written once, in place
    where = None if sort is None else np.empty(n, dtype=np.int64)
    if where is not None and sort is not None:
        where[sort] = np.arange(n)
    cols: dict[str, Column] = {}
    for name in list(dict.fromkeys(k for part in parts for k in part)):
        like = next(part[name] for part in parts if name in part)
        pieces = [
            part.pop(name) if name in part else _filler(size, like) for part, size in zip(parts, lengths, strict=True)
        ]
        arrays = [piece for piece in pieces if isinstance(piece, np.ndarray | Interleaved)]
        if where is None or sort is None:
            cols[name] = _join(pieces)
        elif len(arrays) == len(pieces):
            cols[name] = _scatter(arrays, where)
        else:
            cols[name] = _take(_join(pieces), sort)
        del pieces, arrays, like
        if trim:
            release()  # (the pieces' heap pages back to the system before the next column is made)
    return cols


def _nullable_ints(values: Column) -> Column:
    """A column of whole numbers that may be missing (NaN) as pandas' Int64; an int64 column
    (every row has it) becomes one without a copy."""
    if isinstance(values, np.ndarray) and values.dtype == np.int64:
        return pd.arrays.IntegerArray(values, np.zeros(len(values), dtype=bool))
    return pd.array(np.asarray(values, dtype=np.float64), dtype="Int64")  # NaN -> <NA>


def _file_order(parts: list[dict[str, Column]]) -> np.ndarray | None:
    """None when the parts' rows already come in file order (one layout: each part is in order,
    and parts follow each other), else the stable sort that puts them there."""
    ends = [(int(p["run"][0]), int(p["line"][0]), int(p["run"][-1]), int(p["line"][-1])) for p in parts]
    if all(a[2:] <= b[:2] for a, b in itertools.pairwise(ends)):
        return None
    run = np.concatenate([np.asarray(part["run"]) for part in parts])
    line = np.concatenate([np.asarray(part["line"]) for part in parts])
    # line numbers never repeat within a run, so one key says it; each part is sorted already,
    # so a stable sort merges a few sorted runs
    key = run * (int(line.max(initial=0)) + 1) + line
    sort: np.ndarray = np.argsort(key, kind="stable")
    return sort


def _scatter(pieces: list[np.ndarray | Interleaved], where: np.ndarray | None) -> np.ndarray:
    """The pieces one after another, each row put at ``where`` (what np.concatenate and then a
    take would give, in one array); None: in that order."""
    total = sum(len(piece) for piece in pieces)
    out = np.empty(total, dtype=np.result_type(*(piece.dtype for piece in pieces)))
    at = 0
    for piece in pieces:
        place = slice(at, at + len(piece)) if where is None else where[at : at + len(piece)]
        if isinstance(piece, Interleaved):
            piece.put(out, place)
        else:
            out[place] = piece
        at += len(piece)
    return out


def _take(values: object, order: np.ndarray) -> object:
    if isinstance(values, pd.Categorical):
        return pd.Categorical.from_codes(values.codes[order], dtype=values.dtype)
    if isinstance(values, np.ndarray):
        return values[order]
    return values.take(order)  # type: ignore[attr-defined]  # pandas extension arrays (Int64)


# ---------------------------------------------------------------- meta, collective, run checks


def _meta(sc: Scan) -> dict[str, object]:
    main = next((r for r in sc.runs if r.nrows), sc.runs[0] if sc.runs else None)
    meta: dict[str, object] = {"runs": len([r for r in sc.runs if r.nrows]) or len(sc.runs)}
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
    _devices_meta(sc, main, meta)
    if main.schema is not None:
        meta["columns"] = list(main.schema.header)
    if len(sc.runs) > 1:
        meta["runs_meta"] = [dict(r.info, devices=len(r.device_lines), rows=r.nrows) for r in sc.runs]
    return meta


_HOST = re.compile(r"\bon\s+(\S+)")


def _devices_meta(sc: Scan, main: Run, meta: dict[str, object]) -> None:
    """Devices of the main run (parsed), and the hosts of every run (found in bulk)."""
    with_devices = main if main.device_lines else next((r for r in sc.runs if r.device_lines), None)
    if with_devices is None:
        return
    devices = with_devices.devices()
    meta["devices"] = devices
    meta["ranks"] = len({d.get("rank") for d in devices})
    # runs on the same nodes print the same device lines: search each distinct line once
    every = "\n".join(dict.fromkeys(line for r in sc.runs for line in r.device_lines))
    meta["hosts"] = sorted(set(_HOST.findall(every)))


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
    names = sorted({c for c in per_run.values() if c is not None})
    lookup = np.full(len(sc.runs), -1, dtype=np.int16)  # run index -> category code
    for index, coll in per_run.items():
        lookup[index] = names.index(coll) if coll is not None else -1
    codes = lookup[frame["run"].to_numpy()]
    frame["collective"] = pd.Categorical.from_codes(codes, categories=pd.Index(names, dtype=str))


def _independent_runs(sc: Scan) -> int:
    """N when the log holds N copies of the same single-process test run side by side.

    That is what mpirun/srun print when the binary was built without MPI (MPI=1 not set): every
    process believes it is rank 0 of its own job, prints its own header and runs alone.
    """
    if len(sc.param_lines) < 2:
        return 0
    texts = {text for _, text in sc.param_lines}
    tags = {tag for tag, _ in sc.param_lines}
    concurrent = sc.interleaved or len(tags) > 1
    if len(texts) == 1 and concurrent:
        rank0 = sum(r.rank0_lines() for r in sc.runs)
        if rank0 >= len(sc.param_lines):
            return len(sc.param_lines)
    return 0


def _split_independent(frame: pd.DataFrame, sc: Scan, n: int, meta: dict[str, object]) -> pd.DataFrame:
    per_run_ranks = _ranks_per_run(sc)
    what = "single-rank" if per_run_ranks == 1 else f"{per_run_ranks}-rank"
    sc.warnings.append(f"repeated headers: {n} independent {what} runs (MPI not built in?)")
    meta["independent_runs"] = n
    meta["devices"] = [d for run in sc.runs for d in run.devices()]
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
        if run.nrows and not run.finished and "nthreads" in run.info:
            last = (run.last_row[1].split() or ["?"])[0]
            sc.warnings.append(
                f"run {run.index} (line {run.start_line}): no '# Avg bus bandwidth' footer after the "
                f"last row (size {last} of max {run.info.get('max_bytes')}): truncated or crashed"
            )
            flagged = True
    return flagged
