"""Parser throughput against pandas.read_csv on the same rows, side by side in one run.

Generates about --size-mb of realistic logs per family by repeating the real samples of
tests/data/results with perturbed numbers (nccl-tests of every era, NeMo 2 step lines, NeMo 1 tqdm
refreshes), parses them with hpckit.results, writes the parsed rows as CSV and times
pandas.read_csv on that CSV.  Prints MB/s and rows/s for both and the ratios; appends a section to
benchmarks/RESULTS.md unless --no-record.

    .venv/bin/python benchmarks/bench_parse.py [--size-mb 100] [--repeat 5] [--no-record]
    .venv/bin/python benchmarks/bench_parse.py --memory [--memory-gb 1] [--no-record]

Target: parser MB/s >= 0.5 x read_csv MB/s.

--memory: 1 GB log files (nccl-tests short runs, long runs, NeMo 2), each parsed by parse_file in
a fresh process: wall time and peak RSS (VmHWM) against the file's size, beside read_csv of
the parsed rows as CSV in a fresh process (twice each, alternated: best time, highest peak);
and a 2 GB sparse file, which must be refused at once.
Target: peak RSS (VmHWM) <= 2x the file size.  With --before DIR (an older checkout's folder holding
hpckit/) the same files are parsed by that code too.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks._record import record  # noqa: E402  (after the path is set)
from hpckit.results import parse_text  # noqa: E402

DATA = REPO / "tests" / "data" / "results"
RESULTS = REPO / "benchmarks" / "RESULTS.md"
DECIMAL = re.compile(r"(?<![\w.])(\d+)\.(\d+)(?![\w.])")


# ---------------------------------------------------------------- realistic inputs


def _perturb_decimals(line: str, rng: random.Random) -> str:
    """Scale every fixed-point number by a few percent, keeping its printed width and decimals."""

    def scale(m: re.Match[str]) -> str:
        decimals = len(m.group(2))
        value = float(m.group(0)) * rng.uniform(0.95, 1.05)
        text = f"{value:.{decimals}f}"
        return text.rjust(len(m.group(0))) if len(text) < len(m.group(0)) else text

    return DECIMAL.sub(scale, line)


def nccl_logs(size: int, rng: random.Random) -> str:
    """Real nccl-tests logs of every era, one after another, rows perturbed, until `size` bytes."""
    samples = [p.read_text() for p in sorted(DATA.glob("all_*.txt"))]
    parts: list[str] = []
    total = 0
    while total < size:
        text = rng.choice(samples)
        lines = [_perturb_decimals(ln, rng) if ln.lstrip()[:1].isdigit() else ln for ln in text.split("\n")]
        chunk = "\n".join(lines)
        if not chunk.endswith("\n"):
            chunk += "\n"
        parts.append(chunk)
        total += len(chunk)
    return "".join(parts)


def nccl_long_runs(size: int, rng: random.Random) -> str:
    """The same samples, each sweep repeated as `-N` (run_cycles) prints it: few runs, many rows."""
    samples = [p.read_text() for p in sorted(DATA.glob("all_*.txt"))]
    parts: list[str] = []
    total = 0
    while total < size:
        lines = rng.choice(samples).split("\n")
        rows = [i for i, ln in enumerate(lines) if _is_row(ln)]
        if not rows:
            continue
        cycles = [_perturb_decimals(lines[i], rng) for _ in range(60) for i in rows]
        chunk = "\n".join(lines[: rows[0]] + cycles + lines[rows[-1] + 1 :]) + "\n"
        parts.append(chunk)
        total += len(chunk)
    return "".join(parts)


def _is_row(line: str) -> bool:
    body = line.split(">:", 1)[-1].lstrip()
    body = body.split(": ", 1)[1] if body[:1].isdigit() and ": " in body[:6] else body
    return body[:1].isdigit() and body.split(" ", 1)[0].isdigit() and len(body.split()) > 8


def nemo2_log(size: int, rng: random.Random) -> str:
    """NeMo 2 step lines in the real b200 sample's format, values drifting, a little noise."""
    template = (DATA / "nemo2-b200-llama3-8b-pretrain-iterations-45-49.txt").read_text().split("\n")[0]
    head, *segments = template.split(" | ")
    keys = [seg.split(": ", 1)[0] for seg in segments]
    base = {seg.split(": ", 1)[0]: float(seg.split(": ", 1)[1]) for seg in segments}
    out: list[str] = []
    total, step = 0, 0
    while total < size:
        values = {
            "lr": f"{base['lr'] * (1 + step * 1e-4):.4g}",
            "global_batch_size": "128",
            "global_step": str(step),
            "max_memory_reserved": str(int(base["max_memory_reserved"])),
            "max_memory_allocated": str(int(base["max_memory_allocated"] * rng.uniform(0.999, 1.0))),
            "reduced_train_loss": f"{max(11.96 - step * 1e-5, 1.0):.4g}",
            "train_step_timing in s": f"{base['train_step_timing in s'] * rng.uniform(0.98, 1.03):.4g}",
            "TFLOPS_per_GPU": f"{base['TFLOPS_per_GPU'] * rng.uniform(0.97, 1.02):.4g}",
            "consumed_samples": str(128 * (step + 1)),
        }
        line = f"Training epoch 0, iteration {step}/999999 | " + " | ".join(f"{k}: {values[k]}" for k in keys)
        if step % 500 == 0:
            line += "\n[NeMo I 2025-10-01 12:00:00 nemo_logging:381] saving checkpoint"
        out.append(line)
        total += len(line) + 1
        step += 1
    del head
    return "\n".join(out) + "\n"


