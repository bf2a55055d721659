"""`hpckit bench` against the real Slurm of the shared lab cluster (the session `cluster` fixture).

Each test keeps its history and logs in a directory of its own on the lab's shared filesystem, so
runs never see another test's history. The node-failure test breaks node3 (slurmd and the job's
processes killed) and puts it back before it ends: slurmd restarted, the node resumed and idle.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hpckit.clusters import ClusterDir
from tests.labutil import REPO, CliRun, Cluster, needs_lab

pytestmark = [pytest.mark.lab, needs_lab()]

# The bench commands live in hpckit.cli.bench; the top-level group registers them. Until it does, the
# tests add them themselves, so they exercise the same commands either way.
_BOOT = (
    "import sys\n"
    "from hpckit.cli import cli, main\n"
    "from hpckit.cli.bench import COMMANDS\n"
    "for c in COMMANDS:\n"
    "    cli.commands.get(c.name) or cli.add_command(c)\n"
    "sys.argv[0] = 'hpckit'\n"
    "main()\n"
)
VICTIM = "node3"


def _argv(cluster: Cluster, bench_dir: str, out: Path, *args: str) -> list[str]:
    where = ["--bench-dir", bench_dir, "--out", str(out)]
    return [sys.executable, "-c", _BOOT, "bench", *args, *where]


def _env(cluster: Cluster) -> dict[str, str]:
    """No --cluster: the state folder holds this one cluster, which the bench then picks by itself."""
    env = {k: v for k, v in os.environ.items() if k != "HPCKIT_CLUSTER"}
    return {**env, "PYTHONPATH": str(REPO), "HPCKIT_STATE": str(cluster.state)}


def bench(cluster: Cluster, bench_dir: str, out: Path, *args: str) -> CliRun:
    argv = _argv(cluster, bench_dir, out, *args)
    done = subprocess.run(argv, capture_output=True, text=True, env=_env(cluster), timeout=300, check=False)
    return CliRun(done.returncode, done.stdout, done.stderr)


@pytest.fixture
def bench_dir(cluster: Cluster) -> Iterator[str]:
    path = f"/shared/hpckit-bench-tests/{uuid.uuid4().hex[:8]}"
    yield path
    cluster.on("login", "rm", "-rf", "--", path, check=False)


def test_allreduce_on_four_nodes_then_against_its_history(cluster: Cluster, bench_dir: str, tmp_path: Path) -> None:
    first = bench(cluster, bench_dir, tmp_path, "allreduce", "-N", "4")
    assert first.rc == 0, first.stdout + first.stderr
    out = first.stdout
    assert "size" in out and "16 MiB" in out and "busbw" in out  # the table
    assert "peak busbw:" in out and "torch.distributed gloo" in out
    assert "verdict:    no-figure" in out and "no figures for lab GPUs" in out
    assert "history:    no-history" in out
    assert "RUNNING on node1,node2,node3,node4" in first.stderr  # progress while waiting
    for suffix in ("csv", "parquet", "png", "json", "out"):
        assert len(list(tmp_path.glob(f"allreduce-*.{suffix}"))) == 1, suffix
    # The interpreter the deploy installed (bench.torch, the record's toolchain.json), not the deploying machine's.
    recorded = ClusterDir.of(cluster.name, cluster.state).toolchain("gpu")
    if recorded is not None and recorded["python"]:
        assert recorded["python"].startswith("/shared/hpckit/toolchain/torch-") and recorded["backend"] == "torch"
        output = next(tmp_path.glob("allreduce-*.out")).read_text()
        assert f"# hpckit: python {recorded['python']}\n" in output
    history = cluster.on("login", "ls", f"{bench_dir}/history", f"{bench_dir}/history/sweeps").stdout
    assert "runs.parquet" in history

    # the second run is judged against the first; --strict with an unreachable --expect fails it
    second = bench(cluster, bench_dir, tmp_path, "allreduce", "-N", "4", "--json", "-q", "--strict", "--expect", "1000")
    assert second.rc == 1, second.stdout + second.stderr
    result: dict[str, Any] = json.loads(second.stdout)
    assert result["history"]["status"] in ("ok", "below")
    assert "median of 1 earlier run" in result["history"]["message"]
    assert result["history"]["median_gbps"] == pytest.approx(json.loads(first_json(tmp_path))["peak_busbw_gbps"])
    assert result["verdict"]["status"] == "below" and "below expectation" in second.stderr
    # A busy box can also make the second run slower than the first: history may add its own failure.
    kinds = [f.split(":")[0] for f in result["failures"]]
    assert kinds[0] == "below expectation" and set(kinds) <= {"below expectation", "below this cluster's history"}
    assert result["hosts"] == ["node1", "node2", "node3", "node4"] and result["wrong"] == 0
    assert result["backend"] == "torch" and result["settings"]["torch.distributed"] == "gloo"
    assert len(result["rows"]) == 2 * 15 and Path(result["files"]["png"]).stat().st_size > 10_000


def first_json(out: Path) -> str:
    return sorted(out.glob("allreduce-*.json"))[0].read_text()


def test_losing_a_node_mid_run_fails_within_30_s_naming_it(cluster: Cluster, bench_dir: str, tmp_path: Path) -> None:
    from hpckit.lab.provider import lab_exec

    argv = _argv(cluster, bench_dir, tmp_path, "allreduce", "-N", "4", "--no-history", "--json")
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(cluster))
    try:
        _wait_for_rows(proc)
        killed_at = time.monotonic()
        lab_exec(cluster.name, VICTIM, ["pkill", "-x", "slurmd"], timeout=30)
        lab_exec(cluster.name, VICTIM, ["pkill", "-f", "torch_sweep"], timeout=30)
        stdout, stderr = proc.communicate(timeout=120)
        took = time.monotonic() - killed_at
    finally:
        if proc.poll() is None:
            proc.kill()
        _restore(cluster, VICTIM)
    assert proc.returncode == 1, stdout + stderr
    assert f"failed on {VICTIM}" in stderr, stderr
    assert f"srun: error: {VICTIM}: task" in stderr
    assert json.loads(stdout)["failed_nodes"] == [VICTIM]
    assert took < 30, f"took {took:.1f} s after the kill"


def _wait_for_rows(proc: subprocess.Popen[str]) -> None:
    """Until the progress lines show the table growing: every rank is inside torch_sweep by then."""
    assert proc.stderr is not None
    deadline = time.monotonic() + 120
    for line in proc.stderr:
        if " done, busbw " in line:
            return
        assert time.monotonic() < deadline, "the job never started its table"
    raise AssertionError(f"the bench ended before its table started (exit {proc.wait()})")


def _restore(cluster: Cluster, node: str) -> None:
    """slurmd back on the node, the node resumed if Slurm marked it down, and idle again."""
    from hpckit.lab.provider import lab_exec

    lab_exec(cluster.name, node, ["/etc/init.d/slurmd", "start"], timeout=60)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        state = cluster.on("login", "sinfo", "-h", "-n", node, "-o", "%T", check=False).stdout.strip()
        if state == "idle":
            return
        if state.startswith(("down", "drain")):
            cluster.on("login", "scontrol", "update", f"nodename={node}", "state=resume", check=False)
        time.sleep(1)
    raise AssertionError(f"{node} did not come back to idle (state {state!r})")
