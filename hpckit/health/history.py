"""Sweep history with pandas: one Parquet file per run under ``<store>/history/``, fleet medians, and the
nodes drifting from their own past. Only the sweep and the report import this (never the quick tier)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd

from hpckit.health.model import Row
from hpckit.health.store import Store

COLUMNS = [
    "run_id",
    "time",
    "node",
    "tier",
    "check",
    "metric",
    "status",
    "value",
    "unit",
    "expected",
    "lower",
    "upper",
    "fault",
    "evidence",
]
# Units of counts and fill levels: they move for reasons that are not a node getting worse.
NOT_DRIFT_UNITS = frozenset({"", "lines", "events", "procs", "errors", "rows", "ratio", "gpus", "links", "gen"})


def rows_frame(rows: Sequence[Row], run_id: str, started: float) -> pd.DataFrame:
    records = []
    for row in rows:
        data = row.to_dict()
        data["run_id"] = run_id
        data["time"] = pd.Timestamp(row.time or started, unit="s", tz="UTC")
        records.append(data)
    frame = pd.DataFrame.from_records(records, columns=COLUMNS)
    for column in ("value", "expected", "lower", "upper"):
        frame[column] = pd.to_numeric(frame[column], errors="coerce").astype("float64")
    frame["time"] = pd.to_datetime(frame["time"], utc=True)
    return frame


def append_run(store: Store, run_id: str, started: float, rows: Sequence[Row]) -> Path:
    """Write the run's rows as ``history/<run_id>.parquet`` (atomically: readers never see half a file)."""
    target = store.path("history", f"{run_id}.parquet")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp{os.getpid()}")
    rows_frame(rows, run_id, started).to_parquet(tmp, index=False)
    tmp.replace(target)
    return target


def run_ids(store: Store) -> list[str]:
    """Stored runs, oldest first (run ids start with their UTC time)."""
    return sorted(p.stem for p in store.path("history").glob("*.parquet"))


def load_history(store: Store, last: int | None = None) -> pd.DataFrame:
    ids = run_ids(store)
    if last is not None:
        ids = ids[-last:]
    frames = [pd.read_parquet(store.path("history", f"{i}.parquet")) for i in ids]
    frames = [f for f in frames if not f.empty]
    if not frames:
        return pd.DataFrame(columns=COLUMNS)
    return pd.concat(frames, ignore_index=True)


def metric_family(metric: str) -> str:
    """``gpu3.tflops`` -> ``gpu*.tflops``: per-device metrics pooled for fleet medians."""
    return re.sub(r"^(gpu|mlx\d*_?)\d+", r"\1*", metric)


def fleet_medians(frame: pd.DataFrame) -> pd.DataFrame:
    numeric = frame.dropna(subset=["value"])
    numeric = numeric[~numeric["unit"].isin(NOT_DRIFT_UNITS - {"ratio"})]
    if numeric.empty:
        return pd.DataFrame(columns=["check", "metric", "unit", "median", "min", "max", "nodes"])
    numeric = numeric.assign(metric=numeric["metric"].map(metric_family))
    grouped = numeric.groupby(["check", "metric", "unit"], sort=True)["value"]
    out = grouped.agg(["median", "min", "max"]).reset_index()
    out["nodes"] = numeric.groupby(["check", "metric", "unit"], sort=True)["node"].nunique().to_numpy()
    return out


# The least change per unit that counts as drift, whatever the relative change: a munge round trip going
# from 3 to 10 ms is +234 % and means nothing. Units not listed have no floor.
DRIFT_FLOOR = {"s": 0.05, "GB/s": 1.0, "Gb/s": 1.0, "TFLOP/s": 5.0}


def drift(
    current: pd.DataFrame,
    past: pd.DataFrame,
    *,
    min_runs: int = 3,
    rel: float = 0.10,
    mads: float = 3.0,
    floor: Mapping[str, float] = DRIFT_FLOOR,
) -> pd.DataFrame:
    """Metrics of ``current`` that moved away from the same node's own median over ``past``: by more than
    ``rel`` of that median, by more than ``mads`` robust deviations (1.4826 x MAD) of its history, and by
    more than its unit's absolute ``floor``."""
    columns = ["node", "check", "metric", "unit", "value", "median", "change", "runs"]
    keys = ["node", "check", "metric"]
    now = current.dropna(subset=["value"])
    now = now[~now["unit"].isin(NOT_DRIFT_UNITS)]
    before = past.dropna(subset=["value"])
    if now.empty or before.empty:
        return pd.DataFrame(columns=columns)
    stats = before.groupby(keys)["value"].agg(
        median="median", runs="count", mad=lambda v: float((v - v.median()).abs().median())
    )
    joined = now.set_index(keys)[["unit", "value"]].join(stats, how="inner").reset_index()
    joined = joined[joined["runs"] >= min_runs]
    deviation = (joined["value"] - joined["median"]).abs()
    spread = mads * 1.4826 * joined["mad"]
    least = joined["unit"].map(lambda u: floor.get(str(u), 0.0)).astype("float64")
    flagged = joined[(deviation > rel * joined["median"].abs()) & (deviation > spread) & (deviation > least)].copy()
    flagged["change"] = (flagged["value"] - flagged["median"]) / flagged["median"].where(flagged["median"] != 0)
    return flagged[columns].sort_values("change", key=lambda c: -c.abs()).reset_index(drop=True)
