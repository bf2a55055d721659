"""No silent mis-parse: each defect found in real logs, on a real-format sample.

Where the samples come from: tests/data/results/SOURCES.md (the `issue-*` files are logs pasted in
public GitHub issues, copied as the index stores them; the others are /work/shared/samples files).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from hpckit.cli.results import results
from hpckit.results import ParseError, ParseResult, chunks, detect_kind, parse_file, parse_text
from tests.resultsutil import DATA, fast_and_exact

H100 = "all_reduce-modern-2node-16gpu-h100-a3mega-full-sweep.txt"


def row(frame: pd.DataFrame, size: int, placement: str) -> pd.Series:
    hit = frame[(frame["size_bytes"] == size) & (frame["placement"] == placement)]
    assert len(hit) == 1, hit
    return hit.iloc[0]


# ---------------------------------------------------------------- legacy columns (NVIDIA/nccl-tests#78)


def test_legacy_alltoall_with_an_empty_redop_field_is_read() -> None:
    r = parse_file(DATA / "issue-nccl-tests-78-legacy-alltoall-blank-redop-8node-v100.txt")
    assert r.kind == "nccl-tests" and not r.partial and r.warnings == []
    f = r.frame
    assert len(f) == 4 and set(f["redop"]) == {"none"} and set(f["type"]) == {"float"}
    last = row(f, 536870912, "in")
    assert (last["count"], last["time_us"], last["busbw_gbps"]) == (2097152, 1041299.0, 0.51)
    assert row(f, 268435456, "out")["max_error"] == 0.0 and last["max_error"] == 1.0
    fast_and_exact((DATA / "issue-nccl-tests-78-legacy-alltoall-blank-redop-8node-v100.txt").read_text(), "nccl-tests")


def test_legacy_float_error_column_is_not_the_wrong_count() -> None:
    r = parse_file(DATA / "issue-nccl-tests-78-legacy-all_reduce-error-column-8node-v100.txt")
    f = r.frame
    assert (f["max_error"] == 2e-06).all()
    # `hpckit bench` and its history count wrong values from this column: a good legacy run has none
    assert f["wrong"].isna().all() and int(f["wrong"].fillna(0).sum()) == 0
    assert r.meta["units"]["max_error"] == ""  # type: ignore[index]
    modern = parse_file(DATA / H100).frame
    assert "max_error" not in modern.columns and (modern["wrong"] == 0).all()


# ---------------------------------------------------------------- a test that died


def test_failure_before_any_row_is_shown_and_flagged() -> None:  # NVIDIA/nccl-tests#219
    r = parse_file(DATA / "issue-nccl-tests-219-test-nccl-failure-before-rows.txt")
    assert r.failed and r.partial and r.frame.empty and r.meta["ranks"] == 4
    assert r.warnings == [
        "line 8: the test failed: fengyun: Test NCCL failure common.cu:959 'internal error - please report "
        "this issue to the NCCL developers / ' (1 more failure lines)"
    ]
    assert not any("no result rows" in w for w in r.warnings)
    assert r.meta["failures"] == [  # type: ignore[comparison-overlap]
        "8: fengyun: Test NCCL failure common.cu:959 'internal error - please report this issue to the "
        "NCCL developers / '",
        "9: .. fengyun pid 3164639: Test failure common.cu:844",
    ]


def test_failure_after_rows_keeps_the_rows_and_flags_the_run() -> None:  # NVIDIA/nccl-tests#322
    r = parse_file(DATA / "issue-nccl-tests-322-rows-then-test-nccl-failure-excerpt.txt")
    assert r.kind == "nccl-tests"  # told by the failure lines, the excerpt has no other marker
    assert r.failed and r.partial and len(r.frame) == 10
    assert row(r.frame, 17179869184, "in")["busbw_gbps"] == 367.44
    assert any("the test failed: HCA-128: Test NCCL failure common.cu:1204" in w for w in r.warnings)
    assert len(r.meta["failures"]) == 8  # type: ignore[arg-type]


def test_failure_and_a_last_row_cut_after_its_keys() -> None:  # NVIDIA/nccl-tests#280
    r = parse_file(DATA / "issue-nccl-tests-280-test-nccl-failure-last-row-cut.txt")
    assert r.failed and r.partial
    assert sorted(set(r.frame["size_bytes"])) == [8, 16, 32]  # the cut row is not a row
    assert r.warnings[0].startswith("line 1: the test failed: c2211f46f318: Test NCCL failure common.cu:1005")
    assert "line 16: last row is incomplete (truncated output)" in r.warnings[1]  # the cause comes first


def test_cuda_failure_alone_is_a_failed_nccl_run() -> None:  # NVIDIA/nccl-tests#66
    path = DATA / "issue-nccl-tests-66-test-cuda-failure-only-line.txt"
    r = parse_file(path)
    assert r.kind == "nccl-tests" and r.failed and r.frame.empty
    assert r.warnings == ["line 1: the test failed: Test CUDA failure common.cu:730 'unknown error'"]


MID_ROW = "issue-nccl-tests-355-test-cuda-failure-mid-row.txt"
MID_ROW_CAUSE = "node0: Test CUDA failure common.cu:389 'an illegal memory access was encountered'"


def test_a_cuda_failure_printed_inside_a_row_is_the_stated_cause(monkeypatch: pytest.MonkeyPatch) -> None:
    """NVIDIA/nccl-tests#355: the row starts, the CUDA error ends its line, the "Test failure" trace
    follows; the error is the cause, not the trace, on every path (exact, fast, small chunks)."""
    text = (DATA / MID_ROW).read_text()
    r, _ = fast_and_exact(text, "nccl-tests")
    assert isinstance(r, ParseResult) and r.failed and r.partial and r.frame.empty
    assert r.meta["cause"] == f"27: {MID_ROW_CAUSE}"
    assert r.warnings[0] == f"line 27: the test failed: {MID_ROW_CAUSE} (6 more failure lines)"
    assert r.meta["failures"][:2] == [  # type: ignore[index]
        f"27: {MID_ROW_CAUSE}",
        "28: .. node0 pid 62767: Test failure common.cu:519",
    ]
    monkeypatch.setattr(chunks, "CHUNK_BYTES", 300)
    assert parse_file(DATA / MID_ROW).meta["cause"] == r.meta["cause"]


def test_the_cause_comes_first_even_after_the_trace_lines() -> None:
    """Ranks print at once: another rank's "Test failure" trace may come before the line that says
    why (the #355 lines, the trace's first line moved above the row)."""
    lines = (DATA / MID_ROW).read_text().split("\n")
    lines.insert(26, lines.pop(27))
    r, _ = fast_and_exact("\n".join(lines), "nccl-tests")
    assert isinstance(r, ParseResult)
    assert r.meta["cause"] == f"28: {MID_ROW_CAUSE}"
    assert r.meta["failures"][0] == f"28: {MID_ROW_CAUSE}"  # type: ignore[index]
    assert r.warnings[0].startswith(f"line 28: the test failed: {MID_ROW_CAUSE}")


def test_the_cli_names_the_cause() -> None:
    out = CliRunner().invoke(results, ["parse", str(DATA / MID_ROW)])
    assert out.exit_code == 1
    assert f"the test failed: {MID_ROW_CAUSE}" in out.stderr.splitlines()[0]
    assert out.stderr.splitlines()[-1].endswith(f"the test failed: {MID_ROW_CAUSE}")


def test_failed_run_in_the_cli_table_json_and_exit_code() -> None:
    path = str(DATA / "issue-nccl-tests-322-rows-then-test-nccl-failure-excerpt.txt")
    table = CliRunner().invoke(results, ["parse", path])
    assert table.exit_code == 1 and "[FAILED]" in table.stdout
    assert "Test NCCL failure common.cu:1204" in table.stderr and "the test failed" in table.stderr
    doc = json.loads(CliRunner().invoke(results, ["parse", "--json", path]).stdout)
    assert doc[0]["failed"] is True and doc[0]["partial"] is True and len(doc[0]["rows"]) == 10
    assert doc[0]["meta"]["failures"][0].startswith("7: HCA-128: Test NCCL failure")


# ---------------------------------------------------------------- rows cut short


def _h100_cut_at(marker: str, keep: int) -> str:
    """The real sweep cut inside the row holding ``marker``, ``keep`` characters after its start."""
    text = (DATA / H100).read_text()
    start = text.index(marker)
    return text[: start + keep]


def test_row_cut_between_its_placements_is_not_an_in_place_row() -> None:
    row_text = next(ln for ln in (DATA / H100).read_text().split("\n") if ln.startswith("  1073741824"))
    halfway = row_text.index("      0") + len("      0")  # the out-of-place #wrong, then nothing
    r = parse_text(_h100_cut_at("  1073741824", halfway), "nccl-tests")
    assert r.partial and r.frame["size_bytes"].max() == 536870912
    assert (r.frame["placement"] == "in").sum() == (r.frame["placement"] == "out").sum()
    assert any("ends after its first placement" in w for w in r.warnings)


def test_row_cut_between_placements_in_the_middle_is_an_error() -> None:
    lines = (DATA / H100).read_text().split("\n")
    at = next(i for i, ln in enumerate(lines) if ln.startswith("  1073741824"))
    lines[at] = lines[at][: lines[at].index("      0") + len("      0")]
    with pytest.raises(ParseError, match=r"malformed result row: the row ends after its first placement"):
        parse_text("\n".join(lines), "nccl-tests", source="cut.txt")


def test_a_placement_printed_blank_is_still_read() -> None:
    """mscclpp-test prints its first placement blank (microsoft/mscclpp#87): a gap, not a cut."""
    header = "#       size         count     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong"
    rows = "  1073741824      33554432                                    7186.2  149.42  130.74      0"
    r = parse_text(f"{header}\n{rows}\n", "nccl-tests")
    assert list(r.frame["placement"]) == ["in"] and r.frame["busbw_gbps"][0] == 130.74


def test_last_row_cut_to_one_field_is_reported() -> None:
    r = parse_text(_h100_cut_at("  1073741824", len("  1073741824")), "nccl-tests")
    assert r.partial and r.frame["size_bytes"].max() == 536870912
    assert any("last row is incomplete" in w and "cut after its first field" in w for w in r.warnings)
    whole = parse_text((DATA / H100).read_text(), "nccl-tests")
    assert not whole.partial  # (a log that ends well has no such warning)


# ---------------------------------------------------------------- bytes around the text


BOM = "\ufeff"


def test_utf8_bom_keeps_the_independent_runs_warning(tmp_path: Path) -> None:
    name = "handmade-nccl-tests-no-mpi-8-single-rank-runs-tagged.txt"
    path = tmp_path / "bom.txt"
    path.write_bytes(b"\xef\xbb\xbf" + (DATA / name).read_bytes())
    for r in (parse_file(path), parse_text(BOM + (DATA / name).read_text())):
        assert r.meta["independent_runs"] == 8
        assert "repeated headers: 8 independent single-rank runs (MPI not built in?)" in r.warnings


def test_utf8_bom_keeps_sacct_detectable(tmp_path: Path) -> None:
    text = (DATA / "sacct-parsable2-o-all-slurm20.txt").read_text()
    assert detect_kind(BOM + text) == "sacct"
    path = tmp_path / "sacct.txt"
    path.write_text(BOM + text, encoding="utf-8")
    r = parse_file(path)
    assert r.kind == "sacct" and r.meta["fields"][0] == "Account"  # type: ignore[index]


def test_cr_only_line_ends_keep_every_megatron_iteration(tmp_path: Path) -> None:
    text = (DATA / "megatron-lm-srun-l-prefix-eta-tokens-per-sec-gpu.txt").read_text()
    steps = [text.replace("iteration      300/", f"iteration {k:8d}/") for k in range(1, 27)]
    lf = "".join(steps)
    path = tmp_path / "cr.log"
    path.write_bytes(lf.replace("\n", "\r").encode())
    by_lf = parse_text(lf, "megatron")
    for r in (parse_file(path), parse_text(lf.replace("\n", "\r"))):
        assert r.kind == "megatron" and len(r.frame) == 26
        pd.testing.assert_frame_equal(r.frame, by_lf.frame)


def test_sacct_parsable2_with_jobid_first_is_detected() -> None:  # martius-lab/cluster_utils#87
    path = DATA / "issue-cluster_utils-87-sacct-parsable2-jobid-first.txt"
    assert detect_kind(path.read_text()) == "sacct"
    r = parse_file(path)
    assert r.kind == "sacct" and len(r.frame) == 16
    assert list(r.frame["state"][:4]) == ["COMPLETED", "COMPLETED", "COMPLETED", "CANCELLED"]
    assert r.frame["step"][3] == "0" and r.frame["exit_code"][3] == "0:10"


# ---------------------------------------------------------------- files that are not logs


def test_sparse_file_is_refused_at_once(tmp_path: Path) -> None:
    path = tmp_path / "sparse.log"
    with open(path, "wb") as handle:
        handle.truncate(2 << 30)  # 2 GiB of holes: no disk, every byte reads as NUL
    for kind in ("auto", "nccl-tests", "sacct"):
        with pytest.raises(ParseError, match=r":1: NUL bytes at character 1: a binary or sparse file"):
            parse_file(path, kind)


def test_a_hole_after_a_real_header_is_refused_where_it_starts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "crashed.log"
    head = (DATA / H100).read_bytes()[:3000]
    head = head[: head.rindex(b"\n") + 1]
    with open(path, "wb") as handle:
        handle.write(head)
        handle.truncate(len(head) + (64 << 20))  # the node died: the rest of the file is a hole
    lineno = head.count(b"\n") + 1
    with pytest.raises(ParseError, match=rf":{lineno}: NUL bytes at character {len(head) + 1}"):
        parse_file(path, "nccl-tests")  # the hole starts in the head: seen there
    # further in, the hole is one endless line: refused where it starts, not read to its end
    monkeypatch.setattr(chunks, "HEAD_BYTES", 1024)
    monkeypatch.setattr(chunks, "MAX_LINE", 1 << 20)
    monkeypatch.setattr(chunks, "CHUNK_BYTES", 1 << 18)
    with pytest.raises(ParseError, match=r"a line longer than 1 MiB: not a text log") as exc:
        parse_file(path, "nccl-tests")
    assert exc.value.lineno == lineno


def test_big_log_is_read_in_chunks_with_the_same_result(tmp_path: Path) -> None:
    """A file read a few hundred bytes at a time parses as the whole text does (line numbers,
    runs across chunk edges); the memory this saves is measured by benchmarks/bench_parse.py."""
    code = (
        "import sys; from hpckit.results import chunks, parse_file; chunks.CHUNK_BYTES = 300; "
        "r = parse_file(sys.argv[1]); print(len(r.frame), r.frame['line'].sum(), r.partial)"
    )
    path = DATA / "all_reduce-legacy-2node-v100-efa-nccl-info-mpijob.txt"
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True)
    whole = parse_file(path)
    assert out.stdout.split() == [str(len(whole.frame)), str(whole.frame["line"].sum()), str(whole.partial)]


