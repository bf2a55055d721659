"""torch_sweep's output round-trips through hpckit.results (the nccl-tests parser) for every collective.

The sweep really runs: three gloo ranks on loopback, every collective in one process group (one
start-up for all of them), each collective's table captured as rank 0 printed it.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from hpckit.bench.registry import BENCHMARKS, get
from hpckit.bench.torch_sweep import BUSBW_FACTORS, counts, parse_size, sizes
from hpckit.results import parse_file, parse_text, peak_busbw

DATA = Path(__file__).resolve().parent / "data" / "bench"
PROGRAM = Path(__file__).resolve().parent.parent / "hpckit" / "bench" / "torch_sweep.py"
RANKS = 3
OPS = sorted(BUSBW_FACTORS)

# Each rank joins once, then sweeps every collective; rank 0 writes each table to its own file.
DRIVER = """
import contextlib, importlib.util, io, sys
spec = importlib.util.spec_from_file_location("torch_sweep", sys.argv[1])
ts = importlib.util.module_from_spec(spec); sys.modules["torch_sweep"] = ts; spec.loader.exec_module(ts)
out_dir = sys.argv[2]
world = ts.join("gloo", 60)
for op in sys.argv[3:]:
    args = ts.parse_args(["--op", op, "-b", "100", "-e", "100K", "-f", "4", "-w", "1", "-n", "2"])
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        wrong = ts.sweep(args, world)
    if world.rank == 0:
        open(f"{out_dir}/{op}.out", "w").write(text.getvalue())
    assert wrong == 0, (op, wrong)
import torch.distributed as dist
dist.destroy_process_group()
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    out = tmp_path_factory.mktemp("sweep")
    port = str(_free_port())
    procs = []
    for rank in range(RANKS):
        env = {
            **os.environ,
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": port,
            "SLURM_PROCID": str(rank),  # as srun sets them
            "SLURM_NTASKS": str(RANKS),
            "SLURM_LOCALID": str(rank),
            "OMP_NUM_THREADS": "1",
            "PYTHONWARNINGS": "ignore",
        }
        for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
            env.pop(key, None)
        cmd = [sys.executable, "-c", DRIVER, str(PROGRAM), str(out), *OPS]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    for proc in procs:
        text, _ = proc.communicate(timeout=180)
        assert proc.returncode == 0, text
    return {op: (out / f"{op}.out").read_text() for op in OPS}


# What nccl-tests prints for -b 100 -e 100K -f 4 on 3 ranks, float (4 bytes), written out by hand from its
# rules (doc/PERFORMANCE.md, src/*.cu): a size is a total; all_gather, reduce_scatter and alltoall split
# it over the ranks, so the count is per rank (size // (4 x 3)) and the size printed is rounded down to
# count x 4 x 3; the others print count = size // 4. Bus bandwidth = algbw x 2(n-1)/n for all_reduce,
# (n-1)/n for the three split ones, 1 for broadcast and reduce.
SIZES = (100, 400, 1600, 6400, 25600, 102400)
WHOLE = [(25, 100), (100, 400), (400, 1600), (1600, 6400), (6400, 25600), (25600, 102400)]
PER_RANK = [(8, 96), (33, 396), (133, 1596), (533, 6396), (2133, 25596), (8533, 102396)]
EXPECTED = {
    "all_reduce": (WHOLE, 4 / 3, "sum", -1),
    "all_gather": (PER_RANK, 2 / 3, "none", -1),
    "reduce_scatter": (PER_RANK, 2 / 3, "sum", -1),
    "alltoall": (PER_RANK, 2 / 3, "none", -1),
    "broadcast": (WHOLE, 1.0, "none", 0),
    "reduce": (WHOLE, 1.0, "sum", 0),
}


