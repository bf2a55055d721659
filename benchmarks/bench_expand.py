"""`hpckit expand` at 1,008 and 10,000 nodes (partitions of 16 nodes x 8 H100 SXM, 8 NDR HCAs each), side by side.

Target: the inventory and variables of 10,000 nodes in <= 2 s (blueprint parse, build, both files written), and
linear in hosts (10,000 / 1,008 close to 10). Also timed: rendering every config (slurm.conf, gres.conf, cgroup.conf,
nccl.conf, ... per partition) from the roles' templates. Medians of --runs, each step in the same process;
wall time and this process's CPU time (the machine is shared: CPU time is what the code costs).

With --against REF, git revision REF's hpckit/ and benchmarks/ (extracted into a temporary folder, run in a
process of their own) are measured first, then this checkout's: before and after in one run.

Run: python benchmarks/bench_expand.py [--runs 3] [--against REF] [--no-record]
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

# The tree whose code is measured: this checkout, or (for --against) an older revision extracted beside it.
sys.path.insert(0, os.environ.get("HPCKIT_BENCH_TREE") or str(Path(__file__).resolve().parent.parent))

from benchmarks._record import record
from benchmarks.bench_blueprint import many_partitions
from hpckit.blueprint import parse_blueprint
from hpckit.deploy.expand import expand
from hpckit.slurm import conf

REPO = Path(__file__).resolve().parent.parent
TREE = Path(os.environ.get("HPCKIT_BENCH_TREE") or REPO)
SHAPES = ((63, "1,008"), (625, "10,000"))


Timing = tuple[float, float, float]  # wall, CPU (user + system), system: seconds


def timed(step: Callable[[int], Any], runs: int) -> Timing:
    """Median wall, CPU and system seconds of `step` (given the run's number). The system part is the kernel's:
    on this box creating a file and its folder costs ~1 ms of it, whatever the Python does."""
    wall, cpu, system = [], [], []
    for n in range(runs):
        _forget()
        w, t = time.perf_counter(), os.times()
        step(n)
        done = os.times()
        wall.append(time.perf_counter() - w)
        cpu.append(done.user + done.system - t.user - t.system)
        system.append(done.system - t.system)
    return statistics.median(wall), statistics.median(cpu), statistics.median(system)


def _forget() -> None:
    """Each run starts as a new command would, but for what a process reads once (templates compiled, role
    files, Ansible's filters): the hostlists remembered within one expand are not kept across runs."""
    collect = getattr(conf, "_collect", None)  # (not in older trees)
    if collect is not None:
        collect.cache_clear()


def command(text: str, runs: int, tmp: Path) -> Timing:
    """`hpckit expand` as a user runs it, in a process of its own: interpreter, imports and all; wall and the
    child's CPU time."""
    (tmp / "big.yaml").write_text(text)
    wall, cpu, system = [], [], []
    for n in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        argv = [sys.executable, "-m", "hpckit", "expand", str(tmp / "big.yaml"), "-o", str(tmp / f"cmd-{n}")]
        env = {**os.environ, "PYTHONPATH": str(TREE)}
        # cwd: `python -m` puts the working folder first on the path, which would run this checkout's hpckit
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, env=env, cwd=tmp)
        wall.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        system.append(after.ru_stime - before.ru_stime)
        cpu.append(after.ru_utime - before.ru_utime + system[-1])
    return statistics.median(wall), statistics.median(cpu), statistics.median(system)


def calls(step: Callable[[], Any]) -> int:
    """Python function calls `step` makes: a measure of work that the machine's load does not move."""
    profile = cProfile.Profile()
    profile.runcall(step)
    return int(pstats.Stats(profile).total_calls)  # type: ignore[attr-defined]


def measure(parts: int, runs: int, tmp: Path) -> dict[str, Timing]:
    text = many_partitions(parts, 16)
    out: dict[str, Timing] = {}
    out["parse"] = timed(lambda _: parse_blueprint(text, "big.yaml"), runs)
    bp = parse_blueprint(text, "big.yaml")

    def vars_only(_: int = 0) -> None:
        parse_blueprint(text, "big.yaml")  # what `hpckit expand --no-configs` does, start to end
        expand(bp, tmp / f"v{parts}", configs=False)

    out["inventory + vars"] = timed(vars_only, runs)
    out["everything"] = timed(lambda n: expand(bp, tmp / f"all{parts}-{n}"), runs)  # into a new folder each run
    out["everything again"] = timed(lambda _: expand(bp, tmp / f"all{parts}-0"), runs)  # over the first one
    out["the command"] = command(text, runs, tmp)
    out["calls"] = (float(calls(vars_only)), 0.0, 0.0)
    return out


STEPS = ("parse", "inventory + vars", "everything", "everything again", "the command")
Results = dict[str, dict[str, Timing]]


def cell(timing: Sequence[float]) -> str:
    return f"{timing[0]:.2f} s ({timing[1]:.2f} CPU, {timing[2]:.2f} sys)"


def measure_all(runs: int) -> Results:
    with tempfile.TemporaryDirectory() as tmp:
        return {label: measure(parts, runs, Path(tmp)) for parts, label in SHAPES}


def measure_ref(ref: str, runs: int) -> Results:
    """REF's code measured by this script in a process of its own (so neither tree's modules meet the other's)."""
    with tempfile.TemporaryDirectory(prefix="hpckit-bench-") as tmp:
        archive = subprocess.run(["git", "archive", ref], cwd=REPO, capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
        env = {**os.environ, "HPCKIT_BENCH_TREE": tmp, "PYTHONPATH": tmp}
        argv = [sys.executable, __file__, "--runs", str(runs), "--json"]
        done = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
    found: Results = json.loads(done.stdout)
    return found


def shape_rows(results: Results) -> list[str]:
    rows = []
    for step in STEPS:
        small, big = results["1,008"][step], results["10,000"][step]
        rows.append(f"| {step} | {cell(small)} | {cell(big)} | {big[1] / small[1]:.1f} |")
    return rows


def against_rows(ref: str, before: Results, after: Results) -> str:
    head = f"| step | nodes | `{ref}` | this checkout | CPU, this / `{ref}` |\n| --- | --- | --- | --- | --- |\n"
    rows = []
    for _, label in SHAPES:
        for step in STEPS:
            old, new = before[label][step], after[label][step]
            rows.append(f"| {step} | {label} | {cell(old)} | {cell(new)} | {new[1] / old[1]:.2f} |")
    return head + "\n".join(rows) + "\n\n"


NOTES = (
    "- what the command spends at 10,000 nodes besides `everything` (profiled): ~1 s starting Python and "
    "importing (the blueprint's pydantic models are built at import), ~0.8 s parsing the blueprint (its "
    "YAML read with positions for the error messages), ~0.6 s importing Ansible's filters and compiling the "
    "templates; within `everything`: rendering ~8 templates and their conditions per partition, slurm.conf's "
    "10,000 node lines, and a 5,006-file tree\n"
    "- what this change cut: a config whose every variable read is given alike in an earlier host class is "
    "that class's rendering again, not rendered anew (the renderer records what each rendering read; 1,893 of "
    "5,637 renderings remain at 10,000 nodes: the files whose header names their hosts, and the first of each)\n"
    "- earlier: role variables templated when first read (a host class reads 1-3 of a role's dozen "
    "templates), the YAML of inventory, variables and manifest written directly (yaml.dump's Python "
    "representer took 1.9 s of 10,000 nodes; hpckit/deploy/yaml_text.py takes a tenth), each partition's "
    "hostlist collected once instead of three times; 70 % of `everything` was Ansible's deprecation "
    "machinery (the `bool` filter given a role default's untemplated text, with a DEPRECATION WARNING and "
    "a stack walk per partition) until the offline renderer templated role variables in dependency order; "
    "before that, inventory.py/gpu_vars.py re-expanded every partition for every host (10,000 nodes: 329 "
    "s)\n"
)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--against", metavar="REF", help="measure git revision REF's code first, in the same run")
    ap.add_argument("--json", action="store_true", help="print the measurements as JSON only (for --against)")
    ap.add_argument("--no-record", action="store_true")
    args = ap.parse_args()
    if args.json:
        print(json.dumps(measure_all(args.runs)))
        return
    load = [Path("/proc/loadavg").read_text().split()[0]]
    before = measure_ref(args.against, args.runs) if args.against else None
    results = measure_all(args.runs)
    load.append(Path("/proc/loadavg").read_text().split()[0])
    rows = shape_rows(results)
    print("\n".join(rows))
    compared = against_rows(args.against, before, results) if before else ""
    print(compared)
    if compared:
        compared = f"Before and after, in this run (`--against {args.against}`: its code first):\n\n{compared}"
    work = results["10,000"]["calls"][0] / results["1,008"]["calls"][0]
    vars_cpu = results["10,000"]["inventory + vars"][1]
    _, everything_cpu, everything_sys = results["10,000"]["everything"]
    command_wall = results["10,000"]["the command"][0]
    body = (
        "## `hpckit expand`, 1,008 and 10,000 nodes (`benchmarks/bench_expand.py`)\n\n"
        "Partitions of 16 nodes x 8 H100 SXM with 8 NDR HCAs (63 and 625 of them). Median of "
        f"{args.runs} runs, wall time and this process's CPU time (user + system; the system part beside it); "
        "`inventory + vars` is parse, build and both files written (`expand --no-configs`); `everything` adds "
        "every config rendered from the roles' templates (about 8 per partition), written into a new folder; "
        "`everything again` expands over the first; `the command` is `hpckit expand` in a process of its own "
        f"(interpreter, imports, parse and all). Files written under {tempfile.gettempdir()} (`TMPDIR`: a tmpfs "
        "keeps the disk's write-back out of the comparison). Load average (1 min) at the start and the end: "
        f"{', '.join(load)}.\n\n"
        "| step | 1,008 nodes | 10,000 nodes | CPU ratio |\n| --- | --- | --- | --- |\n"
        + "\n".join(rows)
        + "\n\n"
        + compared
        + f"- inventory + vars of 10,000 nodes: {vars_cpu:.2f} s of CPU (target <= 2 s): "
        f"{'ok' if vars_cpu <= 2.0 else 'MISSED'}\n"
        f"- everything of 10,000 nodes, in the process: {everything_cpu:.2f} s of CPU ({everything_sys:.2f} s "
        f"of it the kernel's); the command: {command_wall:.2f} s wall (target <= 2 s): "
        f"{'ok' if command_wall <= 2.0 else 'MISSED'}\n"
        f"- linear in hosts: inventory + vars makes {work:.1f}x the Python function calls for 9.9x the hosts "
        "(a count the machine's load does not move; the CPU ratios above swing with it)\n" + NOTES
    )
    if not args.no_record:
        record("expand", body)


if __name__ == "__main__":
    main()
