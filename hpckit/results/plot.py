"""PNG plots of parsed results: busbw vs message size, step time vs step (matplotlib, Agg)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never a display

import matplotlib.pyplot as plt
from matplotlib.axes import Axes

from hpckit.results.model import ParseResult
from hpckit.results.report import NCCL_KINDS, TRAINING_KINDS


def plot(results: list[tuple[str, ParseResult]], out: Path) -> int:
    """Write one PNG with a panel per family present; returns the number of panels (0: nothing)."""
    nccl = [(s, r) for s, r in results if r.kind in NCCL_KINDS and not r.frame.empty]
    training = [(s, r) for s, r in results if r.kind in TRAINING_KINDS and "step_time_s" in r.frame.columns]
    panels = [p for p in (nccl, training) if p]
    if not panels:
        return 0
    fig, axes = plt.subplots(1, len(panels), figsize=(7 * len(panels), 4.5), squeeze=False)
    for ax, group in zip(axes[0], panels, strict=True):
        if group is nccl:
            _busbw(ax, nccl)
        else:
            _step_time(ax, training)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return len(panels)


def _busbw(ax: Axes, results: list[tuple[str, ParseResult]]) -> None:
    for source, result in results:
        frame = result.frame[result.frame["size_bytes"] > 0]
        for (run, placement), part in frame.groupby(["run", "placement"], sort=False):
            label = f"{Path(source).name} {placement}" + (f" run {run}" if frame["run"].nunique() > 1 else "")
            ax.plot(part["size_bytes"], part["busbw_gbps"], marker=".", label=label)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.set_title("nccl-tests busbw")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small")


def _step_time(ax: Axes, results: list[tuple[str, ParseResult]]) -> None:
    for source, result in results:
        frame = result.frame
        ax.plot(frame["step"], frame["step_time_s"], marker=".", label=Path(source).name)
    ax.set_xlabel("step")
    ax.set_ylabel("step time (s)")
    ax.set_title("training step time")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
