# ruff: noqa: E501  (the nccl-tests header lines are kept whole so that they read as printed)
"""Writes the hand-made samples (handmade-*) of this folder; see SOURCES.md for the basis of each.

No real output of these shapes was found, so they are made here, deterministically, with the printf
formats of nccl-tests' src/util.cu and src/common.cu (NVIDIA/nccl-tests commit 0fdb00a3) and numbers
taken from the real samples next to them.  Run it from the repository root:

    /root/venv/bin/python tests/data/results/make_handmade.py
"""

from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
A3MEGA = HERE / "all_reduce-modern-2node-16gpu-h100-a3mega-full-sweep.txt"


def float_str(value: float, width: int) -> str:
    """nccl-tests' getFloatStr: 2, 1 or 0 decimals by magnitude, exponent when nothing fits."""
    power, val = 0, 1
    while value >= val:
        power += 1
        val *= 10
    if power < width - 2:
        return f"{value:{width}.2f}"
    if power < width - 1:
        return f"{value:{width}.1f}"
    if power < width + 1:
        return f"{value:{width}.0f}"
    return f"{value:{width}.1e}"


def preamble(size: int, count: int, typ: str, op: str, root: int) -> str:
    return f"{size:12d}  {count:12d}  {typ:>8s}  {op:>6s}  {root:6d}"


def body(time_us: float, alg: float, bus: float, wrong: float | None) -> str:
    wrong_s = f"{wrong:6g}" if wrong is not None else "   N/A"
    return f"  {float_str(time_us, 7):>7s}  {float_str(alg, 6):>6s}  {float_str(bus, 6):>6s}  {wrong_s}"


def a3mega_rows() -> list[tuple[int, int, float, float]]:
    """(size, count, out time, in time) of the real a3mega H100 sweep."""
    rows = []
    for line in A3MEGA.read_text().splitlines():
        tok = line.split()
        if tok and tok[0].isdigit():
            rows.append((int(tok[0]), int(tok[1]), float(tok[5]), float(tok[9])))
    return rows


def bandwidths(size: int, time_us: float, nranks: int) -> tuple[float, float]:
    alg = size / 1e3 / time_us
    return alg, alg * 2 * (nranks - 1) / nranks


# ------------------------------------------------------------------ -I 1 / -S 1 text


def per_iter_timestamps() -> str:
    out = [
        "# nccl-tests version 2.18.0 nccl-headers=22907 nccl-library=22907",
        "# Collective test starting: all_reduce_perf",
        "# nThread 1 nGpus 8 minBytes 1048576 maxBytes 134217728 step: 2(factor) warmup iters: 5 "
        "iters: 20 agg iters: 1 validation: 1 graph: 0 unalign: 0",
        "# Per-Iteration Report: CUDA event timing; i_* uses max over process rows ",
        "#",
        "# Using devices",
    ]
    bus_ids = ["18", "2a", "3a", "5d", "9a", "ab", "ba", "db"]
    for r, bus in enumerate(bus_ids):
        out.append(
            f"#  Rank {r:2d} Group  0 Pid {41230:6d} on {'gpu-a01':>10s} device {r:2d} [0000:{bus}:00] "
            "NVIDIA H100 80GB HBM3"
        )
    out.append("#")
    out.append(
        f"# {'':>10s}  {'':>12s}  {'':>8s}  {'':>6s}  {'':>6s}              out-of-place (+ per-iteration)"
        "                                in-place (+ per-iteration)"
    )
    names = ["time", "algbw", "busbw", "#wrong", "i_min", "i_max", "i_p99", "i_cv%"]
    units = ["(us)", "(GB/s)", "(GB/s)", "", "(us)", "(us)", "(us)", "(%)"]
    widths = [7, 6, 6, 6, 7, 7, 7, 7]
    head = "  ".join(f"{n:>{w}s}" for n, w in zip(names * 2, widths * 2, strict=True))
    unit = "  ".join(f"{n:>{w}s}" for n, w in zip(units * 2, widths * 2, strict=True))
    out.append(f"# {'size':>10s}  {'count':>12s}  {'type':>8s}  {'redop':>6s}  {'root':>6s}  {head} {'timestamp':>19s}")
    out.append(f"# {'(B)':>10s}  {'(elements)':>12s}  {'':>8s}  {'':>6s}  {'':>6s}  {unit} {'%Y-%m-%d %H:%M:%S':>19s}")
    rng = random.Random(7)
    second = 0
    for size, count, t_out, t_in in a3mega_rows():
        if not 1048576 <= size <= 134217728:
            continue
        line = preamble(size, count, "float", "sum", -1)
        for t in (t_out * 0.31, t_in * 0.31):  # one node: NVLink, about 3x the 2-node times
            alg, bus = bandwidths(size, t, 8)
            i_min, i_max = t * 0.97, t * (1.05 + rng.random() * 0.1)
            line += body(t, alg, bus, 0) + "".join(
                f"  {float_str(v, 7):>7s}" for v in (i_min, i_max, i_max * 0.99, 1.0 + rng.random() * 2)
            )
        second += 3
        line += f"{f'2025-11-03 14:02:{second:02d}':>21s}"
        out.append(line)
    out += [
        "# Out of bounds values : 0 OK",
        "# Avg bus bandwidth    : 311.402 ",
        "#",
        "# Collective test concluded: all_reduce_perf",
        "",
        "#",
    ]
    return "\n".join(out) + "\n"


