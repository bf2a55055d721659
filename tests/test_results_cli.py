"""`results parse`: tables, JSON, exports, plot, and one-line errors with exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from hpckit.cli.results import results

DATA = Path(__file__).parent / "data" / "results"
H100 = str(DATA / "all_reduce-modern-2node-16gpu-h100-a3mega-full-sweep.txt")
NEMO2 = str(DATA / "nemo2-b200-llama3-8b-pretrain-iterations-45-49.txt")


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(results, ["parse", *args])
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize("depth", [0, 12])
def test_table_and_figures(depth: int, tmp_path: Path) -> None:
    """The same table and figures whatever the length of the files' paths (a checkout deep in a
    CI runner's folders): output that is not a terminal is never wrapped or cut."""
    folder = tmp_path.joinpath(*["a-rather-long-folder-name"] * depth)
    folder.mkdir(parents=True, exist_ok=True)
    h100, nemo2 = folder / Path(H100).name, folder / Path(NEMO2).name
    h100.write_bytes(Path(H100).read_bytes())
    nemo2.write_bytes(Path(NEMO2).read_bytes())
    code, out, err = run(str(h100), str(nemo2))
    assert code == 0, err
    assert f"{h100}: nccl-tests, 62 rows" in out and "8 GiB" in out
    assert "peak_busbw" in out and "338.82 GB/s" in out and "70.74 GB/s" in out
    assert f"{nemo2}: nemo2, 5 rows" in out
    assert "steady_step_time" in out and "6.07 s" in out


def test_json_output() -> None:
    code, out, _ = run("--json", H100)
    assert code == 0
    doc = json.loads(out)
    assert doc[0]["kind"] == "nccl-tests" and len(doc[0]["rows"]) == 62
    assert doc[0]["figures"]["peak_busbw"] == {"value": 338.82, "unit": "GB/s"}
    assert doc[0]["meta"]["ranks"] == 16


def test_csv_parquet_and_plot(tmp_path: Path) -> None:
    csv, parquet, png = tmp_path / "o.csv", tmp_path / "o.parquet", tmp_path / "o.png"
    assert run("--csv", str(csv), "--plot", str(png), H100, NEMO2)[0] == 0
    frame = pd.read_csv(csv)
    assert len(frame) == 67 and set(frame["source"]) == {H100, NEMO2}
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert run("--parquet", str(parquet), H100)[0] == 0
    assert pd.read_parquet(parquet)["busbw_gbps"].max() == 338.82


def test_parse_error_is_one_line_on_stderr_and_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.log"
    lines = Path(H100).read_text().splitlines()
    lines[28] = lines[28].replace("123.6", "12x.6")
    bad.write_text("\n".join(lines))
    code, out, err = run("--kind", "nccl-tests", str(bad))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith(f"hpckit: error: {bad}:29: malformed result row")


def test_warnings_go_to_stderr() -> None:
    code, out, err = run(str(DATA / "handmade-nccl-tests-no-mpi-8-single-rank-runs-tagged.txt"))
    assert code == 0 and "independent_runs" in out
    assert "8 independent single-rank runs (MPI not built in?)" in err
