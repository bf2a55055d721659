"""hpckit.results: benchmark and training logs (text) -> pandas frames.

Parsers are driven by declarative (name, unit, regex) tables (see `*_fields.py`); this package does
no I/O beyond reading the file it is given.
"""

from hpckit.results.api import parse_file, parse_text
from hpckit.results.derived import (
    dense_flops_per_token,
    mfu,
    peak_busbw,
    steady_step_time,
    tflops_per_gpu,
    tokens_per_second,
)
from hpckit.results.kinds import KINDS, detect_kind
from hpckit.results.model import Field, ParseError, ParseResult

__all__ = [
    "KINDS",
    "Field",
    "ParseError",
    "ParseResult",
    "dense_flops_per_token",
    "detect_kind",
    "mfu",
    "parse_file",
    "parse_text",
    "peak_busbw",
    "steady_step_time",
    "tflops_per_gpu",
    "tokens_per_second",
]