def nemo1_log(size: int, rng: random.Random) -> str:
    """NeMo 1 tqdm refreshes (two per step, carriage-return separated) as in the a3mega sample."""
    bar = "Epoch 0: :  47%|████▋     | {n}/99999 [06:19<07:13, reduced_train_loss={loss:.3f}, "
    bar += "global_step={step}.0, consumed_samples={samples}.0, train_step_timing in s={t:.2f}]"
    out: list[str] = []
    total, step = 0, 0
    while total < size:
        t = 49.5 * rng.uniform(0.97, 1.03)
        refresh = bar.format(n=step + 1, loss=11.5 - step * 1e-5, step=step, samples=2048 * (step + 1), t=t)
        piece = refresh + "\r" + refresh + ("\n" if step % 1000 == 999 else "\r")
        out.append(piece)
        total += len(piece)
        step += 1
    return "".join(out) + "\n"


# ---------------------------------------------------------------- timing


@dataclass
class Row:
    name: str
    log_mb: float
    rows: int
    parse_s: float  # best of the repeats
    csv_mb: float
    read_csv_s: float  # best of the repeats
    ratios: list[float]  # MB/s ratio of each (parse, read_csv) pair, timed back to back

    @property
    def parse_mbs(self) -> float:
        return self.log_mb / self.parse_s

    @property
    def csv_mbs(self) -> float:
        return self.csv_mb / self.read_csv_s

    @property
    def ratio(self) -> float:
        """Median over back-to-back pairs: on a shared machine both sides then see the same load."""
        return statistics.median(self.ratios)

    @property
    def rows_ratio(self) -> float:
        return self.read_csv_s / self.parse_s


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def measure(name: str, kind: str, text: str, repeat: int) -> Row:
    log_mb = len(text.encode()) / 1e6
    _, result = timed(lambda: parse_text(text, kind))  # warm-up, and the rows for the CSV
    frame = result.frame.drop(columns=["line"], errors="ignore")  # type: ignore[attr-defined]
    csv = frame.to_csv(index=False)
    csv_mb = len(csv.encode()) / 1e6
    parse_times, read_times, ratios = [], [], []
    for _ in range(repeat):
        parse_s, _ = timed(lambda: parse_text(text, kind))
        read_s, back = timed(lambda: pd.read_csv(io.StringIO(csv)))
        assert len(back) == len(frame)  # type: ignore[arg-type]
        parse_times.append(parse_s)
        read_times.append(read_s)
        ratios.append((log_mb / parse_s) / (csv_mb / read_s))
    return Row(name, log_mb, len(frame), min(parse_times), csv_mb, min(read_times), ratios)


# ---------------------------------------------------------------- report


def machine() -> str:
    cpuinfo = Path("/proc/cpuinfo").read_text().splitlines()
    cpu = next((ln.split(":", 1)[1].strip() for ln in cpuinfo if "model name" in ln), platform.processor())
    meminfo = Path("/proc/meminfo").read_text().splitlines()
    mem_kb = next((int(ln.split()[1]) for ln in meminfo if ln.startswith("MemTotal")), 0)
    load = os.getloadavg()[0]
    return (
        f"nproc {os.cpu_count()}, {cpu or 'unknown CPU'}, {mem_kb / 1048576:.0f} GiB RAM, "
        f"load average {load:.1f} at the start; Python {platform.python_version()}, pandas {pd.__version__}"
    )


