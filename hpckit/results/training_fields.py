"""Declarative figure-of-merit tables for training logs (NeMo 1 tqdm, NeMo 2, Megatron-LM family).

Each row is (column, unit, regex[, kind, factor]).  Label regexes are matched whole against the
label of a ``label: value`` (NeMo 2, Megatron) or ``label=value`` (NeMo 1 tqdm postfix) segment;
the others carry one capture group and are searched in the step marker of the line.
"""

from __future__ import annotations

import re

from hpckit.results.model import Field, LabelTable

# Shared by every training log: what a step took and what it achieved.
COMMON: tuple[Field, ...] = (
    Field("loss", "", r"reduced_train_loss|lm loss|loss"),
    Field("step_time_s", "s", r"train_step_timing in s"),
    Field("step_time_s", "s", r"elapsed time per iteration \(ms\)", factor=1e-3),
    Field("tflops_per_gpu", "TFLOP/s", r"TFLOPS_per_GPU|throughput per GPU \(TFLOP/s/GPU\)|TFLOPs"),
    Field("tokens_per_s_per_gpu", "tokens/s", r"tokens per gpu per second \(tgs\)|tokens/sec/gpu"),
    Field("samples_per_s", "samples/s", r"samples per second"),
    Field("consumed_samples", "samples", r"consumed_samples|consumed samples", "suffixed"),
    Field("consumed_tokens", "tokens", r"consumed tokens", "suffixed"),
    Field("global_batch_size", "samples", r"global_batch_size|global batch size", "int"),
    Field("lr", "", r"lr|learning rate"),
    Field("global_step", "", r"global_step"),
    Field("loss_scale", "", r"loss scale"),
    Field("grad_norm", "", r"grad norm"),
    Field("params_norm", "", r"params norm"),
    Field("num_zeros", "", r"num zeros"),
    Field("skipped_iterations", "", r"number of skipped iterations", "int"),
    Field("nan_iterations", "", r"number of nan iterations", "int"),
    Field("seq_length", "tokens", r"actual seq length|actual seqlen", "int"),
    Field("eta_s", "s", r"eta", "hms"),
    Field("wall_time", "s", r"current time"),
    Field("max_memory_reserved_bytes", "B", r"max_memory_reserved"),
    Field("max_memory_allocated_bytes", "B", r"max_memory_allocated"),
    Field("val_loss", "", r"val_loss"),
)
LABELS = LabelTable(COMMON)

# Step markers: the part of the line before the first " | " (NeMo 2 and Megatron).
STEP_MARKER: tuple[Field, ...] = (
    Field("epoch", "", r"[Ee]poch\s+(\d+)", "int"),
    Field("step", "", r"iteration\s+(\d+)\s*/", "int"),
    Field("total_steps", "", r"iteration\s+\d+\s*/\s*(\d+)", "int"),
    Field("timestamp", "", r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\]", "str"),
)

# NeMo 1 / PyTorch Lightning tqdm: "Epoch 0: :  47%|███  | 7/15 [06:19<07:13, k=v, k=v]"
TQDM = re.compile(r"Epoch\s+(?P<epoch>\d+):.*?(?P<n>\d+)/(?P<total>\d+|\?)\s*\[(?P<postfix>[^\]]*)\]")
# tqdm redraws with carriage returns; a pager shows them as a literal "^M" and eats the ESC of "\x1b[A"
REDRAW = re.compile(r"\r|\^M|\x1b?\[A")

NEMO1_MARKER = re.compile(r"train_step_timing in s=|reduced_train_loss=")
NEMO2_LINE = re.compile(r"Training epoch\s+\d+,\s*iteration\s+\d+\s*/\s*\d+")
# (no lookbehind, so that RE2 reads it too: "iteration" not inside a word such as "xiteration")
MEGATRON_LINE = re.compile(r"(?:^|[^\w-])iteration\s+\d+\s*/\s*\d+\s*\|")

# Lines around the step lines that are worth keeping in meta.
MEGATRON_MEMORY: tuple[Field, ...] = (
    Field("allocated_mb", "MB", r"\|\s*allocated:\s*([\d.]+)"),
    Field("max_allocated_mb", "MB", r"max allocated:\s*([\d.]+)"),
    Field("reserved_mb", "MB", r"\|\s*reserved:\s*([\d.]+)"),
    Field("max_reserved_mb", "MB", r"max reserved:\s*([\d.]+)"),
)
MEGATRON_MEMORY_LINE = re.compile(r"memory \(MB\)\s*\|")
MEGATRON_VALIDATION: tuple[Field, ...] = (
    Field("step", "", r"validation loss at iteration\s+(\d+)", "int"),
    Field("lm_loss", "", r"lm loss value:\s*(\S+)"),
    Field("lm_loss_ppl", "", r"lm loss PPL:\s*(\S+)"),
)
MEGATRON_VALIDATION_LINE = re.compile(r"validation loss at iteration\s+\d+")

UNITS: dict[str, str] = {f.name: f.unit for f in (*COMMON, *STEP_MARKER)}
