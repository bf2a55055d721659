"""Figures derived from parsed frames: peak bus bandwidth, steady step time, throughput, MFU."""

from __future__ import annotations

import math

import pandas as pd

GIB = 1 << 30


def peak_busbw(frame: pd.DataFrame) -> float:
    """Bus bandwidth (GB/s) at the largest message sizes: the best busbw among sizes >= 1 GiB.

    When the sweep stops below 1 GiB, the largest size present is used.  This is deliberately not
    nccl-tests' "# Avg bus bandwidth" line, which averages over every size, tiny ones included.
    With several runs in the frame (a `run` column), each run's peak is taken and the lowest
    returned, so that one good run cannot hide a bad one.
    """
    if frame.empty or "busbw_gbps" not in frame.columns:
        raise ValueError("no busbw_gbps measurements in this frame")
    if "run" in frame.columns and frame["run"].nunique() > 1:
        return min(_peak(group) for _, group in frame.groupby("run"))
    return _peak(frame)


def _peak(frame: pd.DataFrame) -> float:
    valid = frame[frame["busbw_gbps"].notna()]
    if valid.empty:
        raise ValueError("every busbw_gbps value is missing")
    large = valid[valid["size_bytes"] >= GIB]
    if large.empty:
        large = valid[valid["size_bytes"] == valid["size_bytes"].max()]
    return float(large["busbw_gbps"].max())


def steady_step_time(frame: pd.DataFrame, skip: int = 5) -> float:
    """Median step time (s) once warm: the first ``skip`` logged steps (compilation, NCCL setup,
    first data loads) are left out.  When the log has no more than ``skip`` steps (an excerpt),
    every step is used, since there is nothing else to go on."""
    if skip < 0:
        raise ValueError("skip must be >= 0")
    if "step_time_s" not in frame.columns:
        raise ValueError("no step_time_s column in this frame")
    times = frame.sort_values("step")["step_time_s"] if "step" in frame.columns else frame["step_time_s"]
    times = times.dropna()
    if times.empty:
        raise ValueError("no step times in this frame")
    steady = times.iloc[skip:] if len(times) > skip else times
    return float(steady.median())


def tokens_per_second(step_time_s: float, global_batch_size: int, seq_length: int, num_gpus: int = 1) -> float:
    """Tokens processed per second (per GPU when ``num_gpus`` > 1): batch x sequence / step time."""
    _positive(step_time_s=step_time_s, global_batch_size=global_batch_size, seq_length=seq_length, num_gpus=num_gpus)
    return global_batch_size * seq_length / step_time_s / num_gpus


def dense_flops_per_token(n_params: float, n_layers: int = 0, hidden_size: int = 0, seq_length: int = 0) -> float:
    """Training FLOPs per token of a dense decoder: 6·N for the weights (forward + backward), plus
    12·layers·hidden·sequence for attention scores when the shape is given."""
    _positive(n_params=n_params)
    return 6.0 * n_params + 12.0 * n_layers * hidden_size * seq_length


def tflops_per_gpu(step_time_s: float, tokens_per_step: float, num_gpus: int, flops_per_token: float) -> float:
    """Achieved model TFLOP/s per GPU: tokens per step x FLOPs per token / (step time x GPUs)."""
    _positive(
        step_time_s=step_time_s,
        tokens_per_step=tokens_per_step,
        num_gpus=num_gpus,
        flops_per_token=flops_per_token,
    )
    return tokens_per_step * flops_per_token / (step_time_s * num_gpus) / 1e12


def mfu(tflops: float, peak_tflops: float) -> float:
    """Model FLOPs utilisation: achieved over peak dense TFLOP/s of the GPU (0..1)."""
    _positive(peak_tflops=peak_tflops)
    if not math.isfinite(tflops) or tflops < 0:
        raise ValueError(f"tflops must be a finite number >= 0, got {tflops}")
    return tflops / peak_tflops


def _positive(**values: float) -> None:
    for name, value in values.items():
        if not math.isfinite(value) or value <= 0:
            raise ValueError(f"{name} must be a finite number > 0, got {value}")
