"""nccl-tests `-J FILE` JSON output -> the same frame as the text parser.

The writer (nccl-tests src/util.cu) streams compact JSON as the test runs and closes the document
only at exit, so a crashed run leaves a prefix: the readable results are kept and the result is
flagged partial.  Doubles are `%lf`; NaN is written as the string "nan"; `nwrong` is null when
validation is off; `root` is a string padded to 6 characters.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
from typing import NoReturn

import numpy as np
import pandas as pd

from hpckit.results.model import ParseError, ParseResult, Value
from hpckit.results.nccl_fields import UNITS, collective_of
from hpckit.results.nccl_text import FRAME_COLUMNS

PLACEMENT_KEYS = (("out", "out_of_place"), ("in", "in_place"))
# (frame column, JSON key of a placement object); "cpu_time" replaces "time" under -C 1
METRIC_KEYS = (
    ("time_us", ("time", "cpu_time")),
    ("algbw_gbps", ("alg_bw",)),
    ("busbw_gbps", ("bus_bw",)),
    ("wrong", ("nwrong",)),
)
PER_ITER_KEYS = (("iter_min_us", "min_us"), ("iter_max_us", "max_us"), ("iter_p99_us", "p99_us"))
CONFIG_KEYS = {
    "nthreads": "nthreads",
    "ngpus": "ngpus",
    "minimum_bytes": "min_bytes",
    "maximum_bytes": "max_bytes",
    "step_factor": "step",
    "step_bytes": "step",
    "warmup_iters": "warmup_iters",
    "iterations": "iters",
    "aggregated_iterations": "agg_iters",
    "validation": "validation",
    "graph": "graph",
}


def parse_nccl_json(
    text: str, kind: str = "nccl-tests-json", source: str = "<text>", collective: str | None = None
) -> ParseResult:
    warnings: list[str] = []
    partial = False
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        doc = _salvage(text, source, exc)
        partial = True
        warnings.append(f"JSON ends early ({exc.msg} at line {exc.lineno}); kept the complete results")
    if not isinstance(doc, dict) or not isinstance(doc.get("results", []), list):
        raise ParseError(source, 1, text[:80], "not an nccl-tests JSON document (no 'results' list)")
    frame = _frame(doc.get("results", []), source)
    meta = _meta(doc)
    coll = collective or meta.get("collective")
    frame["collective"] = pd.Categorical([coll] * len(frame))
    meta["collective"] = coll
    meta["units"] = {k: v for k, v in UNITS.items() if k in frame.columns}
    return ParseResult(kind, frame, meta, partial, warnings)


def _salvage(text: str, source: str, exc: json.JSONDecodeError) -> dict[str, object]:
    """Whatever complete pieces a truncated document holds: config, devices and whole results."""
    decoder = json.JSONDecoder()
    doc: dict[str, object] = {}
    for key in ("version", "nccl_version", "args", "config"):
        m = re.search(rf'"{key}"\s*:\s*', text)
        if m is not None:
            with contextlib.suppress(json.JSONDecodeError):
                doc[key] = decoder.raw_decode(text, m.end())[0]
    m = re.search(r'"results"\s*:\s*\[', text)
    if m is None:
        lines = text.split("\n")  # json counts lines by \n only
        line = lines[exc.lineno - 1] if 0 < exc.lineno <= len(lines) else ""
        raise ParseError(source, exc.lineno, line[:160], f"invalid JSON: {exc.msg} (column {exc.colno})")
    doc["results"] = _complete_items(text, m.end(), decoder)
    return doc


def _complete_items(text: str, pos: int, decoder: json.JSONDecoder) -> list[object]:
    items: list[object] = []
    while True:
        while pos < len(text) and text[pos] in " \t\r\n,":
            pos += 1
        if pos >= len(text) or text[pos] == "]":
            return items
        try:
            item, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError:
            return items
        items.append(item)


def _frame(results: list[object], source: str) -> pd.DataFrame:
    records: list[dict[str, object]] = []
    for i, res in enumerate(results):
        if not isinstance(res, dict):
            raise ParseError(source, 1, str(res)[:80], f"results[{i}] is not an object")
        for placement, key in PLACEMENT_KEYS:
            body = res.get(key)
            if isinstance(body, dict):
                records.append(_record(res, placement, body, res.get(key + "_per_iter"), source, i))
    frame = pd.DataFrame.from_records(records)
    if frame.empty:
        return pd.DataFrame({c: pd.Series(dtype="float64") for c in FRAME_COLUMNS})
    frame.insert(0, "run", np.zeros(len(frame), dtype=np.int64))
    frame.insert(1, "collective", None)
    frame["root"] = frame["root"].astype("Int64")
    for col in ("type", "redop", "placement"):  # categorical, as the text parser gives them
        frame[col] = frame[col].astype("category")
    return frame


def _record(
    res: dict[str, object], placement: str, body: dict[str, object], per_iter: object, source: str, i: int
) -> dict[str, object]:
    rec: dict[str, object] = {
        "size_bytes": _int(res.get("size"), source, i, "size"),
        "count": _int(res.get("count"), source, i, "count"),
        "type": str(res.get("type", "")),
        "redop": str(res.get("redop", "")),
        "root": _root(res.get("root")),
        "placement": placement,
    }
    for column, keys in METRIC_KEYS:
        value = next((body[k] for k in keys if k in body), None)
        rec[column] = _float(value)
    if isinstance(per_iter, dict):
        for column, key in PER_ITER_KEYS:
            rec[column] = _float(per_iter.get(key))
        rec["iter_cv_pct"] = _float(per_iter.get("cv_pct"))
    return rec


def _int(value: object, source: str, i: int, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        _not_int(value, source, i, key)
    # frames hold int64: anything beyond is a garbled number
    if not (math.isfinite(value) and float(value).is_integer() and abs(value) < 1 << 63):
        _not_int(value, source, i, key)
    return int(value)


def _not_int(value: object, source: str, i: int, key: str) -> NoReturn:
    raise ParseError(source, 1, f"results[{i}].{key} = {value!r}", f"results[{i}].{key} is not an integer")


def _root(value: object) -> int | None:
    try:
        root = int(str(value).strip())
    except ValueError:
        return None
    return root if abs(root) < 1 << 63 else None


def _float(value: object) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):  # the writer's NaN
        try:
            return float(value)
        except ValueError:
            return math.nan
    return math.nan


def _meta(doc: dict[str, object]) -> dict[str, object]:
    meta: dict[str, object] = {"runs": 1, "json_version": doc.get("version")}
    code = doc.get("nccl_version")
    if isinstance(code, int):
        meta["nccl_version"] = _version_from_code(code)
        meta["nccl_version_code"] = code
    args = doc.get("args")
    if isinstance(args, list) and args:
        meta["binary"] = str(args[0]).rsplit("/", 1)[-1]
        meta["collective"] = collective_of(str(args[0]))
    config = doc.get("config")
    if isinstance(config, dict):
        params: dict[str, object] = {CONFIG_KEYS[k]: v for k, v in config.items() if k in CONFIG_KEYS}
        if "step_factor" in config or "step_bytes" in config:
            params["step_kind"] = "factor" if "step_factor" in config else "bytes"
        meta["params"] = params
        devices = config.get("devices")
        if isinstance(devices, list):
            found = [_device(d) for d in devices if isinstance(d, dict)]
            meta["devices"] = found
            meta["ranks"] = len(found)
            meta["hosts"] = sorted({str(d.get("host")) for d in found})
    _footer(doc, meta)
    return meta


def _device(d: dict[str, object]) -> dict[str, Value]:
    keys = {
        "rank": "rank",
        "group": "group",
        "pid": "pid",
        "hostname": "host",
        "device": "device",
        "device_hex": "busid",
        "device_info": "name",
    }
    return {new: d[old] for old, new in keys.items() if isinstance(d.get(old), int | str)}  # type: ignore[misc]


def _footer(doc: dict[str, object], meta: dict[str, object]) -> None:
    oob = doc.get("out_of_bounds")
    if isinstance(oob, dict):
        meta["out_of_bounds"] = oob.get("count")
        meta["out_of_bounds_status"] = "OK" if str(oob.get("okay")) == "true" else "FAILED"
    avg = doc.get("average_bus_bandwidth")
    if isinstance(avg, dict):
        meta["avg_busbw_gbps"] = _float(avg.get("bandwidth"))
        okay = str(avg.get("okay"))
        meta["avg_busbw_check"] = {"true": "OK", "false": "FAILED"}.get(okay)
    errors = doc.get("errors")
    if isinstance(errors, list) and errors:
        meta["errors"] = [str(e) for e in errors]


def _version_from_code(code: int) -> str:
    """NCCL_VERSION_CODE: 21903 -> 2.19.3 (since 2.9: major*10000 + minor*100 + patch)."""
    if code >= 10000:
        return f"{code // 10000}.{code // 100 % 100}.{code % 100}"
    return f"{code // 1000}.{code // 100 % 10}.{code % 100}"