@pytest.mark.slow  # its fixture runs the torch sweep in 2 processes: ~6 s
@pytest.mark.parametrize("op", OPS)
def test_every_collective_round_trips(tables: dict[str, str], op: str) -> None:
    """Every expectation here is written out, not computed by the code under test (torch_sweep, registry)."""
    rows_expected, factor, redop, root = EXPECTED[op]
    result = parse_text(tables[op], "auto", f"{op}.out")
    assert result.kind == "nccl-tests" and not result.partial and result.warnings == []
    frame = result.frame
    meta = result.meta
    assert meta["collective"] == op  # from the `(as nccl-tests OP_perf)` line
    assert meta["ranks"] == RANKS and meta["out_of_bounds"] == 0 and meta["out_of_bounds_status"] == "OK"
    assert meta["params"]["min_bytes"] == 100 and meta["params"]["iters"] == 2  # type: ignore[index]
    assert [d["name"] for d in meta["devices"]] == ["CPU (gloo)"] * RANKS  # type: ignore[attr-defined]
    assert list(frame["placement"].astype(str)) == ["out", "in"] * len(SIZES)
    assert (frame["wrong"] == 0).all()
    for placement in ("out", "in"):
        rows = frame[frame["placement"] == placement]
        assert list(zip(rows["count"], rows["size_bytes"], strict=True)) == rows_expected
    # algbw is bytes / time (GB/s from us), busbw algbw x the collective's factor; as printed (3 decimals)
    algbw = frame["size_bytes"] / (frame["time_us"] * 1e3)
    assert frame["algbw_gbps"].to_numpy() == pytest.approx(algbw.to_numpy(), abs=6e-4, rel=1e-2)
    assert frame["busbw_gbps"].to_numpy() == pytest.approx(frame["algbw_gbps"].to_numpy() * factor, abs=2e-3)
    assert set(frame["redop"].astype(str)) == {redop}
    assert set(frame["root"]) == {root}
    avg = frame["busbw_gbps"].mean()
    assert meta["avg_busbw_gbps"] == pytest.approx(avg, rel=0.05, abs=2e-3)


@pytest.mark.slow  # the torch sweep fixture: ~6 s
def test_the_table_lines_up_with_its_header(tables: dict[str, str]) -> None:
    """Column ends of the header and the rows agree, as in nccl-tests (readable by eye, not only by parser)."""
    lines = tables["all_reduce"].splitlines()
    header = next(line for line in lines if line.startswith("#       size"))
    row = next(line for line in lines if line.strip() and not line.startswith("#"))

    def ends(line: str) -> list[int]:
        return [i for i in range(1, len(line) + 1) if line[i - 1] != " " and (i == len(line) or line[i] == " ")]

    assert ends(header)[1:] == ends(row)  # the first end in the header is its "#"


def test_the_lab_capture_parses_as_the_bench_reads_it() -> None:
    result = parse_file(DATA / "lab-torch-allreduce-4node-gloo.out")
    assert result.kind == "nccl-tests" and result.meta["collective"] == "all_reduce"
    assert result.meta["hosts"] == ["node1", "node2", "node3", "node4"]
    assert len(result.frame) == 2 * 15 and peak_busbw(result.frame) == pytest.approx(0.330)


def test_a_killed_run_has_no_table() -> None:
    from hpckit.results import ParseError

    with pytest.raises(ParseError, match="no nccl-tests output"):
        parse_file(DATA / "lab-torch-allreduce-node3-killed.out", "nccl-tests")


def test_registry_factors_match_the_program_and_nccl_tests() -> None:
    for n in (2, 3, 8, 16):
        assert get("allreduce").factor(n) == pytest.approx(2 * (n - 1) / n)
        for name in ("allgather", "reducescatter", "alltoall"):
            assert get(name).factor(n) == pytest.approx((n - 1) / n)
        assert get("broadcast").factor(n) == get("reduce").factor(n) == 1.0
        for bench in BENCHMARKS.values():
            assert BUSBW_FACTORS[bench.op](n) == pytest.approx(bench.factor(n)), bench.op


def test_sizes_match_nccl_tests() -> None:
    assert parse_size("1K") == 1024 and parse_size("16M") == 16 << 20 and parse_size("8G") == 8 << 30
    assert sizes(1024, 16 << 20, 2)[-1] == 16 << 20 and len(sizes(1024, 16 << 20, 2)) == 15
    # 8 ranks, 1 MiB all_gather: 32768 floats per rank, as nccl-tests prints it
    assert counts("all_gather", 1 << 20, 4, 8) == (32768, 1 << 20)
    assert counts("all_reduce", 1 << 20, 4, 8) == (262144, 1 << 20)
    assert counts("alltoall", 100, 4, 3) == (8, 96)


def _has_torch(python: str) -> bool:
    return subprocess.run([python, "-c", "import torch"], capture_output=True, check=False).returncode == 0


@pytest.mark.skipif(
    not Path("/usr/bin/python3").exists() or _has_torch("/usr/bin/python3"), reason="needs a python without torch"
)
def test_without_torch_each_rank_states_the_cause_on_one_line() -> None:
    """srun --kill-on-bad-exit can cut a rank's traceback off (the lab lost the last one whole): each rank says
    why on one flushed line, which hpckit reads as the program's own error."""
    from hpckit.bench.follow import program_errors

    done = subprocess.run(["/usr/bin/python3", str(PROGRAM)], capture_output=True, text=True, check=False, timeout=60)
    assert done.returncode == 1 and done.stderr == "ModuleNotFoundError: No module named 'torch'\n", done.stderr
    assert program_errors("0: " + done.stderr) == ["0: ModuleNotFoundError: No module named 'torch'"]
