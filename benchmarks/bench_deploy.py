"""Deploy speed on the lab, side by side in one run (needs root and the lab packages).

1. cold deploy of the 4-node lab blueprint (lab up + playbook + join), through `hpckit deploy`;
2. no-op re-deploy through `hpckit deploy`;
3. the same no-op with plain `ansible-playbook` at Ansible's defaults, same playbook and inventory;
4. the same as 1-2 with 16 compute nodes.
Targets: no-op <= 15 s and <= 0.5x the plain run; 16 nodes <= 1.5x the 4-node time.

With --against REF [REF...], instead: one cold deploy of the 4-node lab, then no-op deploys alternating the
playbooks of each git revision REF (its ansible/, swapped into this checkout for each of its runs, with this
checkout's topology filter plugin, which the Python loads; the Python stays this checkout's) and this
checkout's, each required to change nothing: a before/after of a change to ansible/ on the same lab, in one
run on a noisy machine, with the time of each play. Leave ansible/ alone while it runs.

Run: python benchmarks/bench_deploy.py [--no-record] [--lab NAME,NET,BRIDGE] [--lab16 NAME,NET,BRIDGE]
     python benchmarks/bench_deploy.py --against REF [REF...] [--runs N] [--lab NAME,NET,BRIDGE]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks._record import record  # noqa: E402
from hpckit.clusters import ClusterDir  # noqa: E402
from hpckit.hw import fabric  # noqa: E402
from tests.labutil import hpckit, lab_blueprint  # noqa: E402


def busy_cpu_s() -> float:
    """CPU seconds this machine has spent busy since boot, all cores and processes (lab nodes included)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def timed_deploy(blueprint: Path, state: Path) -> tuple[float, dict[str, float]]:
    """Wall time of `hpckit deploy` (process start to exit) and the command's own breakdown, with the
    machine's busy CPU seconds during it as "busy_cpu_s" and the hosts' changed tasks as "changed"."""
    start, cpu = time.monotonic(), busy_cpu_s()
    done = hpckit("deploy", str(blueprint), "-q", "--json", state=state, timeout=1800)
    took = time.monotonic() - start
    if done.rc != 0:
        raise SystemExit(f"deploy failed:\n{done.stdout}\n{done.stderr}")
    summary = json.loads(done.stdout)
    timings: dict[str, float] = summary.get("timings_s", {})
    changed = sum(h.get("changed", 0) for h in summary.get("hosts", {}).values())
    return took, {**timings, "busy_cpu_s": busy_cpu_s() - cpu, "changed": changed}


@contextmanager
def ansible_of(ref: str) -> Iterator[None]:
    """REF's ansible/ (as committed) in place of this checkout's for the duration. Swapped in place rather
    than run from elsewhere: the roles read their own folder (hpckit_health's PYTHONPATH is the playbook's
    parent), so another path would itself be a change."""
    ours, aside, theirs = REPO / "ansible", REPO / ".ansible-bench-aside", REPO / ".ansible-bench-ref"
    theirs.mkdir()
    archive = subprocess.run(["git", "archive", ref, "ansible"], cwd=REPO, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "--strip-components=1", "-C", str(theirs)], input=archive.stdout, check=True)
    keep_python_assets(ours, theirs)
    ours.rename(aside)
    theirs.rename(ours)
    try:
        yield
    finally:
        ours.rename(theirs)
        aside.rename(ours)
        shutil.rmtree(theirs)


def keep_python_assets(ours: Path, theirs: Path) -> None:
    """hpckit's Python (this checkout's) loads the infiniband role's filter plugin from ansible/ as it starts: an
    older tree lacks it or has a version that Python cannot use, so this checkout's goes in its place (on the
    lab, which has no fabric, no role calls it; every run is still checked to change nothing)."""
    (theirs / fabric.PLUGIN).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(ours / fabric.PLUGIN, theirs / fabric.PLUGIN)