# ---------------------------------------------------------------- exports and width


def test_csv_and_parquet_together(tmp_path: Path) -> None:
    csv, parquet = tmp_path / "o.csv", tmp_path / "o.parquet"
    path = str(DATA / H100)
    run = CliRunner().invoke(results, ["parse", "--csv", str(csv), "--parquet", str(parquet), path])
    assert run.exit_code == 0, run.stderr
    assert len(pd.read_csv(csv)) == len(pd.read_parquet(parquet)) == 62


def test_piped_tables_are_not_cut_to_80_columns(tmp_path: Path) -> None:
    wide = tmp_path / ("x" * 150 + ".txt")
    wide.write_bytes((DATA / "all_reduce-v2.18-1node-2rank-rtx5090-mpirun-tagoutput-stderr.txt").read_bytes())
    env = dict(os.environ, COLUMNS="80")
    run = CliRunner().invoke(results, ["parse", str(wide)], env=env)
    assert run.exit_code == 0, run.stderr
    assert f"{wide}: nccl-tests, 16 rows" in run.stdout  # the whole path, on one line
    assert "…" not in run.stdout
    header = next(ln for ln in run.stdout.split("\n") if "out busbw" in ln)
    assert header.split() == ["size", "type", "redop", "out", "us", "out", "busbw", "in", "us", "in", "busbw", "#wrong"]
