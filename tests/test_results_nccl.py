"""nccl-tests text and JSON parsing on the real samples (and the hand-made ones, see SOURCES.md)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hpckit.results import ParseError, ParseResult, nccl_table, parse_file, parse_text, peak_busbw
from hpckit.results.nccl_text import FRAME_COLUMNS
from tests.resultsutil import fast_and_exact

DATA = Path(__file__).parent / "data" / "results"


def load(name: str, **kw: object):  # type: ignore[no-untyped-def]
    return parse_file(DATA / name, **kw)  # type: ignore[arg-type]


def row(frame: pd.DataFrame, size: int, placement: str) -> pd.Series:
    hit = frame[(frame["size_bytes"] == size) & (frame["placement"] == placement)]
    assert len(hit) == 1, hit
    return hit.iloc[0]


# ---------------------------------------------------------------- every era, every quirk


def test_modern_full_sweep_h100_peak_is_not_the_avg_line() -> None:
    r = load("all_reduce-modern-2node-16gpu-h100-a3mega-full-sweep.txt")
    assert r.kind == "nccl-tests" and not r.partial and r.warnings == []
    assert list(r.frame.columns[: len(FRAME_COLUMNS)]) == FRAME_COLUMNS
    assert len(r.frame) == 62  # 31 sizes x (out, in)
    assert row(r.frame, 8589934592, "out")["busbw_gbps"] == 338.82
    assert row(r.frame, 8589934592, "in")["busbw_gbps"] == 337.35
    assert row(r.frame, 2147483648, "out")["time_us"] == 12646.0
    assert peak_busbw(r.frame) == 338.82
    assert r.meta["avg_busbw_gbps"] == 70.742  # the average over all sizes, far below the peak
    assert r.meta["ranks"] == 16 and r.meta["hosts"] == ["ztan-mig-235z", "ztan-mig-gq73"]
    devices = r.meta["devices"]
    assert isinstance(devices, list)
    assert devices[0] == {
        "rank": 0,
        "group": 0,
        "pid": 6899,
        "host": "ztan-mig-235z",
        "device": 0,
        "busid": "0000:04:00",
        "name": "NVIDIA H100 80GB HBM3",
    }
    assert r.meta["params"] == {
        "nthreads": 1,
        "ngpus": 1,
        "min_bytes": 8,
        "max_bytes": 8589934592,
        "step": 2,
        "step_kind": "factor",
        "warmup_iters": 5,
        "iters": 20,
        "agg_iters": 1,
        "validation": 1,
        "graph": 0,
    }
    assert r.meta["out_of_bounds"] == 0 and r.meta["out_of_bounds_status"] == "OK"


def test_frame_dtypes() -> None:
    f = load("all_reduce-modern-2node-16gpu-a100-mpijob.txt").frame
    assert f["size_bytes"].dtype == np.int64 and f["count"].dtype == np.int64
    assert str(f["root"].dtype) == "Int64"
    for col in ("time_us", "algbw_gbps", "busbw_gbps", "wrong"):
        assert f[col].dtype == np.float64
    assert list(f["placement"]) == ["out", "in", "out", "in"]


def test_modern_a100_mpijob_two_sizes_old_busid_and_nccl_version() -> None:
    r = load("all_reduce-modern-2node-16gpu-a100-mpijob.txt")
    assert len(r.frame) == 4
    assert r.meta["nccl_version"] == "2.14.3+cuda11.7"
    assert r.meta["params"]["step_kind"] == "bytes"  # type: ignore[index]
    assert r.meta["devices"][2]["busid"] == "0x50"  # type: ignore[index]
    assert row(r.frame, 10737418240, "in")["busbw_gbps"] == 180.08
    assert peak_busbw(r.frame) == 180.08
    assert r.meta["avg_busbw_gbps"] == 175.531


def test_legacy_k80_no_root_float_error_column_and_info_line() -> None:
    r = load("all_reduce-legacy-1node-4gpu-k80-info-launch-mode.txt")
    f = r.frame
    assert len(f) == 14 and not r.partial
    assert f["root"].isna().all()  # the legacy header has no root column
    assert (f["max_error"] == 2e-07).all() and f["wrong"].isna().all()  # an error, not a count
    assert r.meta["columns"][7] == "error"  # type: ignore[index]
    assert r.meta["hosts"] == ["2e3f9af7241040529530e810ce60fe5d000002"]
    assert r.meta["devices"][3]["busid"] == "0x00"  # type: ignore[index]
    assert peak_busbw(f) == 2.56
    assert r.meta["avg_busbw_gbps"] == 2.54225


def test_legacy_v100_info_flood_nccl_version_mid_log_error_as_float() -> None:
    r = load("all_reduce-legacy-2node-v100-efa-nccl-info-mpijob.txt")
    assert len(r.frame) == 58  # 8 B .. 2 GiB
    assert r.meta["nccl_version"] == "2.6.4+cuda10.2"
    assert (r.frame["max_error"] == 0.0).all() and r.frame["wrong"].isna().all()  # printed as 0e+00
    assert row(r.frame, 2147483648, "out")["time_us"] == 826687.0
    assert peak_busbw(r.frame) == 2.60
    assert r.meta["avg_busbw_gbps"] == 1.16154


def test_legacy_pyxis_no_validation_linear_steps() -> None:
    r = load("all_reduce-legacy-3node-t4-srun-pyxis-novalidation.txt")
    f = r.frame
    assert len(f) == 22
    assert f["wrong"].isna().all()  # N/A with -c 0
    assert r.meta["params"]["validation"] == 0  # type: ignore[index]
    assert r.meta["params"]["step"] == 1048576 and r.meta["params"]["step_kind"] == "bytes"  # type: ignore[index]
    assert sorted(set(f["size_bytes"]))[1] == 105906176
    assert peak_busbw(f) == 0.50  # no size >= 1 GiB: the largest size decides


def test_mpirun_tag_output_prefixes_and_zero_sizes() -> None:
    r = load("all_reduce-modern-2node-t4-efa-mpirun-tagoutput-nccl-info.txt")
    f = r.frame
    assert len(f) == 62 and not r.partial
    assert list(f["size_bytes"][:4]) == [0, 0, 0, 0]
    assert r.meta["nccl_version"] == "2.12.7+cuda11.4"
    assert r.meta["devices"][1]["busid"] == "0xf5"  # type: ignore[index]
    assert peak_busbw(f) == 3.12
    assert r.meta["avg_busbw_gbps"] == 1.15327


def test_nvls_excerpt_two_digit_tags() -> None:
    r = load("all_reduce-modern-p5-h100-2node-nvls-excerpt.txt")
    assert len(r.frame) == 2
    assert row(r.frame, 2147483648, "out")["busbw_gbps"] == 438.85
    assert peak_busbw(r.frame) == 439.28
    assert r.meta["avg_busbw_gbps"] == 53.2202
    assert "params" not in r.meta  # the excerpt starts at the column header


def test_srun_l_prefix_all_gather_excerpt() -> None:
    r = load("all_gather-modern-2node-16gpu-a3mega-srun-l-prefix-excerpt.txt")
    f = r.frame
    assert len(f) == 22 and not r.partial
    assert set(f["redop"]) == {"none"} and f["wrong"].isna().all()
    assert peak_busbw(f) == 188.99
    assert r.meta["avg_busbw_gbps"] == 128.817
    assert f["collective"].isna().all()  # nothing in the excerpt names it ...
    named = load("all_gather-modern-2node-16gpu-a3mega-srun-l-prefix-excerpt.txt", collective="all_gather")
    assert set(named.frame["collective"]) == {"all_gather"}  # ... unless the caller does


def test_v2_18_version_line_collective_header_and_stderr_noise() -> None:
    r = load("all_reduce-v2.18-1node-2rank-rtx5090-mpirun-tagoutput-stderr.txt")
    assert len(r.frame) == 16 and not r.partial
    assert r.meta["nccl_tests_version"] == "2.18.0"
    assert r.meta["nccl_headers"] == 22907 and r.meta["nccl_library"] == 22907
    assert r.meta["collective"] == "all_reduce"
    assert set(r.frame["collective"]) == {"all_reduce"}
    assert row(r.frame, 1048576, "out")["time_us"] == 4366.46
    assert r.meta["devices"][1]["busid"] == "0000:02:00"  # type: ignore[index]
    assert peak_busbw(r.frame) == 2.31
    assert r.meta["avg_busbw_gbps"] == 1.57614


def test_binary_name_in_a_command_echo_names_the_collective() -> None:
    text = (DATA / "all_reduce-legacy-3node-t4-srun-pyxis-novalidation.txt").read_text()
    echo = "+ srun -N3 --container-image=nccl /opt/nccl-tests/build/all_reduce_perf -b 100M -e 110M -i 1M\n"
    assert set(parse_text(echo + text).frame["collective"]) == {"all_reduce"}


# ---------------------------------------------------------------- hand-made layouts (see SOURCES.md)


def test_per_iteration_and_timestamp_columns() -> None:
    r = load("handmade-nccl-tests-2.18-I1-S1-per-iteration-timestamps.txt")
    f = r.frame
    assert len(f) == 16 and not r.partial
    for col in ("iter_min_us", "iter_max_us", "iter_p99_us", "iter_cv_pct", "timestamp"):
        assert col in f.columns
    first = row(f, 1048576, "in")
    assert first["time_us"] == 64.23 and first["iter_max_us"] == 71.62 and first["iter_cv_pct"] == 1.14
    assert first["timestamp"] == pd.Timestamp("2025-11-03 14:02:03")
    assert r.meta["params"]["unalign"] == 0  # type: ignore[index]
    assert r.meta["units"]["iter_cv_pct"] == "%"  # type: ignore[index]


def test_timestamp_column_without_validation() -> None:
    f = load("handmade-nccl-tests-S1-timestamps-no-validation.txt").frame
    assert len(f) == 16 and f["wrong"].isna().all()
    assert f["timestamp"].iloc[-1] == pd.Timestamp("2025-11-03 09:15:17")


def test_minimal_table_with_float_sizes_and_exponent_times() -> None:
    r = parse_text((DATA / "handmade-nccl-tests-minimal-table-float-sizes.txt").read_text(), "nccl-tests")
    f = r.frame
    assert list(f["size_bytes"][::2]) == [1024, 66132, 120000, 16777216]
    assert row(f, 16777216, "out")["time_us"] == 120000.0
    assert not r.partial and r.warnings == []


def test_rows_without_any_header_use_the_layout_of_their_width() -> None:
    text = (DATA / "all_reduce-modern-2node-16gpu-a100-mpijob.txt").read_text()
    rows = "\n".join(line for line in text.splitlines() if line.startswith(" "))
    r = parse_text(rows, "nccl-tests")
    assert len(r.frame) == 4 and "assumed the 13-field layout" in r.warnings[0]


def test_eight_independent_single_rank_runs_are_reported_not_mixed() -> None:
    r = load("handmade-nccl-tests-no-mpi-8-single-rank-runs-tagged.txt")
    assert r.meta["independent_runs"] == 8
    assert "repeated headers: 8 independent single-rank runs (MPI not built in?)" in r.warnings
    f = r.frame
    assert sorted(set(f["run"])) == list(range(8))
    assert (f.groupby("run").size() == 14).all()  # 7 sizes x 2 placements each
    for _, part in f.groupby("run"):
        assert part["size_bytes"].is_unique is False and part["size_bytes"].nunique() == 7
    assert (f["busbw_gbps"] == 0).all()  # one rank moves nothing between ranks


def test_untagged_interleaved_runs_are_split_by_order() -> None:
    r = load("handmade-nccl-tests-no-mpi-2-runs-untagged-interleaved.txt")
    assert r.meta["independent_runs"] == 2 and not r.partial
    f = r.frame
    assert sorted(set(f["run"])) == [0, 1]
    for _, part in f.groupby("run"):
        assert len(part) == 14 and not part.duplicated(["size_bytes", "placement"]).any()


def test_sequential_runs_in_one_log_are_runs_not_a_mistake() -> None:
    a = (DATA / "all_reduce-v2.18-1node-2rank-rtx5090-mpirun-tagoutput-stderr.txt").read_text()
    b = (DATA / "all_reduce-modern-2node-16gpu-h100-a3mega-full-sweep.txt").read_text()
    r = parse_text(a + b, "nccl-tests")
    assert "independent_runs" not in r.meta
    assert r.frame.groupby("run").size().to_dict() == {0: 16, 1: 62}
    assert r.frame[r.frame["run"] == 0]["collective"].unique().tolist() == ["all_reduce"]
    assert peak_busbw(r.frame) == 2.31  # the weaker run decides


# ---------------------------------------------------------------- JSON (-J)


def test_json_matches_the_text_of_the_same_run() -> None:
    j = load("handmade-nccl-tests-J-json-a3mega-numbers.json")
    t = load("all_reduce-modern-2node-16gpu-h100-a3mega-full-sweep.txt")
    assert j.kind == "nccl-tests-json" and not j.partial
    assert len(j.frame) == len(t.frame) == 62
    assert list(j.frame["size_bytes"]) == list(t.frame["size_bytes"])
    assert list(j.frame["placement"]) == list(t.frame["placement"])
    assert np.allclose(j.frame["time_us"], t.frame["time_us"])
    assert np.allclose(j.frame["busbw_gbps"], t.frame["busbw_gbps"], atol=0.01)
    assert abs(peak_busbw(j.frame) - 338.82) < 0.01
    assert j.meta["nccl_version"] == "2.19.3" and j.meta["collective"] == "all_reduce"
    assert j.meta["ranks"] == 16 and j.meta["avg_busbw_gbps"] == 70.742
    assert j.meta["devices"][8]["host"] == "ztan-mig-gq73"  # type: ignore[index]
    assert str(j.frame["root"].dtype) == "Int64" and (j.frame["root"] == -1).all()


def test_truncated_json_keeps_complete_results_and_is_partial() -> None:
    r = load("handmade-nccl-tests-J-json-truncated.json")
    assert r.partial and "ends early" in r.warnings[0]
    assert len(r.frame) == 54 and r.frame["size_bytes"].max() == 536870912
    assert r.meta["ranks"] == 16


def test_json_nan_and_null_nwrong() -> None:
    doc = (
        '{"version":2,"nccl_version":22907,"args":["./build/sendrecv_perf"],"results":[{"size":8,"count":2,'
        '"type":"float","redop":"sum","root":"     0","out_of_place":{"time":"nan","alg_bw":0.1,"bus_bw":0.1,'
        '"nwrong":null},"in_place":null,"actual_iterations":20,"experiment_name":""}]}'
    )
    r = parse_text(doc, "nccl-tests")  # a JSON document under the text kind goes to the JSON parser
    assert r.kind == "nccl-tests-json" and len(r.frame) == 1
    assert math.isnan(r.frame["time_us"][0]) and math.isnan(r.frame["wrong"][0])
    assert r.frame["collective"][0] == "sendrecv" and r.frame["root"][0] == 0


# ---------------------------------------------------------------- truncation and garbage


def test_truncated_mid_row_is_partial_with_the_rows_before() -> None:
    text = (DATA / "all_reduce-modern-2node-16gpu-h100-a3mega-full-sweep.txt").read_text()
    cut = text.index("  1073741824") + 40
    r = parse_text(text[:cut], "nccl-tests", source="cut.txt")
    assert r.partial
    assert r.frame["size_bytes"].max() == 536870912
    assert any("truncated" in w for w in r.warnings)


def test_stopped_after_a_row_without_footer_is_partial() -> None:
    text = (DATA / "all_reduce-modern-2node-16gpu-h100-a3mega-full-sweep.txt").read_text()
    r = parse_text(text[: text.index("# Out of bounds")], "nccl-tests")
    assert r.partial and len(r.frame) == 62
    assert any("no '# Avg bus bandwidth' footer" in w for w in r.warnings)


def test_garbled_row_in_the_middle_is_an_error_at_its_line() -> None:
    lines = (DATA / "all_reduce-modern-2node-16gpu-h100-a3mega-full-sweep.txt").read_text().splitlines()
    assert lines[28].startswith("         256")
    lines[28] = lines[28].replace("123.6", "12x.6")
    with pytest.raises(ParseError) as exc:
        parse_text("\n".join(lines), "nccl-tests", source="bad.txt")
    assert exc.value.lineno == 29 and exc.value.source == "bad.txt"
    assert str(exc.value).startswith("bad.txt:29: malformed result row")
    assert "12x.6" in exc.value.line


def test_header_without_rows_is_an_empty_partial_result() -> None:
    text = (DATA / "all_reduce-legacy-3node-t4-srun-pyxis-novalidation.txt").read_text()
    r = parse_text(text[: text.index("   104857600")], "nccl-tests")
    assert r.partial and r.frame.empty and r.meta["ranks"] == 3


def test_not_nccl_at_all_is_an_error() -> None:
    with pytest.raises(ParseError, match=r"^x.log:1: no nccl-tests output"):
        parse_text("hello\nworld\n", "nccl-tests", source="x.log")


# ---------------------------------------------------------------- the fast paths and the exact parser agree


@pytest.mark.parametrize(
    "name",
    sorted(p.name for p in DATA.glob("*.txt") if p.name.startswith(("all_", "handmade-nccl", "issue-nccl"))),
)
def test_bulk_and_exact_readers_agree(name: str) -> None:
    """Every nccl-tests sample read by the fast paths and exactly: the same result, and the fast
    paths really read it (this fails when one is deleted or declines everything)."""
    text = (DATA / name).read_text()
    result, ran = fast_and_exact(text, "nccl-tests")
    assert ran["nccl-scan"], "the Arrow scan did not run"
    timestamps = isinstance(result, ParseResult) and "timestamp" in result.frame.columns
    if isinstance(result, ParseResult) and len(result.frame) and not timestamps and name not in ROWS_DECLINED:
        assert ran["nccl-rows"], "the Arrow row reader did not run"


# samples whose only block of rows the Arrow reader declines, by design (the exact reader decides)
ROWS_DECLINED = {
    "issue-nccl-tests-280-test-nccl-failure-last-row-cut.txt": "its last row is cut after the keys",
    "issue-nccl-tests-78-legacy-alltoall-blank-redop-8node-v100.txt": "a token short: the blank redop",
}


def test_bulk_reader_falls_back_on_a_short_row() -> None:
    schema = nccl_table.default_schema(13)
    assert schema is not None
    good = "1048576  262144  float  sum  -1  203.2  5.16  9.68  0  207.2  5.06  9.49  0"
    rows = [good] * 40 + [good.rsplit(" ", 1)[0]]
    block = nccl_table.parse_rows(schema, "\n".join(rows), np.arange(1, 42))
    assert [b[0] for b in block.bad] == [41] and len(block.lines) == 40


@pytest.mark.parametrize("pad", [" ", "  ", "      ", "\t", " \r"])
def test_bulk_and_exact_readers_agree_on_padded_rows(pad: str) -> None:
    lines = (DATA / "all_reduce-modern-2node-16gpu-h100-a3mega-full-sweep.txt").read_text().split("\n")
    text = "\n".join(ln + pad if ln.lstrip()[:1].isdigit() else ln for ln in lines)
    result, ran = fast_and_exact(text, "nccl-tests")
    assert ran["nccl-rows"], "the Arrow row reader did not read the padded rows"
    assert ran["nccl-scan"], "the Arrow scan did not run"
    assert isinstance(result, ParseResult)
    assert len(result.frame) == len(parse_text("\n".join(lines), "nccl-tests").frame)


def test_a_bad_padded_row_is_reported_as_printed() -> None:
    lines = (DATA / "all_reduce-modern-2node-16gpu-h100-a3mega-full-sweep.txt").read_text().split("\n")
    lines = [ln + "  " if ln.lstrip()[:1].isdigit() else ln for ln in lines]
    lines[28] = lines[28].replace("123.6", "12x.6")
    with pytest.raises(ParseError) as exc:
        parse_text("\n".join(lines), "nccl-tests", source="bad.txt")
    assert exc.value.lineno == 29 and exc.value.line.startswith("256") and "12x.6" in exc.value.line


# ---------------------------------------------------------------- Arrow finds the lines SCAN finds

NCCL_SAMPLES = sorted(p.name for p in DATA.glob("*.txt") if "nccl-tests" in p.name or p.name.startswith("all_"))


def _line_matches(text: str) -> object:
    from hpckit.results import nccl_scan as ns

    tests = ns.TESTS.re2
    assert tests is not None
    found = ns.line_matches(text, *tests)
    return None if found is None else found.matches


@pytest.mark.parametrize("name", NCCL_SAMPLES)
def test_arrow_line_matches_are_scans(name: str) -> None:
    from hpckit.results.nccl_scan import TESTS, _scan_matches

    text = (DATA / name).read_text()
    if text.isascii():
        assert _line_matches(text) == list(_scan_matches(text, TESTS.scan))
    else:
        assert _line_matches(text) is None


@pytest.mark.parametrize(
    "odd",
    [
        "",
        "\n\n",
        "# nThread 1\n",
        "  8  2 float sum -1  1.0  0.0  0.0  0\r\n  16  4 float sum -1 1.0 0.0 0.0 0\n"
        "#  Rank  0 Group  0 Pid 1 on h device  0\n",
        "[1,0]<stdout>:#  Rank  0 Pid 1 on h device 0\n[1,1]<stdout>:#  Rank  1 Pid 2 on h device 1\nx\n",
        "  3: # nThread 1\n 12: 1024 256 float sum -1 1 2 3 0\n0: 8 2 float\n#size count\n# Rankx\n",
        "#\tsize\tcount\n9\t1\n#Avg bus bandwidth : 1\n",
    ],
)
def test_arrow_line_matches_on_odd_lines(odd: str) -> None:
    from hpckit.results.nccl_scan import TESTS, _scan_matches

    assert _line_matches(odd) == list(_scan_matches(odd, TESTS.scan))


# ---------------------------------------------------------------- rows read by Arrow agree with the exact reader


def _row_readers_agree(text: str) -> None:
    fast_and_exact(text, "nccl-tests")


@pytest.mark.parametrize(
    "change",
    [
        ("      0", "    N/A"),  # the #wrong column not checked
        ("   65536", " 6.6e+04"),  # a size written as a float
        ("   65536", " 65536.5"),  # a size that is not whole: the exact reader says so
        ("   float", "  \x1cfloat"),  # a blank str.split cuts at and Arrow's ASCII split does not
        ("   float", "  \x0bfloat"),  # one that both Arrow and str.split cut at
        ("   float", "  flo\u00e4t"),  # non-ASCII text
        ("   float", "    half"),  # a second type
        ("   float", "  fl_oat"),
        ("   65536", "  6_5536"),  # int() reads it, Arrow does not
        ("   65536", "   +6553"),
        ("   65536", "     nan"),  # a size that is no number
        ("159.4", "  nan"),  # a time that is NaN
        ("159.4", "  N/A"),
        ("159.4", "  1e5"),
    ],
)
def test_arrow_row_reader_agrees_with_exact(change: tuple[str, str]) -> None:
    text = (DATA / "all_reduce-modern-2node-16gpu-h100-a3mega-full-sweep.txt").read_text()
    lines = text.split("\n")
    at = next(i for i, ln in enumerate(lines) if ln.lstrip().startswith("65536 "))
    assert change[0] in lines[at]
    lines[at] = lines[at].replace(*change, 1)
    _row_readers_agree("\n".join(lines))


def test_arrow_row_reader_reads_the_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    schema = nccl_table.default_schema(13)
    assert schema is not None
    good = "1048576  262144  float  sum  -1  203.2  5.16  9.68  0  207.2  5.06  9.49  N/A"
    pieces = ["\n".join([good, " " + good.replace("float", "half") + " "] * 10)] * 2
    for block in (10**9, 1):  # one block, and one piece per block
        monkeypatch.setattr(nccl_table, "BLOCK_CHARS", block)
        columns = nccl_table.row_columns(pieces, schema.token_fields(), 40)
        assert columns is not None
        assert list(columns[2].categories) == ["float", "half"]  # type: ignore[attr-defined]
        assert math.isnan(columns[12][0]) and columns[0].dtype == np.int64  # type: ignore[index, attr-defined]
        assert nccl_table.row_columns(pieces, schema.token_fields(), 41) is None


@pytest.mark.parametrize("name", ["all_reduce-modern-2node-16gpu-h100-a3mega-full-sweep.txt"])
def test_arrow_row_reader_in_blocks_agrees(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nccl_table, "BLOCK_CHARS", 300)
    text = (DATA / name).read_text()
    lines = text.split("\n")
    rows = [i for i, ln in enumerate(lines) if ln.lstrip()[:1].isdigit()]
    lines[rows[0] + 3 : rows[0] + 3] = ["# a break: the rows come in two pieces"]
    _row_readers_agree("\n".join(lines))


@pytest.mark.parametrize("odd_row", [False, True])
def test_binaries_found_in_the_lines_that_are_not_rows(odd_row: bool) -> None:
    """When rows are most of the log only the other lines are searched for binary names: the
    same names as a search of the whole text, also when a row holds one (then the whole text)."""
    from hpckit.results import nccl_scan as ns

    text = (DATA / "all_reduce-modern-2node-16gpu-h100-a3mega-full-sweep.txt").read_text()
    lines = text.split("\n")
    rows = [ln for ln in lines if ln.lstrip()[:1].isdigit()]
    body = "\n".join(lines + rows * 20 + ["+ srun ./build/all_gather_perf -b 8 -e 1G"] + rows)
    if odd_row:
        body += "\n" + rows[0] + " x_perf sendrecv_perf"
    whole = ns.Scan("x")
    ns._binaries(whole, body)
    assert ns.scan(body, "x").binaries == whole.binaries
    assert ("sendrecv" in whole.binaries) is odd_row and "all_gather" in whole.binaries


def test_parse_restores_numpy_huge_pages() -> None:
    """numpy's huge pages are off only while a parser runs."""
    from hpckit.results import api

    if api._HUGEPAGES is None:
        pytest.skip("this numpy has no huge-page switch")
    before = api._HUGEPAGES(True)
    try:
        parse_text((DATA / NCCL_SAMPLES[0]).read_text(), "nccl-tests")
        assert api._HUGEPAGES(True) is True
    finally:
        api._HUGEPAGES(before)


def test_collective_the_log_names_wins_over_the_callers_hint() -> None:
    # The hint is for logs that name no collective; a log whose header names its binary keeps it in the
    # rows and in meta alike (meta said the hint while every row said all_reduce).
    stated_log = DATA / "all_reduce-v2.18-1node-2rank-rtx5090-mpirun-tagoutput-stderr.txt"
    stated = parse_file(stated_log, collective="alltoall")
    assert stated.meta["collective"] == "all_reduce"
    assert set(stated.frame["collective"]) == {"all_reduce"}
    unstated_log = DATA / "all_gather-modern-2node-16gpu-a3mega-srun-l-prefix-excerpt.txt"
    unstated = parse_file(unstated_log, collective="alltoall")
    assert unstated.meta["collective"] == "alltoall"
    assert set(unstated.frame["collective"]) == {"alltoall"}
