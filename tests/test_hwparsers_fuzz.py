"""Mutated real samples (cut short, junk lines, flipped characters, dropped or doubled lines) give either a
result or an HwParseError from every parser family -- never another exception."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpckit.deploy.topology import topology_conf
from hpckit.hw import (
    HwParseError,
    parse_dcgmi_diag,
    parse_dcgmi_diag_all,
    parse_ibnetdiscover,
    parse_ibstat_report,
    parse_ibstatus,
    parse_nvlink_status,
    parse_query_gpu_csv,
    parse_query_q,
    parse_topo_m,
    parse_xid_events,
    read_sysfs_ports,
)

DATA = Path(__file__).parent / "data" / "hw"
FUZZ = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Characters that matter to these formats (separators, brackets, quotes, digits) plus a few others.
_SPECIAL = " \t:|,[]()\"'#=-+.x0123456789AaZz_/\x1b%"
_ALPHABET: st.SearchStrategy[str] = st.sampled_from([*_SPECIAL, "é", "\x00"])


def _samples(directory: str) -> list[str]:
    return [p.read_text(encoding="utf-8") for p in sorted((DATA / directory).glob("*.txt"))]


@st.composite
def mutated(draw: st.DrawFn, texts: list[str]) -> str:
    text = draw(st.sampled_from(texts))
    for operation in draw(st.lists(st.sampled_from(["cut", "junk", "flip", "drop", "double"]), min_size=1, max_size=4)):
        text = _mutate(draw, text, operation)
    return text


def _mutate(draw: st.DrawFn, text: str, operation: str) -> str:
    if operation == "cut":
        return text[: draw(st.integers(0, len(text)))]
    if operation == "flip" and text:
        at = draw(st.integers(0, len(text) - 1))
        return text[:at] + draw(_ALPHABET) + text[at + 1 :]
    lines = text.split("\n")
    at = draw(st.integers(0, len(lines) - 1))
    if operation == "junk":
        lines.insert(at, draw(st.text(_ALPHABET, max_size=40)))
    elif operation == "drop":
        del lines[at]
    elif operation == "double":
        lines.insert(at, lines[at])
    return "\n".join(lines)


def _only_result_or_hw_error(parse: Callable[[str], object], text: str) -> None:
    try:
        parse(text)
    except HwParseError as error:
        assert error.source and error.message  # says what, and where when it can


NVIDIA_SMI = _samples("nvidia-smi")


@FUZZ
@given(mutated([t for t in NVIDIA_SMI if "NVSMI LOG" in t]))
def test_query_q_mutations(text: str) -> None:
    _only_result_or_hw_error(parse_query_q, text)


@FUZZ
@given(mutated([t for t in NVIDIA_SMI if t.startswith(("index", "timestamp"))]))
def test_query_gpu_csv_mutations(text: str) -> None:
    _only_result_or_hw_error(parse_query_gpu_csv, text)


@FUZZ
@given(mutated([t for t in NVIDIA_SMI if "Link 0:" in t]))
def test_nvlink_mutations(text: str) -> None:
    _only_result_or_hw_error(parse_nvlink_status, text)


@FUZZ
@given(mutated([t for t in NVIDIA_SMI if "Legend:" in t]))
def test_topo_mutations(text: str) -> None:
    _only_result_or_hw_error(parse_topo_m, text)


@FUZZ
@given(mutated(_samples("xid")), st.booleans())
def test_xid_mutations(text: str, strict: bool) -> None:
    _only_result_or_hw_error(lambda t: parse_xid_events(t, strict=strict), text)


INFINIBAND = _samples("infiniband")


@FUZZ
@given(mutated([t for t in INFINIBAND if t.startswith("CA '")]))
def test_ibstat_mutations(text: str) -> None:
    _only_result_or_hw_error(parse_ibstat_report, text)


@FUZZ
@given(mutated([t for t in INFINIBAND if t.startswith("Infiniband device")]))
def test_ibstatus_mutations(text: str) -> None:
    _only_result_or_hw_error(parse_ibstatus, text)


@FUZZ
@given(mutated([t for t in INFINIBAND if "Topology file" in t]))
def test_ibnetdiscover_and_topology_mutations(text: str) -> None:
    """A fabric that parses always renders (topology_conf itself raises nothing)."""
    _only_result_or_hw_error(lambda t: topology_conf(parse_ibnetdiscover(t)), text)


_SYSFS_VALUES = st.one_of(
    st.sampled_from(["4: ACTIVE", "1: DOWN", "5: LinkUp", "400 Gb/sec (4X NDR)", "InfiniBand", "0x4b", "12"]),
    st.text(_ALPHABET, max_size=20),
)


@FUZZ
@given(
    st.dictionaries(st.sampled_from(["state", "phys_state", "rate", "link_layer", "lid", "sm_lid"]), _SYSFS_VALUES),
    st.dictionaries(st.sampled_from(["link_downed", "symbol_error"]), _SYSFS_VALUES),
)
def test_sysfs_mutations(files: dict[str, str], counters: dict[str, str]) -> None:
    with tempfile.TemporaryDirectory() as root:
        port = Path(root) / "mlx5_0" / "ports" / "1"
        (port / "counters").mkdir(parents=True)
        for name, value in files.items():
            (port / name).write_text(value.replace("\x00", ""))
        for name, value in counters.items():
            (port / "counters" / name).write_text(value.replace("\x00", ""))
        _only_result_or_hw_error(lambda _: read_sysfs_ports(Path(root)), "")


DCGMI = _samples("dcgmi")


@FUZZ
@given(mutated(DCGMI))
def test_dcgmi_mutations(text: str) -> None:
    _only_result_or_hw_error(parse_dcgmi_diag, text)
    _only_result_or_hw_error(parse_dcgmi_diag_all, text)
