"""sacct --parsable2 (real samples) and --json (hand-made after Slurm's data_parser, see SOURCES.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from hpckit.results import ParseError, parse_file, parse_text

DATA = Path(__file__).parent / "data" / "results"


def test_parsable2_all_fields_slurm20() -> None:
    r = parse_file(DATA / "sacct-parsable2-o-all-slurm20.txt")
    f = r.frame
    assert r.kind == "sacct" and not r.partial
    assert len(f) == 68 and len(r.meta["fields"]) == 109  # type: ignore[arg-type]
    first = f.iloc[0]
    assert first["job_id"] == "8012944_24093.0" and first["step"] == "0"
    assert first["state"] == "COMPLETED" and first["elapsed_s"] == 48
    assert first["alloc_gpus"] == 0 and first["nnodes"] == 1
    assert first["end"] == pd.Timestamp("2020-11-16T11:59:59")
    assert first["MaxRSS"] == "77460K"  # every raw field kept under its sacct name
    assert r.meta["delimiter"] == "|"


def test_parsable2_custom_delimiter_running_jobs() -> None:
    r = parse_file(DATA / "sacct-parsable2-o-all-hash-pipe-delim-slurm21.08plus-running.txt")
    f = r.frame
    assert r.meta["delimiter"] == "|#" and len(f) == 10
    assert set(f["state"]) == {"RUNNING"} and f["end"].isna().all()  # End=Unknown
    assert f["alloc_gpus"].iloc[0] == 1 and f["step"].iloc[0] == "extern"
    assert f["Container"].iloc[0] == ""


def test_truncated_last_row_is_partial() -> None:
    text = (DATA / "sacct-parsable2-o-all-slurm20.txt").read_text()
    r = parse_text(text[:-400], "sacct")
    assert r.partial and len(r.frame) == 67 and "truncated" in r.warnings[0]


def test_row_with_wrong_field_count_mid_file_is_an_error() -> None:
    lines = (DATA / "sacct-parsable2-o-all-slurm20.txt").read_text().splitlines()
    lines[5] = lines[5] + "|extra"
    with pytest.raises(ParseError, match=r"^s:6: expected 109 fields, found 110"):
        parse_text("\n".join(lines), "sacct", source="s")


def test_json_jobs_and_steps() -> None:
    r = parse_file(DATA / "handmade-sacct-json-slurm24.05-data_parser-v0.0.41.json")
    f = r.frame.set_index("job_id")
    assert r.kind == "sacct-json" and r.meta["jobs"] == 2 and len(f) == 7
    assert r.meta["slurm_version"] == "24.05.5"
    assert f.loc["4101", "state"] == "COMPLETED" and f.loc["4101", "elapsed_s"] == 95
    assert f.loc["4101", "alloc_gpus"] == 16 and f.loc["4101", "timelimit_s"] == 7200.0
    assert f.loc["4102", "exit_code"] == "1:0" and f.loc["4102", "state"] == "FAILED"
    assert f.loc["4101.0", "job_name"] == "all_reduce_perf_mpi" and f.loc["4101.0", "nnodes"] == 2
    assert f.loc["4101.batch", "step"] == "batch"


def test_json_old_openapi_shapes() -> None:
    # v0.0.37-era shapes: plain numbers, state.current a string, step id a bare number
    doc = {
        "jobs": [
            {
                "job_id": 77,
                "name": "x",
                "state": {"current": "COMPLETED", "reason": "None"},
                "time": {"elapsed": 12, "start": 1641003593, "end": 1641003605, "limit": 60},
                "exit_code": {"status": "SUCCESS", "return_code": 0},
                "tres": {"allocated": [{"type": "gres", "name": "gpu", "id": 1001, "count": 4}]},
                "steps": [{"step": {"id": 0, "name": "python"}, "state": "COMPLETED", "time": {"elapsed": 11}}],
            }
        ]
    }
    f = parse_text(json.dumps(doc), "sacct").frame  # JSON under the text kind goes to the JSON parser
    assert list(f["job_id"]) == ["77", "77.0"]
    assert f["elapsed_s"].tolist() == [12, 11] and f["alloc_gpus"][0] == 4 and f["timelimit_s"][0] == 3600.0


def test_invalid_json_is_an_error_at_its_line() -> None:
    with pytest.raises(ParseError, match=r"^j:3: invalid JSON"):
        parse_text('{\n "jobs": [\n  {"job_id": 1,,}\n ]\n}', "sacct-json", source="j")
