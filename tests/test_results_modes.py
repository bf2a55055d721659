"""The seam between exact parsers and fast paths (hpckit/results/speed.py), and chunked reading.

Both modes must say the same on real samples, on long logs made from them and on hypothesis
mutants; each fast path must really run where it is meant to (so that these comparisons compare
something), and none in exact mode.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpckit.cli.results import results
from hpckit.results import chunks, nccl_fields, nccl_scan, parse_file, parse_text, speed
from hpckit.results.kinds import KINDS, REGISTRY
from tests.resultsutil import DATA, fast_and_exact, outcome, same
from tests.test_results_robust import TEXTS, mutated

SAMPLES = sorted(p for p in DATA.iterdir() if p.suffix in (".txt", ".json"))


def _long(name: str, times: int = 100) -> str:
    """A real sample's measurements again and again, numbers moved on, as a long run prints them."""
    text = (DATA / name).read_text()
    if name.startswith("nemo1"):
        return "\r".join(
            re.sub(r"(global_step=)(\d+)", lambda m, k=k: f"{m[1]}{int(m[2]) + 10**5 * k}", text)  # type: ignore[misc]
            for k in range(times)
        )
    if name.startswith(("nemo2", "megatron")):
        lines = [ln for ln in text.split("\n") if re.search(r"iteration\s+\d+", ln)]
        step = re.compile(r"(iteration\s+)(\d+)")
        return "".join(
            step.sub(lambda m, k=k: f"{m[1]}{int(m[2]) + 1000 * k}", ln) + "\n"  # type: ignore[misc]
            for k in range(times)
            for ln in lines
        )
    lines = text.split("\n")
    rows = [i for i, ln in enumerate(lines) if re.match(r"\s*\d+\s+\d+\s", ln)]
    return "\n".join(lines[: rows[-1] + 1] + [lines[i] for i in rows] * times + lines[rows[-1] + 1 :])


LONG = {
    "nccl-scan": ("nccl-tests", "all_reduce-modern-2node-16gpu-h100-a3mega-full-sweep.txt"),
    "nccl-rows": ("nccl-tests", "all_reduce-modern-2node-16gpu-h100-a3mega-full-sweep.txt"),
    "pipe-steps": ("nemo2", "nemo2-b200-llama3-8b-pretrain-iterations-45-49.txt"),
    "tqdm-steps": ("nemo1", "nemo1-a3mega-llama2-7b-log-tail.txt"),
}


@pytest.mark.parametrize("path", sorted(speed.FAST_PATHS))
def test_every_fast_path_runs_on_a_long_log(path: str) -> None:
    """Fails when a fast path stops running: deleted, or declining what it was kept for."""
    kind, name = LONG[path]
    with speed.counting() as ran:
        parse_text(_long(name), kind)  # default thresholds: what a user's long log gets
    assert ran[path], f"{path} did not run: {dict(ran)}"
    fast_and_exact(_long(name), kind)


def test_every_fast_path_is_declared_and_tested() -> None:
    assert set(LONG) == set(speed.FAST_PATHS)
    with pytest.raises(KeyError, match="declare it in FAST_PATHS"):
        speed.attempt("a-new-path", lambda: 1)


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_real_samples_read_the_same_in_both_modes(path: Path) -> None:
    fast_and_exact(path.read_text(), REGISTRY[_kind(path)].name)


def _kind(path: Path) -> str:
    from hpckit.results import detect_kind

    return detect_kind(path.read_text())


def test_exact_mode_runs_no_fast_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    kind, name = LONG["nccl-rows"]
    text = _long(name)
    path = tmp_path / "long.log"
    path.write_text(text)
    with speed.counting() as ran:
        parse_text(text, kind, exact=True)
        parse_file(path, exact=True)
        assert CliRunner().invoke(results, ["parse", "--exact", str(path)]).exit_code == 0
        monkeypatch.setenv(speed.EXACT_ENV, "1")
        parse_text(text, kind)
    assert not ran
    monkeypatch.delenv(speed.EXACT_ENV)
    with speed.counting() as ran:
        parse_text(text, kind)
    assert ran["nccl-rows"] and ran["nccl-scan"]


def test_kinds_are_declared_once() -> None:
    from hpckit.results import report

    assert tuple(REGISTRY) == KINDS and len(KINDS) == 7
    assert set(KINDS) == report.NCCL_KINDS | report.TRAINING_KINDS | report.SACCT_KINDS
    assert all(REGISTRY[k.json_sibling].json for k in REGISTRY.values() if k.json_sibling)


