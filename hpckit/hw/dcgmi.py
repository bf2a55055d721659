"""``dcgmi diag -r N`` tables -> a result per test (and per GPU where DCGM says which).

Three layouts are handled: DCGM 3 (``Pass``, ``Skip - All``, ``Fail - GPU: 0``, a ``Metadata`` block),
older DCGM without metadata whose ``Error`` cells wrap mid-word over several rows, and DCGM 4 (lower-case
test names followed by ``GPU0: Pass`` rows).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

from hpckit.hw.errors import HwParseError

__all__ = ["DcgmDiag", "DcgmMessage", "DcgmTest", "parse_dcgmi_diag", "parse_dcgmi_diag_all"]

SOURCE = "dcgmi diag"

Outcome = Literal["Pass", "Fail", "Warn", "Skip", "Not Run"]
_OUTCOMES: dict[str, Outcome] = {
    "pass": "Pass",
    "fail": "Fail",
    "warn": "Warn",
    "warning": "Warn",
    "skip": "Skip",
    "not run": "Not Run",
}
_RESULT = re.compile(
    r"^(?P<outcome>Pass|Fail|Warn(?:ing)?|Skip|Not Run)"
    r"(?:\s*-\s*(?:(?P<all>All)|GPUs?:\s*(?P<gpus>\d+(?:\s*,\s*\d+)*)))?$",
    re.IGNORECASE,
)
_PER_GPU = re.compile(r"^GPU\s*(?P<gpu>\d+)\s*:\s*(?P<result>.+)$", re.IGNORECASE)
_MESSAGE_NAME = re.compile(r"^(?P<kind>Error|Warning|Info)(?:\s*:?\s*GPU\s*(?P<gpu>\d+))?$", re.IGNORECASE)
_CATEGORY = re.compile(r"^[|+]-+\s+(?P<name>\S.*?)\s+-+\+")
_BORDER = re.compile(r"^\+[-=+]+\+$")
_BANNER = re.compile(r"^Successfully ran diagnostic for group\.?$")


@dataclass(frozen=True)
class DcgmMessage:
    kind: str  # "Error", "Warning" or "Info"
    gpu: int | None
    text: str


@dataclass(frozen=True)
class DcgmTest:
    category: str  # "Deployment", "Hardware", "Integration", "Stress", ...
    name: str  # as printed: "Persistence Mode", "memory", "targeted_stress"
    result: Outcome  # the overall result: the worst of the per-GPU results where those are printed
    all_gpus: bool = False  # "Pass - All"
    gpu_results: Mapping[int, Outcome] = field(default_factory=dict)
    messages: tuple[DcgmMessage, ...] = ()
    line: int = field(default=0, compare=False)


@dataclass(frozen=True)
class DcgmDiag:
    metadata: Mapping[str, str]  # "DCGM Version" -> "3.3.9" (empty on older DCGM)
    tests: tuple[DcgmTest, ...]
    line: int = field(default=0, compare=False)

    @property
    def failed(self) -> tuple[DcgmTest, ...]:
        return tuple(t for t in self.tests if t.result == "Fail")

    @property
    def passed(self) -> bool:
        """No test failed (skipped tests do not count against the run)."""
        return not self.failed

    def test(self, name: str) -> DcgmTest | None:
        return next((t for t in self.tests if t.name.casefold() == name.casefold()), None)


def parse_dcgmi_diag(text: str, source: str = SOURCE) -> DcgmDiag:
    """The one diagnostic report in ``text``. Identical copies (an ``srun`` that ran it twice) collapse to
    one; different reports in one text are refused (use :func:`parse_dcgmi_diag_all`)."""
    reports = parse_dcgmi_diag_all(text, source)
    if any(report != reports[0] for report in reports[1:]):
        raise HwParseError(source, reports[1].line, "several different diagnostic reports in one output")
    return reports[0]


def parse_dcgmi_diag_all(text: str, source: str = SOURCE) -> list[DcgmDiag]:
    """Every diagnostic table in ``text``, in order."""
    tables: list[_Table] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or _BANNER.match(line):
            continue
        if line.startswith(("|", "+")):
            _table_line(tables, line, number, source)
            continue
        raise HwParseError(source, number, f"not part of a dcgmi diag table: {line[:160]!r}")
    if not tables:
        raise HwParseError(source, None, "no dcgmi diag table found")
    return [table.finish(source) for table in tables]


@dataclass
class _Table:
    line: int
    category: str = ""
    metadata: dict[str, str] = field(default_factory=dict)
    tests: list[DcgmTest] = field(default_factory=list)
    message_rows: list[tuple[str, int | None, list[str]]] = field(default_factory=list)
    last: Literal["test", "message", "none"] = "none"

    def finish(self, source: str) -> DcgmDiag:
        self.flush_message()
        if not self.tests and not self.metadata:
            raise HwParseError(source, self.line, "diagnostic table without any test row")
        return DcgmDiag(dict(self.metadata), tuple(self.tests), self.line)

    def flush_message(self) -> None:
        """Attach the collected message rows to the test they follow."""
        if not self.message_rows or not self.tests:
            self.message_rows.clear()
            return
        test = self.tests[-1]
        messages = tuple(DcgmMessage(kind, gpu, "".join(parts).strip()) for kind, gpu, parts in self.message_rows)
        self.tests[-1] = replace(test, messages=test.messages + messages)
        self.message_rows.clear()


def _table_line(tables: list[_Table], line: str, number: int, source: str) -> None:
    if _BORDER.match(line):
        return
    category = _CATEGORY.match(line)
    if category is not None:
        if not tables:
            raise HwParseError(source, number, "table section before the table header")
        tables[-1].flush_message()
        tables[-1].category = category.group("name")
        tables[-1].last = "none"
        return
    cells = _cells(line, number, source)
    if cells[0].strip() == "Diagnostic" and cells[1].strip() == "Result":
        if tables:
            tables[-1].flush_message()
        tables.append(_Table(number))
        return
    if not tables:
        raise HwParseError(source, number, "table row before the 'Diagnostic | Result' header")
    _row(tables[-1], cells, number, source)


def _cells(line: str, number: int, source: str) -> tuple[str, str]:
    if not (line.startswith("|") and line.endswith("|")) or line.count("|") < 3:
        raise HwParseError(source, number, f"malformed table row {line[:160]!r}")
    name, _, result = line[1:-1].partition("|")
    return name, result


def _row(table: _Table, cells: tuple[str, str], number: int, source: str) -> None:
    name, raw_result = cells[0].strip(), cells[1]
    result = raw_result.strip()
    if table.category.casefold() == "metadata" and name:
        table.metadata[name] = result
        return
    message = _MESSAGE_NAME.match(name)
    if message is not None:
        table.flush_message()
        gpu = int(message.group("gpu")) if message.group("gpu") else None
        table.message_rows.append((message.group("kind").capitalize(), gpu, [_wrapped(raw_result)]))
        table.last = "message"
        return
    if name:
        table.flush_message()
        table.tests.append(_test(table.category, name, result, number, source))
        table.last = "test"
        return
    _continuation(table, raw_result, number, source)


def _continuation(table: _Table, raw_result: str, number: int, source: str) -> None:
    """A row with an empty name: more of a wrapped message, or another per-GPU result of the last test."""
    if table.last == "message":
        table.message_rows[-1][2].append(_wrapped(raw_result))
        return
    if table.last != "test":
        raise HwParseError(source, number, "continuation row without a test above it")
    table.tests[-1] = _add_result(table.tests[-1], raw_result.strip(), number, source)


def _wrapped(cell: str) -> str:
    """DCGM wraps long text at the column width minus its padding, mid-word: keep the cut part's spaces so
    the pieces join back into the original text (``...currently disab`` + ``led.``)."""
    text = cell[1:] if cell.startswith(" ") else cell
    return text[: max(len(text) - 2, 0)] if text.endswith("  ") else text


def _test(category: str, name: str, result: str, number: int, source: str) -> DcgmTest:
    test = DcgmTest(category, name, "Pass", line=number)
    return _add_result(test, result, number, source, first=True)


def _add_result(test: DcgmTest, text: str, number: int, source: str, first: bool = False) -> DcgmTest:
    per_gpu = _PER_GPU.match(text)
    if per_gpu is not None:  # DCGM 4: "GPU0: Pass"
        outcome = _outcome(per_gpu.group("result").strip(), number, source)
        results = {**test.gpu_results, int(per_gpu.group("gpu")): outcome}
        return replace(test, gpu_results=results, result=_worst([test.result, outcome]))
    match = _RESULT.match(text)
    if match is None:
        raise HwParseError(source, number, f"{test.name}: unknown result {text!r}")
    outcome = _OUTCOMES[match.group("outcome").casefold()]
    gpus = [int(g) for g in re.findall(r"\d+", match.group("gpus") or "")]
    results = {**test.gpu_results, **dict.fromkeys(gpus, outcome)}
    overall = outcome if first else _worst([test.result, outcome])
    return replace(test, result=overall, all_gpus=test.all_gpus or bool(match.group("all")), gpu_results=results)


_SEVERITY: dict[Outcome, int] = {"Fail": 4, "Warn": 3, "Pass": 2, "Skip": 1, "Not Run": 0}


def _outcome(text: str, number: int, source: str) -> Outcome:
    outcome = _OUTCOMES.get(text.casefold())
    if outcome is None:
        raise HwParseError(source, number, f"unknown per-GPU result {text!r}")
    return outcome


def _worst(outcomes: list[Outcome]) -> Outcome:
    return max(outcomes, key=_SEVERITY.__getitem__)