def table(rows: list[Row]) -> str:
    lines = [
        "| log | log MB | rows | parser MB/s | read_csv MB/s (CSV MB) | MB/s ratio | rows/s ratio |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r.name} | {r.log_mb:.1f} | {r.rows:,} | {r.parse_mbs:.1f} | "
            f"{r.csv_mbs:.1f} ({r.csv_mb:.1f}) | {r.ratio:.2f} | {r.rows_ratio:.2f} |"
        )
    return "\n".join(lines)


def record_results(rows: list[Row], size_mb: float, repeat: int) -> None:
    body = (
        "## Parsing throughput vs pandas.read_csv (`benchmarks/bench_parse.py`)\n\n"
        f"Machine: {machine()}.\n"
        f"Input: ~{size_mb:g} MB per log family generated from the real samples; best of {repeat} runs.\n"
        "MB/s columns: best of the runs. MB/s ratio = parser MB/s on the log / read_csv MB/s on the "
        "parsed rows written as CSV, median over back-to-back pairs (target >= 0.5); rows/s ratio = "
        "best read_csv time / best parser time for the same rows.\n\n"
        f"{table(rows)}\n\n{NOTES}"
    )
    record("parse", body)


NOTES = """How each parser reads its log: `parse_file` feeds it the file 16 MiB at a time (whole lines).
Every family has its exact parser, the reference (`--exact`, HPCKIT_RESULTS_EXACT=1), and its fast
paths, all behind one seam (hpckit/results/speed.py), each in the file of its exact twin; a fast path
declines anything it cannot read exactly, and the tests compare both modes on every sample, long
logs and hypothesis mutants, and fail when a fast path stops running. The fast paths kept, each
because this table needs it (parse time exact / fast on 10 MB of each log, same box and day:
nccl-scan 2.0x on short runs, nccl-rows with it 13.7x on long runs, pipe-steps 4.7x, tqdm-steps 8.6x):
- nccl-tests, `nccl-scan`: Arrow splits a chunk into lines and RE2 tests each for a row; the other
  lines are dictionary-encoded and each distinct one tested once for a `#` start, a device line
  and a header line (the triggers are built from the header rule table); numpy cuts the runs of
  rows and of device lines: the blocks the scan regex finds, which still reads non-ASCII text.
- nccl-tests, `nccl-rows`: the rows of all runs with one layout are cut and cast by Arrow kernels
  (split on ASCII blanks, every row must give the layout's count of tokens, token j of every row
  taken through string views, cast as int()/float() read them; `N/A` as NaN; text
  dictionary-encoded into categoricals); a block it declines is read row by row. (pandas' C
  reader, the second bulk reader before, was removed: Arrow reads what it read.)
- NeMo 2 / Megatron, `pipe-steps`: step lines picked by the marker in RE2, then one Arrow CSV read
  per block of 32,768 lines cuts heads, labels and values (a `|` written after every `:`, exact
  when every line has the first line's count of `:` in each piece and its labels; a head or value
  holding `:` is put back together); the step-marker fields are extracted by RE2. (Python's line
  picking, two other cuts of the pieces and the digit-run reading of the step markers were
  removed; the last saved about 10% of NeMo 2's time when measured, 8-28% of its CPU time here.)
- NeMo 1, `tqdm-steps`: redraw pieces split by Arrow, repeats dropped, each piece's head tested
  against TQDM's part before `[` in RE2; the `k=v` postfixes read like NeMo 2's pieces. The rare
  shapes (a pager's `^M`/`[A` redraws, a repeated refresh with NaN samples) are left to the exact
  parser: the second passes that read them fast were removed.
- The cyclic garbage collector is paused and numpy's huge pages are off while a parser runs
  (many small objects, no cycles; a fault on a madvised huge page may stall on compaction).
Where the time goes: nccl-tests short runs in the Python work per block and header line and the
row test; long runs in reading the rows (Arrow's whitespace split, casts) and the numpy columns of
~1.7 million frame rows per 100 MB; NeMo 2 in the line split and marker test and the CSV reads.
Timings swing 2-3x on a shared machine; the back-to-back pairs are the fairer figure.
"""


# ---------------------------------------------------------------- memory on 1 GB files

# VmHWM, not ru_maxrss: Linux keeps ru_maxrss across exec, so a child would report the parent's peak
CHILD = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
def rss(key="VmRSS:"):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024
import pandas as pd
from hpckit.results import parse_file
mode, path, kind = sys.argv[2:5]
base = rss()
start = time.perf_counter()
try:
    rows = len(parse_file(path, kind).frame) if mode == "parse" else len(pd.read_csv(path))
    error = ""
except Exception as exc:
    rows, error = 0, str(exc)[:160]
