"""Which parser a text wants, from markers that only that tool prints."""

from __future__ import annotations

import re

from hpckit.results.training_fields import MEGATRON_LINE, NEMO2_LINE, TQDM

HEAD = 1 << 20  # markers sit near the top of every format; look at the first MiB first

NCCL_MARKERS = re.compile(
    r"^(?:\s*\S*?:)?\s*#\s*(?:nThread\s+\d|nccl-tests version|Using devices|Avg bus bandwidth"
    r"|Out of bounds values|\s*size\s+count\s+type\b)",
    re.MULTILINE,
)
NEMO1_MARKER = re.compile(r"train_step_timing in s=|reduced_train_loss=")
SACCT_HEADER = re.compile(r"\A\s*[A-Za-z]+\W+.*\bJobID\b", re.DOTALL)

KINDS = ("nccl-tests", "nccl-tests-json", "nemo1", "nemo2", "megatron", "sacct", "sacct-json")


def detect_kind(text: str) -> str:
    """One of KINDS, or "unknown"."""
    kind = _detect(text[:HEAD])
    if kind == "unknown" and len(text) > HEAD:
        kind = _detect(text)
    return kind


def _detect(text: str) -> str:
    stripped = text.lstrip()
    if stripped.startswith("{"):
        return _json_kind(stripped)
    if NCCL_MARKERS.search(text):
        return "nccl-tests"
    if NEMO2_LINE.search(text):
        return "nemo2"
    if MEGATRON_LINE.search(text):
        return "megatron"
    if NEMO1_MARKER.search(text) and TQDM.search(text):
        return "nemo1"
    first = stripped.split("\n", 1)[0]
    if SACCT_HEADER.match(first) and ("|" in first or "JobIDRaw" in first):
        return "sacct"
    return "unknown"


def _json_kind(text: str) -> str:
    head = text[:HEAD]
    if '"results"' in head and ('"bus_bw"' in head or '"nccl_version"' in head):
        return "nccl-tests-json"
    if '"jobs"' in head and ('"steps"' in head or '"association"' in head):
        return "sacct-json"
    return "unknown"