def timestamps_only() -> str:
    out = [
        "# nThread 1 nGpus 1 minBytes 8 maxBytes 1024 step: 2(factor) warmup iters: 5 iters: 20 "
        "agg iters: 1 validation: 0 graph: 0",
        "#",
        "# Using devices",
        "#  Rank  0 Group  0 Pid   9001 on    gpu-b07 device  0 [0000:18:00] NVIDIA A100-SXM4-80GB",
        "#  Rank  1 Group  0 Pid   9002 on    gpu-b07 device  1 [0000:2a:00] NVIDIA A100-SXM4-80GB",
        "#",
        f"# {'':>10s}  {'':>12s}  {'':>8s}  {'':>6s}  {'':>6s}           out-of-place                       "
        "in-place          ",
        f"# {'size':>10s}  {'count':>12s}  {'type':>8s}  {'redop':>6s}  {'root':>6s}  {'time':>7s}  {'algbw':>6s}  "
        f"{'busbw':>6s}  {'#wrong':>6s}  {'time':>7s}  {'algbw':>6s}  {'busbw':>6s}  {'#wrong':>6s} {'timestamp':>19s}",
        f"# {'(B)':>10s}  {'(elements)':>12s}  {'':>8s}  {'':>6s}  {'':>6s}  {'(us)':>7s}  {'(GB/s)':>6s}  "
        f"{'(GB/s)':>6s}  {'':>6s}  {'(us)':>7s}  {'(GB/s)':>6s}  {'(GB/s)':>6s}  {'':>6s} {'%Y-%m-%d %H:%M:%S':>19s}",
    ]
    size = 8
    second = 10
    while size <= 1024:
        line = preamble(size, size // 4, "float", "sum", -1)
        for t in (11.9 + size / 400, 11.7 + size / 410):
            alg, bus = bandwidths(size, t, 2)
            line += body(t, alg, bus, None)
        out.append(line + f"{f'2025-11-03 09:15:{second:02d}':>21s}")
        size *= 2
        second += 1
    out += ["# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 0.0214 ", "#", ""]
    return "\n".join(out) + "\n"


def minimal_float_sizes() -> str:
    """A header-and-rows-only table with sizes printed as floats and a time in exponent form."""
    out = [
        "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       ",
    ]
    for size, t in ((1024.0, 35.2), (66132.0, 48.9), (1.2e05, 60.1), (1.6777216e07, 1.2e05)):
        alg, bus = bandwidths(int(size), t, 4)
        s_txt = f"{size:.1e}" if size == 1.2e05 else f"{size:.1f}"
        t_txt = "1.2e+05" if t == 1.2e05 else float_str(t, 7)
        line = f"{s_txt:>12s}  {int(size) // 4:12d}  {'float':>8s}  {'sum':>6s}  {-1:6d}"
        line += f"  {t_txt:>7s}  {float_str(alg, 6):>6s}  {float_str(bus, 6):>6s}  {0:6g}" * 2
        out.append(line)
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------ repeated headers (no MPI)


def _single_rank_run(pid: int, host: str) -> list[str]:
    lines = [
        "# nThread 1 nGpus 1 minBytes 1048576 maxBytes 67108864 step: 2(factor) warmup iters: 5 iters: 20 "
        "agg iters: 1 validation: 1 graph: 0",
        "#",
        "# Using devices",
        f"#  Rank  0 Group  0 Pid {pid:6d} on {host:>10s} device  0 [0x18] NVIDIA A100-SXM4-80GB",
        "#",
        "#                                                              out-of-place                       in-place          ",
        "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       ",
    ]
    rng = random.Random(pid)
    size = 1048576
    while size <= 67108864:
        t_out = (9.5 + size / 1.6e5) * (7.2 + rng.random())  # 8 processes share GPU 0
        t_in = 0.45 + rng.random() * 0.1  # one rank in place: nothing to move
        line = preamble(size, size // 4, "float", "sum", -1)
        for t in (t_out, t_in):
            alg, _ = bandwidths(size, t, 1)
            line += body(t, alg, 0.0, 0)
        lines.append(line)
        size *= 2
    lines += ["# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 0 ", "#"]
    return lines


def _interleave(streams: list[list[str]], seed: int) -> list[tuple[int, str]]:
    """Merge per-process line streams the way a launcher forwards them: in order per process."""
    rng = random.Random(seed)
    pos = [0] * len(streams)
    merged = []
    while any(p < len(s) for p, s in zip(pos, streams, strict=True)):
        live = [i for i, s in enumerate(streams) if pos[i] < len(s)]
        i = rng.choice(live)
        merged.append((i, streams[i][pos[i]]))
        pos[i] += 1
    return merged


def no_mpi_tagged() -> str:
    streams = [_single_rank_run(52101 + r, "dgx-a17") for r in range(8)]
    return "\n".join(f"[1,{r}]<stdout>:{line}" for r, line in _interleave(streams, 11)) + "\n"


def no_mpi_untagged() -> str:
    head = "Warning: Permanently added '[10.0.0.15]:9001' (ED25519) to the list of known hosts.\n"
    streams = [_single_rank_run(798, "hw14"), _single_rank_run(1240, "hw15")]
    return head + "\n".join(line for _, line in _interleave(streams, 5)) + "\n"


# ------------------------------------------------------------------ -J JSON


def nccl_json(truncate: bool = False) -> str:
    devices = []
    for line in A3MEGA.read_text().splitlines():
        if line.startswith("#  Rank"):
            tok = line.split()
            devices.append(
                {
                    "rank": int(tok[2]),
                    "group": int(tok[4]),
                    "pid": int(tok[6]),
                    "hostname": tok[8],
                    "device": int(tok[10]),
                    "device_hex": tok[11].strip("[]"),
                    "device_info": " ".join(tok[12:]),
                }
            )
    results = []
    for size, count, t_out, t_in in a3mega_rows():
        rec: dict[str, object] = {
            "size": size,
            "count": count,
            "type": "float",
            "redop": "sum",
            "root": "    -1",
        }
        for key, t in (("out_of_place", t_out), ("in_place", t_in)):
            alg, bus = bandwidths(size, t, 16)
            rec[key] = {"time": t, "alg_bw": alg, "bus_bw": bus, "nwrong": 0.0}
        rec["actual_iterations"] = 20
        rec["experiment_name"] = ""
        results.append(rec)
    doc = {
        "version": 2,
        "start_time": "2024-05-16 21:40:02",
        "args": [
            "/third_party/nccl-tests/build/all_reduce_perf",
            "-b",
            "8",
            "-e",
            "8G",
            "-f",
            "2",
            "-g",
            "1",
            "-J",
            "/tmp/all_reduce.json",
        ],
        "env": ["NCCL_DEBUG=WARN", "NCCL_FASTRAK_USE_SNAP=1", "OMPI_COMM_WORLD_SIZE=16"],
        "nccl_version": 21903,
        "config": {
            "nthreads": 1,
            "ngpus": 1,
            "minimum_bytes": 8,
            "maximum_bytes": 8589934592,
            "step_factor": 2,
            "warmup_iters": 5,
            "iterations": 20,
            "aggregated_iterations": 1,
            "validation": 1,
            "graph": 0,
            "blocking_collectives": "false",
            "per_iter_timing": "false",
            "parallel_init": "false",
            "devices": devices,
        },
        "results": results,
        "out_of_bounds": {"count": 0, "okay": "true"},
        "average_bus_bandwidth": {"bandwidth": 70.742, "okay": "unchecked"},
        "errors": [],
        "end_time": "2024-05-16 21:40:31",
    }
    # the writer prints compact JSON with %lf doubles (6 decimals) and no newline
    text = json.dumps(doc, separators=(",", ":"))
    text = _six_decimals(text, doc)
    if truncate:
        cut = text.index('"size":1073741824')
        text = text[: cut + 60]  # the process died mid-record; the writer never closed the document
    return text


def _six_decimals(text: str, doc: dict[str, object]) -> str:
    import re

    def fmt(m: re.Match[str]) -> str:
        return f"{float(m.group(1)):.6f}"

    return re.sub(r"(?<=[:,\[])(-?\d+\.\d+(?:e[-+]?\d+)?)(?=[,}\]])", fmt, text)


# ------------------------------------------------------------------ sacct --json


def sacct_json() -> str:
    def num(n: int | float | None, infinite: bool = False) -> dict[str, object]:
        return {"set": n is not None, "infinite": infinite, "number": n if n is not None else 0}

    def code(rc: int, status: str, signal: int | None = None) -> dict[str, object]:
        return {
            "status": [status],
            "return_code": num(rc),
            "signal": {"id": num(signal), "name": "" if signal is None else "KILL"},
        }

    def tres(cpu: int, mem: int, nodes: int, gpus: int) -> list[dict[str, object]]:
        t = [
            {"type": "cpu", "name": "", "id": 1, "count": cpu},
            {"type": "mem", "name": "", "id": 2, "count": mem},
            {"type": "node", "name": "", "id": 4, "count": nodes},
            {"type": "billing", "name": "", "id": 5, "count": cpu},
        ]
        if gpus:
            t.append({"type": "gres", "name": "gpu", "id": 1001, "count": gpus})
        return t

    def step(
        job: int,
        sid: str,
        name: str,
        start: int,
        end: int,
        nodes: str,
        n: int,
        tasks: int,
        state: str,
        rc: int,
    ) -> dict[str, object]:
        return {
            "time": {
                "elapsed": end - start,
                "end": num(end),
                "start": num(start),
                "suspended": 0,
                "system": {"seconds": 3, "microseconds": 0},
                "limit": num(None),
                "total": {"seconds": 40, "microseconds": 0},
                "user": {"seconds": 37, "microseconds": 0},
            },
            "exit_code": code(rc, "SUCCESS" if rc == 0 else "ERROR"),
            "nodes": {"count": n, "range": nodes, "list": []},
            "tasks": {"count": tasks},
            "pid": "",
            "CPU": {"requested_frequency": {"min": num(None), "max": num(None)}, "governor": ""},
            "kill_request_user": "",
            "state": [state],
            "statistics": {"CPU": {"actual_frequency": 0}, "energy": {"consumed": num(0)}},
            "step": {"id": f"{job}.{sid}", "name": name},
            "task": {"distribution": "Block"},
            "tres": {
                "requested": {"max": [], "min": [], "average": [], "total": []},
                "consumed": {"max": [], "min": [], "average": [], "total": []},
                "allocated": tres(32 * n, 64000 * n, n, 8 * n),
            },
        }

    def job(
        jid: int,
        name: str,
        state: str,
        reason: str,
        start: int,
        end: int,
        nodes: str,
        n: int,
        gpus: int,
        rc: int,
        steps: list[dict[str, object]],
    ) -> dict[str, object]:
        return {
            "account": "ml",
            "comment": {"administrator": "", "job": "", "system": ""},
            "allocation_nodes": n,
            "array": {
                "job_id": 0,
                "limits": {"max": {"running": {"tasks": 0}}},
                "task_id": num(None),
                "task": "",
            },
            "association": {"account": "ml", "cluster": "lab", "partition": "gpu", "user": "alice", "id": 7},
            "block": "",
            "cluster": "lab",
            "constraints": "",
            "container": "",
            "derived_exit_code": code(0, "SUCCESS"),
            "time": {
                "elapsed": end - start,
                "eligible": start - 5,
                "end": end,
                "planned": num(5),
                "start": start,
                "submission": start - 5,
                "suspended": 0,
                "system": {"seconds": 12, "microseconds": 0},
                "limit": num(120),
                "total": {"seconds": 900, "microseconds": 0},
                "user": {"seconds": 888, "microseconds": 0},
            },
            "exit_code": code(rc, "SUCCESS" if rc == 0 else "ERROR"),
            "extra": "",
            "failed_node": "",
            "flags": ["STARTED_ON_SCHEDULE"],
            "group": "alice",
            "het": {"job_id": 0, "job_offset": num(None)},
            "job_id": jid,
            "name": name,
            "licenses": "",
            "mcs": {"label": ""},
            "nodes": nodes,
            "partition": "gpu",
            "hold": False,
            "priority": num(4294901700),
            "qos": "normal",
            "required": {"CPUs": 32 * n, "memory_per_cpu": num(None), "memory_per_node": num(64000)},
            "kill_request_user": "",
            "restart_cnt": 0,
            "reservation": {"id": 0, "name": ""},
            "script": "",
            "state": {"current": [state], "reason": reason},
            "steps": steps,
            "submit_line": f"sbatch -N {n} --gpus-per-node=8 {name}.sbatch",
            "tres": {
                "allocated": tres(32 * n, 64000 * n, n, gpus),
                "requested": tres(32 * n, 64000 * n, n, gpus),
            },
            "used_gres": "",
            "user": "alice",
            "wckey": {"wckey": "", "flags": []},
            "working_directory": "/home/alice",
        }

    t0 = 1762170000
    jobs = [
        job(
            4101,
            "nccl-allreduce",
            "COMPLETED",
            "None",
            t0,
            t0 + 95,
            "gpu-a[01-02]",
            2,
            16,
            0,
            [
                step(4101, "batch", "batch", t0, t0 + 95, "gpu-a01", 1, 1, "COMPLETED", 0),
                step(4101, "extern", "extern", t0, t0 + 95, "gpu-a[01-02]", 2, 2, "COMPLETED", 0),
                step(4101, "0", "all_reduce_perf_mpi", t0 + 4, t0 + 93, "gpu-a[01-02]", 2, 16, "COMPLETED", 0),
            ],
        ),
        job(
            4102,
            "llama3-8b",
            "FAILED",
            "NonZeroExitCode",
            t0 + 200,
            t0 + 3790,
            "gpu-a[01-04]",
            4,
            32,
            1,
            [
                step(4102, "batch", "batch", t0 + 200, t0 + 3790, "gpu-a01", 1, 1, "FAILED", 1),
                step(4102, "0", "python", t0 + 210, t0 + 3788, "gpu-a[01-04]", 4, 32, "FAILED", 1),
            ],
        ),
    ]
    doc = {
        "meta": {
            "plugin": {
                "type": "",
                "name": "",
                "data_parser": "data_parser/v0.0.41",
                "accounting_storage": "accounting_storage/slurmdbd",
            },
            "client": {"source": "/dev/pts/1", "user": "alice", "group": "alice"},
            "command": ["sacct", "--json", "-j", "4101,4102"],
            "slurm": {
                "version": {"major": "24", "micro": "5", "minor": "05"},
                "release": "24.05.5",
                "cluster": "lab",
            },
        },
        "jobs": jobs,
        "warnings": [],
        "errors": [],
    }
    return json.dumps(doc, indent=2) + "\n"


FILES = {
    "handmade-nccl-tests-2.18-I1-S1-per-iteration-timestamps.txt": per_iter_timestamps,
    "handmade-nccl-tests-S1-timestamps-no-validation.txt": timestamps_only,
    "handmade-nccl-tests-minimal-table-float-sizes.txt": minimal_float_sizes,
    "handmade-nccl-tests-no-mpi-8-single-rank-runs-tagged.txt": no_mpi_tagged,
    "handmade-nccl-tests-no-mpi-2-runs-untagged-interleaved.txt": no_mpi_untagged,
    "handmade-nccl-tests-J-json-a3mega-numbers.json": nccl_json,
    "handmade-nccl-tests-J-json-truncated.json": lambda: nccl_json(truncate=True),
    "handmade-sacct-json-slurm24.05-data_parser-v0.0.41.json": sacct_json,
}


def main() -> None:
    for name, make in FILES.items():
        (HERE / name).write_text(make())


if __name__ == "__main__":
    main()
