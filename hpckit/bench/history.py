"""The cluster's own benchmark history: a Parquet store on its shared filesystem.

    BENCH_DIR/history/runs.parquet            one row per run (what was run, peak and average busbw)
    BENCH_DIR/history/sweeps/RUN_ID.parquet   that run's table, one row per (size, placement)

A run is compared with earlier runs of the same shape only: collective, backend, node count, ranks
per node, GPU type, data type and largest size, since each of them moves the peak.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from dataclasses import dataclass

import pandas as pd

from hpckit.bench.files import ClusterFiles
from hpckit.errors import HpckitError

# The columns that make two runs comparable.
KEY_COLUMNS = ("op", "backend", "nodes", "ranks_per_node", "gpu", "dtype", "max_bytes")
SUMMARY_COLUMNS = (
    "run_id",
    "time",
    "cluster",
    *KEY_COLUMNS,
    "min_bytes",
    "job_id",
    "peak_busbw_gbps",
    "avg_busbw_gbps",
    "wrong",
    "verdict",
    "settings",
)


class HistoryError(HpckitError):
    pass


def empty_runs() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype="object") for c in SUMMARY_COLUMNS})


def same_shape(runs: pd.DataFrame, key: Mapping[str, object]) -> pd.DataFrame:
    """The earlier runs with this key (every KEY_COLUMNS value equal) and no wrong values."""
    if runs.empty:
        return runs
    mask = pd.Series(True, index=runs.index)
    for column in KEY_COLUMNS:
        if column not in runs.columns:
            return runs.iloc[0:0]
        mask &= runs[column].astype(str) == str(key[column])
    if "wrong" in runs.columns:
        mask &= pd.to_numeric(runs["wrong"], errors="coerce").fillna(0) == 0
    return runs[mask]


def past_peaks(runs: pd.DataFrame, key: Mapping[str, object]) -> list[float]:
    matching = same_shape(runs, key)
    return [float(v) for v in pd.to_numeric(matching["peak_busbw_gbps"], errors="coerce").dropna()]


def to_parquet(frame: pd.DataFrame) -> bytes:
    buffer = io.BytesIO()
    frame.to_parquet(buffer, index=False)
    return buffer.getvalue()


def from_parquet(data: bytes, where: str) -> pd.DataFrame:
    try:
        return pd.read_parquet(io.BytesIO(data))
    except (OSError, ValueError) as exc:
        raise HistoryError(f"{where} is not a readable Parquet file: {exc}") from None


@dataclass
class HistoryStore:
    files: ClusterFiles
    root: str  # BENCH_DIR/history

    @property
    def runs_path(self) -> str:
        return f"{self.root}/runs.parquet"

    def sweep_path(self, run_id: str) -> str:
        return f"{self.root}/sweeps/{run_id}.parquet"

    def load(self) -> pd.DataFrame:
        data = self.files.read(self.runs_path)
        return empty_runs() if data is None else from_parquet(data, self.runs_path)

    def append(self, summary: Mapping[str, object], sweep: pd.DataFrame) -> pd.DataFrame:
        """Add one run (its table first, then its summary row); the runs table as it is now."""
        run_id = str(summary["run_id"])
        self.files.write(self.sweep_path(run_id), to_parquet(_plain(sweep)))
        runs = self.load()
        row = pd.DataFrame([{c: summary.get(c) for c in SUMMARY_COLUMNS}])
        runs = typed(row if runs.empty else pd.concat([runs, row], ignore_index=True))
        self.files.write(self.runs_path, to_parquet(runs))
        return runs


_INTEGERS = ("nodes", "ranks_per_node", "max_bytes", "min_bytes", "wrong")
_FLOATS = ("peak_busbw_gbps", "avg_busbw_gbps")


def typed(runs: pd.DataFrame) -> pd.DataFrame:
    """One type per column (Parquet needs it): integers, floats, and text for the rest."""
    out = runs.copy()
    for column in out.columns:
        if column in _INTEGERS:
            out[column] = pd.to_numeric(out[column], errors="coerce").astype("Int64")
        elif column in _FLOATS:
            out[column] = pd.to_numeric(out[column], errors="coerce").astype("float64")
        else:
            out[column] = out[column].map(lambda v: "" if v is None or v != v else str(v)).astype(str)
    return out


def _plain(frame: pd.DataFrame) -> pd.DataFrame:
    """Categories as text: runs written by different versions must concatenate cleanly."""
    out = frame.copy()
    for column in out.columns:
        if isinstance(out[column].dtype, pd.CategoricalDtype):
            out[column] = out[column].astype(str)
    return out