def plain_noop(state: Path, cluster: str) -> float:
    """ansible-playbook with an empty config (Ansible's defaults) on the record's inventory and extravars."""
    current = ClusterDir.of(cluster, state).current
    empty = Path(tempfile.mkdtemp()) / "ansible.cfg"
    empty.write_text("[defaults]\n")
    env = {**os.environ, "ANSIBLE_CONFIG": str(empty), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    argv = [
        "ansible-playbook",
        "-i",
        str(current / "inventory.yml"),
        "-e",
        f"@{current / 'extravars.yml'}",
        str(REPO / "ansible" / "site.yml"),
    ]
    start = time.monotonic()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    took = time.monotonic() - start
    if done.returncode != 0:
        raise SystemExit(f"plain ansible-playbook failed:\n{done.stdout[-3000:]}")
    if "changed=0" not in done.stdout or "changed=1" in done.stdout:
        print("warning: plain run was not a no-op", file=sys.stderr)
    return took


def sixteen(tmp: Path, lab: list[str]) -> Path:
    path = lab_blueprint(tmp, *lab)
    text = path.read_text().replace("node[1-4]", "node[1-16]").replace("$(vars.net).[21-24]", "$(vars.net).[21-36]")
    path.write_text(text)
    return path


def load() -> str:
    return f"{os.getloadavg()[0]:.2f}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3, help="no-op runs of each kind, alternating")
    ap.add_argument("--no-record", action="store_true")
    ap.add_argument("--lab", default="bench4,10.77.4,hpckb4", help="NAME,NET,BRIDGE of the 4-node lab")
    ap.add_argument("--lab16", default="bench16,10.77.6,hpckb6", help="NAME,NET,BRIDGE of the 16-node lab")
    ap.add_argument("--against", metavar="REF", nargs="+", help="compare no-op deploys with REFs' ansible/ instead")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="hpckit-bench-"))
    state = tmp / "state"
    four = lab_blueprint(tmp, *args.lab.split(","))
    if args.against:
        against(args.against, four, state, args.runs, not args.no_record)
        return
    big = sixteen(tmp, args.lab16.split(","))
    loads = [load()]
    noops: list[float] = []
    plains: list[float] = []
    parts: list[dict[str, float]] = []
    try:
        cold4, cold4_parts = timed_deploy(four, state)
        for _ in range(args.runs):
            took, timings = timed_deploy(four, state)
            noops.append(took)
            parts.append(timings)
            plains.append(plain_noop(state, "bench4"))
        loads.append(load())
        hpckit("destroy", str(four), state=state)
        cold16, cold16_parts = timed_deploy(big, state)
        noop16 = statistics.median(timed_deploy(big, state)[0] for _ in range(2))
        loads.append(load())
    finally:
        hpckit("destroy", str(four), state=state)
        hpckit("destroy", str(big), state=state)
    busy = (cold4_parts["busy_cpu_s"], cold16_parts["busy_cpu_s"])
    body = report(cold4, noops, plains, parts, cold16, noop16, loads, busy)
    print(body)
    if not args.no_record:
        record("deploy", body)


def against(refs: list[str], four: Path, state: Path, runs: int, keep: bool) -> None:
    """No-op deploys alternating each REF's playbooks and this checkout's, on one lab; each must change nothing."""
    loads = [load()]
    names = [*refs, "this checkout"]
    times: dict[str, list[float]] = {name: [] for name in names}
    busy: dict[str, list[float]] = {name: [] for name in names}
    plays: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    try:
        timed_deploy(four, state)
        for _ in range(runs):
            for name in names:
                with ansible_of(name) if name in refs else nullcontext():
                    took, parts = timed_deploy(four, state)
                if parts["changed"]:
                    raise SystemExit(f"the no-op deploy with {name}'s ansible/ changed {parts['changed']:.0f} tasks")
                times[name].append(took)
                busy[name].append(parts["busy_cpu_s"])
                plays[name].append(breakdown(ClusterDir.of(four.stem, state).current / "events.jsonl", took, parts))
        loads.append(load())
    finally:
        hpckit("destroy", str(four), state=state)
    ours = statistics.median(times["this checkout"])
    ratios = [f"- this checkout / {r} = {ours / statistics.median(times[r]):.2f} (medians of {runs})" for r in refs]
    rows = [f"| {n} | {_spread(times[n])} | {statistics.median(busy[n]):.1f} s |" for n in names]
    body = (
        f"## No-op deploy, ansible/ of {', '.join(f'`{r}`' for r in refs)} against this checkout "
        "(`benchmarks/bench_deploy.py --against`)\n\n"
        "4-node lab (6 hosts), one cold deploy, then `hpckit deploy` no-ops alternating the playbook trees (same "
        "Python, same lab); every run changed nothing. Load average (1 min) at the start and the end: "
        f"{', '.join(loads)}; busy CPU: the whole box's, all cores, during each run (the box is shared).\n\n"
        "| ansible/ | no-op deploy | busy CPU |\n| --- | --- | --- |\n"
        + "\n".join(rows)
        + "\n\n"
        + "\n".join(ratios)
        + "\n\n"
        + play_table(names, plays)
    )
    print(body)
    if keep:
        record("deploy-against", body)


def play_times(events: Path) -> dict[str, float]:
    """Seconds from each play's start to the next's (the last: to the run's end), from a record's events."""
    marks = []
    for line in events.read_text().splitlines():
        event = json.loads(line)
        if event["event"] in ("playbook_on_play_start", "playbook_on_stats"):
            marks.append((event.get("play", ""), datetime.fromisoformat(event["created"])))
    spans: dict[str, float] = {}
    for (name, start), (_, end) in itertools.pairwise(marks):
        spans[name] = spans.get(name, 0.0) + (end - start).total_seconds()
    return spans


