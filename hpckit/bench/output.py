"""A bench run's files (table as CSV and Parquet, busbw plot, raw output, JSON summary) and its JSON form."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never a display

import matplotlib.pyplot as plt

from hpckit.bench.expect import gbps
from hpckit.bench.history import to_parquet
from hpckit.bench.run import BenchResult
from hpckit.results.derived import GIB
from hpckit.results.report import compact, human_bytes


def summary(result: BenchResult, files: dict[str, str] | None = None) -> dict[str, object]:
    """Everything a CI job needs to know about the run, JSON-ready."""
    exp = result.expectation
    return {
        "run_id": result.run_id,
        "cluster": result.cluster,
        "benchmark": result.sweep.bench.name,
        "collective": result.sweep.bench.op,
        "backend": result.backend,
        "job_id": result.job_id,
        "nodes": result.sweep.nodes,
        "ranks_per_node": result.sweep.ranks_per_node,
        "hosts": result.hosts,
        "gpu": result.gpu_name,
        "peak_busbw_gbps": result.peak_busbw,
        "peak_basis": result.peak_basis,
        "peak_size_bytes": peak_row_size(result),
        "avg_busbw_gbps": result.avg_busbw,
        "wrong": result.wrong,
        "settings": result.settings,
        "settings_text": result.settings_text,
        "expected": {"low_gbps": exp.low, "high_gbps": exp.high, "basis": exp.basis},
        "verdict": {"status": result.verdict.status, "message": result.verdict.message},
        "history": {
            "status": result.history.status,
            "message": result.history.message,
            "median_gbps": result.history_median,
        },
        "output_path": result.output_path,
        "warnings": result.warnings,
        "files": files or {},
        "rows": _rows(result),
    }


def _rows(result: BenchResult) -> list[dict[str, object]]:
    cols = ["size_bytes", "count", "placement", "time_us", "algbw_gbps", "busbw_gbps", "wrong"]
    frame = result.parsed.frame[[c for c in cols if c in result.parsed.frame.columns]]
    records: list[dict[str, object]] = json.loads(frame.to_json(orient="records"))
    return records


def save(result: BenchResult, out_dir: Path) -> dict[str, str]:
    """Write the run's files under out_dir; name -> path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = out_dir / f"{result.sweep.bench.name}-{result.run_id}"
    paths = {
        "csv": stem.with_suffix(".csv"),
        "parquet": stem.with_suffix(".parquet"),
        "png": stem.with_suffix(".png"),
        "log": stem.with_suffix(".out"),
        "json": stem.with_suffix(".json"),
    }
    frame = result.parsed.frame
    frame.to_csv(paths["csv"], index=False)
    paths["parquet"].write_bytes(to_parquet(frame.astype({c: str for c in frame.select_dtypes("category")})))
    plot(result, paths["png"])
    paths["log"].write_text(result.output)
    files = {name: str(path) for name, path in paths.items()}
    paths["json"].write_text(json.dumps(summary(result, files), indent=2, default=str) + "\n")
    return files


def plot(result: BenchResult, path: Path) -> None:
    """busbw vs message size, per placement, with the expected range and the history median."""
    frame = result.parsed.frame
    fig, ax = plt.subplots(figsize=(8, 4.8))
    for placement, part in frame.groupby("placement", observed=True, sort=False):
        label = {"out": "out-of-place", "in": "in-place"}.get(str(placement), str(placement))
        ax.plot(part["size_bytes"], part["busbw_gbps"], marker=".", label=label)
    exp = result.expectation
    if exp.low is not None:
        top = exp.high if exp.high is not None else exp.low
        ax.axhspan(exp.low, top, color="tab:green", alpha=0.15, label=f"expected ({exp.basis})")
        ax.axhline(exp.low, color="tab:green", linewidth=0.8)
    if result.history_median is not None:
        ax.axhline(result.history_median, color="tab:gray", linestyle="--", label="history median")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("bus bandwidth (GB/s)")
    where = result.cluster or "cluster"
    ax.set_title(
        f"{result.sweep.bench.op} on {where}: {result.sweep.nodes} nodes, {result.backend}, job {result.job_id}"
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def table_text(result: BenchResult) -> str:
    """The table as nccl-tests shows it, compacted (hpckit.results' terminal form); bus bandwidth printed as
    the peak line and the verdict print it, and the row the peak comes from marked."""
    table = compact(result.parsed).copy()
    for column in ("out busbw", "in busbw"):
        if column in table.columns:
            table[column] = table[column].map(gbps)
    if "size" in table.columns:
        peak_size = human_bytes(peak_row_size(result))
        table["peak"] = ["<- peak" if size == peak_size else "" for size in table["size"]]
    return str(table.to_string(index=False))


def peak_row_size(result: BenchResult) -> int:
    """The message size whose busbw is the peak (the largest such size at >= 1 GiB, else the largest size)."""
    frame = result.parsed.frame
    valid = frame[frame["busbw_gbps"].notna()]
    eligible = valid[valid["size_bytes"] >= GIB]
    if eligible.empty:
        eligible = valid[valid["size_bytes"] == valid["size_bytes"].max()]
    best = eligible[eligible["busbw_gbps"] == eligible["busbw_gbps"].max()]
    return int(best["size_bytes"].max())