seconds = time.perf_counter() - start
peak = rss("VmHWM:")
print(json.dumps({"s": seconds, "base": base, "peak": peak, "rows": rows, "error": error}))
"""


def child(code_dir: Path, mode: str, path: Path, kind: str) -> dict[str, object]:
    """One parse (or read_csv) in a fresh process: its time, RSS before and peak RSS."""
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(code_dir), mode, str(path), kind], capture_output=True, text=True, check=True
    )
    found: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return found


def write_log(path: Path, make: Callable[[int, random.Random], str], size: int, rng: random.Random) -> None:
    """A log of ``size`` bytes: a 100 MB piece generated once and written again and again (the
    NeMo 2 generator numbers its steps: it writes the whole size, so that steps never repeat)."""
    with open(path, "w") as out:
        if make is nemo2_log:
            out.write(make(size, rng))
            return
        piece = make(min(size, 100_000_000), rng)
        for _ in range(max(1, round(size / len(piece)))):
            out.write(piece)


def write_csv(log: Path, kind: str, csv: Path) -> None:
    """The parsed rows as CSV (written by Arrow: pandas' writer would take minutes for 1 GB)."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    from hpckit.results import parse_file

    frame = parse_file(log, kind).frame.drop(columns=["line"], errors="ignore")
    for name in frame.columns:
        if isinstance(frame[name].dtype, pd.CategoricalDtype) or frame[name].dtype == object:
            frame[name] = frame[name].astype(str)
    pacsv.write_csv(pa.Table.from_pandas(frame, preserve_index=False), csv)


@dataclass
class MemRow:
    name: str
    log_gb: float
    parse: dict[str, object]
    read_csv: dict[str, object]
    csv_gb: float
    before: dict[str, object] | None

    def cells(self) -> list[str]:
        p, r = self.parse, self.read_csv
        ratio = (self.log_gb / float(p["s"])) / (self.csv_gb / float(r["s"]))  # type: ignore[arg-type]
        cells = [self.name, f"{self.log_gb:.2f}", f"{p['rows']:,}", f"{float(p['s']):.1f}"]  # type: ignore[arg-type]
        cells += [_times(p["peak"], self.log_gb), _times(int(p["peak"]) - int(p["base"]), self.log_gb)]  # type: ignore[call-overload]
        cells += [f"{float(r['s']):.1f}", _times(r["peak"], self.csv_gb), f"{ratio:.2f}"]  # type: ignore[arg-type]
        if self.before is not None:
            b = self.before
            cells += [f"{float(b['s']):.1f}", _times(b["peak"], self.log_gb)]  # type: ignore[arg-type]
        return cells


def _times(peak: object, gb: float) -> str:
    return f"{int(peak) / 1e9:.2f} GB ({int(peak) / 1e9 / gb:.2f}x)"  # type: ignore[call-overload]


def measure_memory(size: int, folder: Path, before: Path | None, rng: random.Random) -> list[MemRow]:
    cases: list[tuple[str, str, Callable[[int, random.Random], str]]] = [
        ("nccl-tests, short runs back to back", "nccl-tests", nccl_logs),
        ("nccl-tests, long runs (-N cycles)", "nccl-tests", nccl_long_runs),
        ("NeMo 2 step lines", "nemo2", nemo2_log),
    ]
    rows = []
    for name, kind, make in cases:
        log, csv = folder / f"{kind}.log", folder / f"{kind}.csv"
        write_log(log, make, size, rng)
        write_csv(log, kind, csv)
        # two of each, alternated: the best time and the highest peak count
        pairs = [(child(REPO, "parse", log, kind), child(REPO, "read_csv", csv, kind)) for _ in range(2)]
        parse, read = _best([p for p, _ in pairs]), _best([r for _, r in pairs])
        old = child(before, "parse", log, kind) if before is not None else None
        rows.append(MemRow(name, log.stat().st_size / 1e9, parse, read, csv.stat().st_size / 1e9, old))
        print(" | ".join(rows[-1].cells()), flush=True)
        log.unlink()
        csv.unlink()
    return rows


def _best(runs: list[dict[str, object]]) -> dict[str, object]:
    """The fastest run's figures, with the highest peak of them all (a peak is not noise)."""
    fastest = min(runs, key=lambda r: float(r["s"]))  # type: ignore[arg-type]
    return dict(fastest, peak=max(int(r["peak"]) for r in runs))  # type: ignore[call-overload]


def measure_sparse(folder: Path, before: Path | None) -> list[tuple[str, dict[str, object]]]:
    sparse = folder / "sparse.log"
    with open(sparse, "wb") as handle:
        handle.truncate(2 << 30)
    found = [("this code", child(REPO, "parse", sparse, "auto"))]
    if before is not None:
        found.append(("before", child(before, "parse", sparse, "auto")))
    sparse.unlink()
    return found


def memory_table(rows: list[MemRow], before: bool) -> str:
    head = "| log | GB | rows | parse s | peak RSS | peak - RSS before | read_csv s | read_csv peak RSS | MB/s ratio |"
    rule = "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
    if before:
        head += " before: parse s | before: peak RSS |"
        rule += "---:|---:|"
    return "\n".join([head, rule, *("| " + " | ".join(r.cells()) + " |" for r in rows)])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=float, default=100.0, help="log size per family (default 100)")
    ap.add_argument("--repeat", type=int, default=5, help="back-to-back pairs per log; best and median count")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-record", action="store_true", help="do not append to benchmarks/RESULTS.md")
    ap.add_argument("--memory", action="store_true", help="peak memory and time on 1 GB files instead")
    ap.add_argument("--memory-gb", type=float, default=1.0, help="log size for --memory (default 1)")
    ap.add_argument("--before", type=Path, help="with --memory: a folder holding an older hpckit/ to compare")
    args = ap.parse_args()
    if args.memory:
        main_memory(args)
        return
    size = int(args.size_mb * 1e6)
    rng = random.Random(args.seed)
    cases: list[tuple[str, str, Callable[[int, random.Random], str]]] = [
        ("nccl-tests, short runs back to back (all eras, INFO noise)", "nccl-tests", nccl_logs),
        ("nccl-tests, long runs (sweeps repeated as -N cycles)", "nccl-tests", nccl_long_runs),
        ("NeMo 2 step lines", "nemo2", nemo2_log),
        ("NeMo 1 tqdm refreshes", "nemo1", nemo1_log),
    ]
    rows = []
    for name, kind, make in cases:
        rows.append(measure(name, kind, make(size, rng), args.repeat))
        print(table(rows[-1:]).splitlines()[-1], flush=True)
    print()
    print(machine())
    print(table(rows))
    if not args.no_record:
        record_results(rows, args.size_mb, args.repeat)
        print(f"\nappended to {RESULTS.relative_to(REPO)}")