# ---------------------------------------------------------------- the scan's triggers come from the tables

# one line per kind of `#` line the rule table knows: a rule added there needs one here
HEADER_EXAMPLES = {
    "version": "# nccl-tests version 2.18.0 nccl-headers=22907 nccl-library=22907",
    "start": "# Collective test starting: all_reduce_perf",
    "end": "# Collective test concluded: all_reduce_perf",
    "params": "# nThread 1 nGpus 1 minBytes 8 maxBytes 128 step: 2(factor) warmup iters: 5 iters: 20 validation: 1",
    "device": "#  Rank  0 Group  0 Pid  1 on h device  0 [0x01] NVIDIA H100",
    "oob": "# Out of bounds values : 0 OK",
    "avg": "# Avg bus bandwidth    : 1.5",
    "json": "# Writing JSON output to /tmp/x.json",
    "error": "# error: something",
    "memory": "# GPU memory usage : 1 GB",
}


def test_every_header_rule_is_found_by_the_scan() -> None:
    assert set(HEADER_EXAMPLES) == {r.event for r in nccl_fields.HEADER_RULES}
    for event, line in HEADER_EXAMPLES.items():
        assert nccl_fields.classify_header(line.strip()).event == event  # type: ignore[union-attr]
        kind = "devices" if event == "device" else "hash"
        for text in (line, f"[1,0]<stdout>:{line}"):  # Python's scan and the Arrow one
            assert [m[0] for m in nccl_scan._scan_matches(text, nccl_scan.TESTS.scan)] == [kind], (event, text)
            assert nccl_scan.TESTS.re2 is not None
            found = nccl_scan.line_matches(text, *nccl_scan.TESTS.re2)
            assert found is not None and [m[0] for m in found.matches] == [kind], (event, text)


def test_a_new_header_rule_is_scanned_without_other_changes() -> None:
    """The scan's line tests are built from the rule table: a rule added there is found."""
    rule = nccl_fields._rule("plugin", r"Plugin loaded\s*:", nccl_fields.Field("plugin", "", r":\s*(\S+)", "str"))
    tests = nccl_scan.line_tests((*nccl_fields.HEADER_RULES, rule))
    line = "[1,0]<stdout>:# Plugin loaded : libnccl-net.so"
    assert nccl_scan.TESTS.re2 is not None and tests.re2 is not None
    assert list(nccl_scan._scan_matches(line, nccl_scan.TESTS.scan)) == []  # unknown today
    assert [m[0] for m in nccl_scan._scan_matches(line, tests.scan)] == ["hash"]
    found = nccl_scan.line_matches(line, *tests.re2)
    assert found is not None and [m[0] for m in found.matches] == ["hash"]


# ---------------------------------------------------------------- hypothesis: mutants, chunks


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_mutants_read_the_same_in_both_modes(case: tuple[str, str, str]) -> None:
    _, kind, text = case
    fast_and_exact(text, kind)


@pytest.mark.slow  # 120 mutants, each read in chunks: ~55 s
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated(), st.integers(1, 400))
def test_mutants_read_the_same_in_chunks(case: tuple[str, str, str], size: int) -> None:
    _, kind, text = case
    whole = outcome(text, kind, exact=False)
    old = chunks.CHUNK_BYTES
    chunks.CHUNK_BYTES = size
    try:
        with speed.forced():
            cut = outcome(text, kind, exact=False)
    finally:
        chunks.CHUNK_BYTES = old
    with speed.forced():
        same(cut, outcome(text, kind, exact=False))
    same(cut, whole)


@pytest.mark.parametrize("name", sorted(TEXTS))
@pytest.mark.parametrize("size", [16, 1000])
def test_files_read_in_chunks_as_a_whole(name: str, size: int, monkeypatch: pytest.MonkeyPatch) -> None:
    whole = outcome(TEXTS[name], "auto", exact=False)
    monkeypatch.setattr(chunks, "CHUNK_BYTES", size)
    try:
        cut = parse_file(DATA / name)
    except Exception as exc:
        cut = exc.args  # type: ignore[assignment]
    if isinstance(whole, tuple):
        whole = tuple(str(a).replace("log:", f"{DATA / name}:") for a in whole)
    same(cut, whole)
