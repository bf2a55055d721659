"""What to show of a ParseResult: a compact table and its derived figures (no printing here)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from hpckit.results.derived import GIB, peak_busbw, steady_step_time
from hpckit.results.kinds import kinds_of
from hpckit.results.model import ParseResult

NCCL_KINDS = kinds_of("nccl")
TRAINING_KINDS = kinds_of("training")
SACCT_KINDS = kinds_of("sacct")
MAX_ROWS = 40


@dataclass(frozen=True)
class Figure:
    """One derived number with its unit and a few words on what it is."""

    name: str
    value: float | int | str | None
    unit: str
    note: str = ""


def figures(result: ParseResult) -> list[Figure]:
    if result.kind in NCCL_KINDS:
        return _nccl_figures(result)
    if result.kind in TRAINING_KINDS:
        return _training_figures(result)
    if result.kind in SACCT_KINDS:
        return _sacct_figures(result)
    return []


def _nccl_figures(result: ParseResult) -> list[Figure]:
    meta = result.meta
    out: list[Figure] = []
    frame = result.frame
    if not frame.empty and frame["busbw_gbps"].notna().any():
        largest = int(frame["size_bytes"].max())
        note = "best busbw at sizes >= 1 GiB" if largest >= GIB else f"at the largest size, {human_bytes(largest)}"
        out.append(Figure("peak_busbw", peak_busbw(frame), "GB/s", note))
    avg = meta.get("avg_busbw_gbps")
    if isinstance(avg, float):
        out.append(Figure("avg_busbw", avg, "GB/s", "nccl-tests '# Avg bus bandwidth' (all sizes)"))
    for key, name, unit in (
        ("collective", "collective", ""),
        ("ranks", "ranks", ""),
        ("nccl_version", "nccl_version", ""),
        ("nccl_tests_version", "nccl_tests_version", ""),
        ("out_of_bounds", "out_of_bounds", "values"),
        ("independent_runs", "independent_runs", ""),
    ):
        value = meta.get(key)
        if isinstance(value, int | float | str):
            out.append(Figure(name, value, unit))
    return out


def _training_figures(result: ParseResult) -> list[Figure]:
    frame = result.frame
    out: list[Figure] = [Figure("steps", len(frame), "")]
    if "step_time_s" in frame.columns and frame["step_time_s"].notna().any():
        out.append(Figure("steady_step_time", steady_step_time(frame), "s", "median after the first 5 steps"))
    for col, unit in (("tflops_per_gpu", "TFLOP/s"), ("tokens_per_s_per_gpu", "tokens/s")):
        if col in frame.columns and frame[col].notna().any():
            out.append(Figure(col, float(frame[col].median()), unit, "median over logged steps"))
    if "loss" in frame.columns and frame["loss"].notna().any():
        out.append(Figure("last_loss", float(frame["loss"].dropna().iloc[-1]), ""))
    return out


def _sacct_figures(result: ParseResult) -> list[Figure]:
    frame = result.frame
    out = [Figure("rows", len(frame), "")]
    if "state" in frame.columns:
        counts = frame["state"].value_counts()
        out.append(Figure("states", ", ".join(f"{k}={v}" for k, v in counts.items()), ""))
    if "elapsed_s" in frame.columns and "step" in frame.columns:
        jobs = frame[frame["step"].isna()]
        if not jobs.empty and jobs["elapsed_s"].notna().any():
            out.append(Figure("total_elapsed", int(jobs["elapsed_s"].sum()), "s", "jobs only, not steps"))
    return out


def compact(result: ParseResult) -> pd.DataFrame:
    """The few columns worth reading on a terminal, at most MAX_ROWS rows (head and tail)."""
    frame = result.frame
    if result.kind in NCCL_KINDS:
        table = _nccl_wide(frame)
    elif result.kind in TRAINING_KINDS:
        cols = ["step", "loss", "step_time_s", "tflops_per_gpu", "tokens_per_s_per_gpu", "consumed_samples"]
        table = frame[[c for c in cols if c in frame.columns]]
    else:
        cols = ["job_id", "job_name", "state", "elapsed_s", "nnodes", "alloc_gpus", "exit_code"]
        table = frame[[c for c in cols if c in frame.columns]]
    if len(table) > MAX_ROWS:
        half = MAX_ROWS // 2
        table = pd.concat([table.head(half), table.tail(half)])
    return table


def _nccl_wide(frame: pd.DataFrame) -> pd.DataFrame:
    """One line per size: out-of-place and in-place side by side, as nccl-tests prints them."""
    if frame.empty:
        return frame
    keys = [c for c in ("run", "size_bytes", "type", "redop") if c in frame.columns]
    short = {"time_us": "us", "busbw_gbps": "busbw"}
    wide = frame[keys].drop_duplicates()
    for placement in ("out", "in"):
        part = frame[frame["placement"] == placement][keys + list(short)]
        part = part.drop_duplicates(subset=keys, keep="last")
        names = {m: f"{placement} {s}" for m, s in short.items()}
        wide = wide.merge(part.rename(columns=names), on=keys, how="left")
    wrong = frame.groupby(keys, sort=False, dropna=False)["wrong"].max().rename("#wrong").reset_index()
    wide = wide.merge(wrong, on=keys, how="left")
    wide.insert(keys.index("size_bytes") + 1, "size", [human_bytes(s) for s in wide["size_bytes"]])
    return wide.drop(columns=["size_bytes"] + (["run"] if wide["run"].nunique() == 1 else []))


def human_bytes(n: float) -> str:
    """1073741824 -> "1 GiB"; 66132 -> "64.6 KiB"."""
    if not isinstance(n, int | float) or math.isnan(n):
        return ""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if float(n).is_integer() else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} TiB"