def main_memory(args: argparse.Namespace) -> None:
    rng = random.Random(args.seed)
    where = machine()
    with tempfile.TemporaryDirectory(prefix="bench-parse-") as tmp:
        rows = measure_memory(int(args.memory_gb * 1e9), Path(tmp), args.before, rng)
        sparse = measure_sparse(Path(tmp), args.before)
    end_load = os.getloadavg()[0]
    lines = [
        f"- 2 GiB sparse file, {who}: {float(r['s']):.2f} s, peak RSS {int(r['peak']) / 1e9:.2f} GB: "  # type: ignore[arg-type, call-overload]
        f"{r['error'] or 'not refused'}"
        for who, r in sparse
    ]
    body = (
        "## Parse memory on 1 GB logs (`benchmarks/bench_parse.py --memory`)\n\n"
        f"Machine: {where}; load average {end_load:.1f} at the end.\n"
        "Each log file is parsed by `parse_file` in a fresh process (peak RSS = VmHWM, Python, pandas and "
        "pyarrow included; 'peak - RSS before' leaves out what the imports hold), and its rows, written as "
        "CSV, are read by `pandas.read_csv` in a fresh process; twice each, alternated (best time, highest "
        f"peak).{BEFORE if args.before is not None else ''} Target: peak RSS <= 2x the file size, "
        "MB/s ratio (parser MB/s on the log / read_csv MB/s on the CSV) >= 0.5.\n\n"
        f"{memory_table(rows, args.before is not None)}\n\n" + "\n".join(lines) + "\n\n" + MEMORY_NOTES
    )
    print(body)
    if not args.no_record:
        record("parse-memory", body)


BEFORE = " The 'before' columns: the code in --before (older hpckit), once."
MEMORY_NOTES = """How: `parse_file` reads the file 16 MiB at a time, cut after a line end, and each parser takes
a chunk at a time (nccl-tests: the scan state carries over, each chunk's rows become columns at
once and its text is dropped; NeMo: each chunk's step lines become a frame); the frame is built
once at the end, each column's pieces freed as soon as the column is made. What stays is about
the frame itself: the long-runs log is the worst case, with 1.7 million frame rows per 100 MB
(about 80 bytes a row). A file with NUL bytes in its first MiB is refused before any parsing, and
a line longer than 64 MiB where it starts.
"""


if __name__ == "__main__":
    main()
