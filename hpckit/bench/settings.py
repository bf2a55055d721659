"""The communication settings a run had in force, read from what the job printed (pure)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

# torch_sweep prints each setting it may depend on: `# hpckit: env NAME=VALUE` (empty: unset)
_SWEEP_ENV = re.compile(r"^# hpckit: env (?P<key>\w+)=(?P<value>.*?)\s*$", re.M)
_SWEEP_DIST = re.compile(r"^# hpckit: torch_sweep \S+ .*over torch\.distributed (?P<backend>\w+)", re.M)
# NCCL_DEBUG=INFO lines: "NCCL INFO NCCL_ALGO set by environment to Ring"
_NCCL_ENV = re.compile(r"NCCL INFO (?P<key>NCCL_\w+) set by environment to (?P<value>\S+)")
_NVLS_MISSING = re.compile(r"NVLS multicast support is not available")


def from_sweep_output(output: str) -> dict[str, str]:
    """The settings torch_sweep reported (only those set), and the torch.distributed backend it used."""
    found = {m.group("key"): m.group("value") for m in _SWEEP_ENV.finditer(output) if m.group("value")}
    dist = _SWEEP_DIST.search(output)
    if dist is not None:
        found["torch.distributed"] = dist.group("backend")
    return found


def from_nccl_debug(text: str) -> dict[str, str]:
    """Settings NCCL says it took from the environment; `NVLS=unavailable` when it found no NVLS."""
    found = {m.group("key"): m.group("value") for m in _NCCL_ENV.finditer(text)}
    if _NVLS_MISSING.search(text):
        found["NVLS"] = "unavailable"
    return found


def from_words(words: Iterable[str]) -> dict[str, str]:
    """`NAME=VALUE` words (--env) as a mapping."""
    return dict(word.split("=", 1) for word in words if "=" in word)


def uses_nccl(settings: Mapping[str, str], backend: str) -> bool:
    return backend == "nccl-tests" or settings.get("torch.distributed") == "nccl"


def describe(settings: Mapping[str, str], backend: str, nvls: bool) -> str:
    """One line: what was in force, for the report."""
    if not uses_nccl(settings, backend):
        dist = settings.get("torch.distributed", "gloo")
        return f"torch.distributed {dist} (NCCL settings do not apply)"
    nccl = {k: v for k, v in settings.items() if k.startswith("NCCL_")}
    shown = ", ".join(f"{k}={v}" for k, v in sorted(nccl.items())) or "NCCL defaults"
    return f"{shown}; NVLS {'on' if nvls else 'off'}"