def breakdown(events: Path, took: float, parts: dict[str, float]) -> dict[str, float]:
    """A no-op's wall time in parts: each play, Ansible's start and end, and hpckit's own work around them."""
    spans = play_times(events)
    spans["(ansible-playbook starting and ending)"] = parts.get("playbook", 0.0) - sum(spans.values())
    spans["(hpckit: start, inventory, record, join check)"] = took - parts.get("playbook", 0.0)
    return spans


def play_table(names: list[str], plays: dict[str, list[dict[str, float]]]) -> str:
    """Median seconds per play for each tree (plays by name; "-" where a tree has no such play)."""
    order = list(dict.fromkeys(play for name in names for run in plays[name] for play in run))
    head = "| play | " + " | ".join(names) + " |\n|" + " --- |" * (len(names) + 1) + "\n"
    lines = []
    for play in order:
        cells = [[run[play] for run in plays[name] if play in run] for name in names]
        lines.append(f"| {play} | " + " | ".join(f"{statistics.median(c):.2f}" if c else "-" for c in cells) + " |")
    totals = [statistics.median(sum(run.values()) for run in plays[name]) for name in names]
    lines.append("| the whole no-op (sum) | " + " | ".join(f"{t:.2f}" for t in totals) + " |")
    title = "Where a no-op deploy's time goes, median seconds per part (plays from the record's events):\n\n"
    return title + head + "\n".join(lines)


def report(
    cold4: float,
    noops: list[float],
    plains: list[float],
    parts: list[dict[str, float]],
    cold16: float,
    noop16: float,
    loads: list[str],
    busy: tuple[float, float],
) -> str:
    noop = statistics.median(noops)
    ratios = sorted(n / p for n, p in zip(noops, plains, strict=True))
    playbook = statistics.median(t.get("playbook", 0.0) for t in parts)
    after = statistics.median(t.get("join", 0.0) for t in parts)
    inside = statistics.median(t.get("total", 0.0) for t in parts)
    rows = [
        ("4 nodes: cold deploy (lab up + playbook + join)", f"{cold4:.1f} s"),
        (f"4 nodes: no-op, hpckit deploy (median of {len(noops)})", _spread(noops)),
        (f"4 nodes: no-op, plain ansible-playbook at defaults (median of {len(plains)})", _spread(plains)),
        ("16 nodes: cold deploy", f"{cold16:.1f} s"),
        ("16 nodes: no-op, hpckit deploy (median of 2)", f"{noop16:.1f} s"),
    ]
    checks = [
        f"- no-op {noop:.1f} s (target <= 15 s): {'ok' if noop <= 15 else 'MISSED'}",
        f"- no-op / plain, median of the back-to-back pairs = {statistics.median(ratios):.2f} "
        f"(pairs {', '.join(f'{r:.2f}' for r in ratios)}; target <= 0.5): "
        f"{'ok' if statistics.median(ratios) <= 0.5 else 'MISSED'}",
        f"- cold 16 / cold 4 = {cold16 / cold4:.2f} (target <= 1.5): {'ok' if cold16 / cold4 <= 1.5 else 'MISSED'}",
        f"- no-op 16 / no-op 4 = {noop16 / noop:.2f}",
        f"- CPU: the cold deploys kept this machine's {os.cpu_count()} cores busy for {busy[0]:.0f} s (4 nodes) and "
        f"{busy[1]:.0f} s (16 nodes) of CPU time, controller and lab nodes together; even spread perfectly over "
        f"the cores the 16-node one needs {busy[1] / (os.cpu_count() or 1):.0f} s of wall time, against the "
        f"{1.5 * cold4:.0f} s that 1.5x allows",
        "- why the no-op ratio stays near 1: every role inspects its hosts in one raw round trip (no Python "
        "module, so pipelining has nothing to save) and ends where nothing differs, and plain Ansible runs that "
        "same playbook; what hpckit's settings still save is the fact gathering (cached per cluster) and the "
        "second batch that 5 forks make of 6 hosts",
        f"- where an hpckit no-op goes (medians): playbook {playbook:.1f} s, join check + config copies "
        f"{after:.1f} s, the rest of deploy() {inside - playbook - after:.1f} s, and {noop - inside:.1f} s "
        "outside it (interpreter start, imports, writing the summary)",
    ]
    return (
        "## Deploy speed on the lab (`benchmarks/bench_deploy.py`)\n\n"
        "Wall time of each whole command, side by side in one run; the no-op runs alternate hpckit and plain "
        f"`ansible-playbook` (Ansible's defaults, same playbook, inventory and extravars). Load average (1 min) "
        f"at the start, after the 4-node runs and at the end: {', '.join(loads)}.\n\n"
        "| run | time |\n| --- | --- |\n" + "\n".join(f"| {k} | {v} |" for k, v in rows) + "\n\n" + "\n".join(checks)
    )


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} s ({min(values):.1f}-{max(values):.1f})"


if __name__ == "__main__":
    main()
