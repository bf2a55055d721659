"""The health pieces around the checks: config file, slurm.conf, sinfo, cron, registry, deploy variables, CLI."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from pathlib import Path

import pytest

from hpckit.cron import parse_cron
from hpckit.errors import InputError
from hpckit.health.config import ConfigError, load_config, parse_config
from hpckit.health.model import Bounds, Row, Status
from hpckit.health.registry import check, select
from hpckit.health.schedule import JOB_NAME, ensure_chain
from hpckit.slurm.client import SlurmClient
from hpckit.slurm.conf import SlurmConfError, parse_nodes, parse_settings
from hpckit.slurm.nodes import JobOps, parse_fleet
from tests.fakes import FakeTransport, scripted

REPO = Path(__file__).resolve().parent.parent


# --- /etc/hpckit/health.json ---------------------------------------------------------------------------


def test_config_round_trip_of_what_the_role_renders() -> None:
    data = {
        "cluster": "lab",
        "store": "/shared/hpckit/health",
        "gpus": {"type": "h100-sxm", "count": 8},
        "infiniband": {"hcas": ["mlx5_0", "mlx5_1"], "rate_gbps": 400, "roce": False},
        "mounts": ["/shared", {"path": "/scratch", "write_dir": "/scratch/.hpckit-health"}],
        "disks": {"spool": "/var/spool/slurmd"},
        "quick_interval_s": 60,
        "nightly": "30 3 * * *",
        "command": ["/etc/hpckit/hpckit-health"],
        "policy": {"drain": False, "resume_after": 3, "disabled_checks": ["gpu.clocks"], "circuit_breaker": 0.25},
        "thresholds": {"disk_fail_fraction": 0.05, "zombie_warn": 10},
    }
    config = parse_config(data, "health.json")
    assert config.gpus is not None and (config.gpus.type, config.gpus.count) == ("h100-sxm", 8)
    assert config.infiniband is not None and config.infiniband.hcas == ("mlx5_0", "mlx5_1")
    assert [m.write_dir for m in config.mounts] == ["/shared", "/scratch/.hpckit-health"]
    assert config.policy.drain is False and config.policy.resume_after == 3
    assert config.policy.disabled_checks == frozenset({"gpu.clocks"})
    assert config.thresholds.disk_fail_fraction == 0.05 and config.thresholds.zombie_warn == 10
    assert isinstance(config.thresholds.zombie_warn, int)
    assert config.fresh_s == 180 and config.command == ("/etc/hpckit/hpckit-health",)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([], "top level: expected an object"),
        ({"gpus": {"type": "h100"}}, "count: missing"),
        ({"gpus": {"type": "h100", "count": "8"}}, "count: expected a number"),
        ({"policy": {"resume_after": 0}}, "resume_after: must be at least 1"),
        ({"mounts": "/shared"}, "mounts: expected a list"),
        ({"thresholds": {"disk_free": 1}}, "unknown key 'disk_free'"),
        ({"command": [""]}, "command[0]: expected text"),
    ],
)
def test_config_errors_name_the_field(data: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_config(data, "/etc/hpckit/health.json")


def test_config_file_errors(tmp_path: Path) -> None:
    bad = tmp_path / "health.json"
    bad.write_text('{"store": "/x",\n  oops}')
    with pytest.raises(ConfigError, match=r"health.json, line 2: not JSON"):
        load_config(str(bad))
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(str(tmp_path / "missing.json"))


# --- slurm.conf ----------------------------------------------------------------------------------------

SLURM_CONF = """\
ClusterName=lab   # a comment
NodeName=DEFAULT RealMemory=1000 State=UNKNOWN
NodeName=node[1-4] NodeAddr=10.77.8.[21-24] CPUs=2 Sockets=1 CoresPerSocket=2 \\
  ThreadsPerCore=1 Gres=gpu:lab:4
NodeName=big1 Sockets=2 CoresPerSocket=16 ThreadsPerCore=2 RealMemory=512000 Gres=gpu:h100:8,nic:2
PartitionName=gpu Nodes=node[1-4] Default=YES MaxTime=INFINITE State=UP
HealthCheckProgram=/etc/hpckit/health-check
HealthCheckInterval=300
"""


def test_slurm_conf_nodes() -> None:
    nodes = {n.name: n for n in parse_nodes(SLURM_CONF)}
    assert sorted(nodes) == ["big1", "node1", "node2", "node3", "node4"]
    assert nodes["node3"].cpus == 2 and nodes["node3"].real_memory_mb == 1000 and nodes["node3"].gres_count() == 4
    assert nodes["big1"].cpus == 64 and nodes["big1"].gres_count() == 8 and nodes["big1"].gres_type() == "h100"
    assert nodes["big1"].gres_count("nic") == 2 and nodes["node1"].gres_count("nic") is None
    settings = parse_settings(SLURM_CONF)
    assert settings["healthcheckinterval"] == "300" and "nodename" not in settings


def test_slurm_conf_bad_hostlist() -> None:
    with pytest.raises(SlurmConfError, match="line 1: bad NodeName"):
        parse_nodes("NodeName=node[1-")


# --- sinfo (recorded in the lab, tests/data/health/SOURCES.md) -------------------------------------------


def test_parse_fleet_on_the_lab_recording() -> None:
    from hpckit.health.policy import Ownership, ownership

    fleet = parse_fleet((REPO / "tests" / "data" / "health" / "sinfo-N-health-format-slurm22.05-lab.txt").read_text())
    assert fleet.partitions == {n: ("gpu",) for n in ("node1", "node2", "node3", "node4")}
    node1, node4 = fleet.nodes["node1"], fleet.nodes["node4"]
    assert (node1.state, node1.flags, node1.reason) == ("drained", "*", "hpckit:munge-down:host.munge")
    assert node4.reason == "admin: DIMM swap | ticket 4711"  # the reason keeps its "|"
    owners = {n: ownership(s) for n, s in fleet.nodes.items()}
    assert owners == {
        "node1": Ownership.OURS,
        "node2": Ownership.IN_SERVICE,
        "node3": Ownership.OURS,
        "node4": Ownership.FOREIGN,
    }


def test_parse_fleet_node_in_two_partitions() -> None:
    fleet = parse_fleet("node3|mixed|gpu*|none\nnode3|mixed|debug|none\n")
    assert fleet.partitions == {"node3": ("gpu", "debug")} and fleet.nodes["node3"].state == "mixed"


# --- cron and the chained schedule ----------------------------------------------------------------------

NOW = dt.datetime(2026, 11, 21, 6, 30)


@pytest.mark.parametrize(
    ("cron", "expected"),
    [
        ("0 2 * * *", dt.datetime(2026, 11, 22, 2, 0)),
        ("45 6 * * *", dt.datetime(2026, 11, 21, 6, 45)),
        ("*/20 * * * *", dt.datetime(2026, 11, 21, 6, 40)),
        ("0 2 * * 1", dt.datetime(2026, 11, 23, 2, 0)),  # next Monday
        ("0 2 * * 7", dt.datetime(2026, 11, 22, 2, 0)),  # 7 is Sunday too
        ("0 2 1 * *", dt.datetime(2026, 12, 1, 2, 0)),
        ("0 2 1 * 1", dt.datetime(2026, 11, 23, 2, 0)),  # day of month OR day of week
        ("0 0 29 2 *", dt.datetime(2028, 2, 29, 0, 0)),
        ("0 1-3/2 * * *", dt.datetime(2026, 11, 22, 1, 0)),
    ],
)
def test_cron_next(cron: str, expected: dt.datetime) -> None:
    assert parse_cron(cron).next_after(NOW) == expected


@pytest.mark.parametrize("cron", ["0 2 * *", "60 2 * * *", "0 2 * * mon", "5-1 * * * *", "*/0 * * * *"])
def test_cron_errors(cron: str) -> None:
    with pytest.raises(InputError, match="cron expression"):
        parse_cron(cron)


def fake_queue(pending: str = "") -> FakeTransport:
    """squeue lists `pending` (JOBID|BEGIN lines), sbatch queues job 42, scancel cancels."""
    return scripted({"squeue": [(0, pending, "")], "sbatch": [(0, "42;lab\n", "")], "scancel": [(0, "", "")]})


def test_chain_queues_one_job_for_the_next_time() -> None:
    queue = fake_queue()
    message = ensure_chain(
        JobOps(queue), parse_cron("0 2 * * *"), ["/etc/hpckit/hpckit-health"], output="/s/logs/sweep-%j.out",
        time_limit_min=120, partition=None, now=NOW,
    )  # fmt: skip
    assert message == "sweep job 42 queued for 2026-11-22T02:00:00"
    sbatch = queue.calls[-1]
    assert f"--job-name={JOB_NAME}" in sbatch and "--begin=2026-11-22T02:00:00" in sbatch
    assert sbatch[-1] == "--wrap=/etc/hpckit/hpckit-health schedule; exec /etc/hpckit/hpckit-health sweep"


def test_chain_is_idempotent_and_replaces_a_stale_job() -> None:
    same = fake_queue("17|2026-11-22T02:00:00\n")
    cron = parse_cron("0 2 * * *")
    args = {"output": "/o", "time_limit_min": 60, "partition": "gpu", "now": NOW}
    assert ensure_chain(JobOps(same), cron, ["h"], **args) == "sweep job 17 already waits for 2026-11-22T02:00:00"  # type: ignore[arg-type]
    assert [c[0] for c in same.calls] == ["squeue"]
    stale = fake_queue("17|2026-11-22T03:00:00\n")
    ensure_chain(JobOps(stale), cron, ["h"], **args)  # type: ignore[arg-type]
    assert [c[0] for c in stale.calls] == ["squeue", "scancel", "sbatch"]
    assert "--partition=gpu" in stale.calls[-1]


def test_sbatch_argv_shape() -> None:
    queue = fake_queue()
    job_id = SlurmClient(queue).sbatch_wrap(
        "x", "true", dt.datetime(2026, 1, 2, 3, 4), output="/o", time_limit_min=5, partition=None
    )
    argv = queue.calls[-1]
    assert job_id == "42" and argv[:2] == ("sbatch", "--parsable") and "--dependency=singleton" in argv


# --- registry and model ---------------------------------------------------------------------------------


def test_registry_selects_by_tier_area_and_name() -> None:
    quick = [c.name for c in select("quick")]
    assert "host.munge" in quick and "gpu.gemm" not in quick
    assert "gpu.gemm" in [c.name for c in select("nightly")]
    assert not [c for c in select("quick", disabled=["gpu"]) if c.area == "gpu"]
    assert [c.name for c in select("quick", only=["host.munge"])] == ["host.munge"]
    with pytest.raises(InputError, match=r"no health check or area 'host\.mung'"):
        list(select("quick", disabled=["host.mung"]))


def test_registry_refuses_a_duplicate() -> None:
    with pytest.raises(ValueError, match="registered twice"):
        check("host.munge")(lambda ctx: [])


def test_bounds() -> None:
    b = Bounds(100.0, rel=0.1, abs=5.0, side="low")
    assert (b.lower, b.upper, b.contains(91), b.contains(89), b.contains(1e9)) == (90.0, None, True, False, True)
    assert Bounds(0.0, abs=1.0, side="high").upper == 1.0 and not Bounds(1.0).contains(float("nan"))


def test_row_round_trip_and_errors() -> None:
    row = Row("n", "c", "m", Status.WARN, 1.5, "s", 1.0, None, 2.0, "slow", "ev", "quick", 1.7e9)
    assert Row.from_dict(json.loads(json.dumps(row.to_dict()))) == row
    with pytest.raises(ValueError, match="lacks field 'status'"):
        Row.from_dict({"check": "c"})
    with pytest.raises(ValueError, match="bad health row"):
        Row.from_dict({"node": "n", "check": "c", "metric": "m", "status": "MAYBE"})


# --- deploy variables -----------------------------------------------------------------------------------


def test_health_deploy_variables() -> None:
    from hpckit.blueprint import load_blueprint
    from hpckit.health.deployvars import health_extravars, health_host_vars, slurm_conf_lines

    bp = load_blueprint(REPO / "blueprints" / "lab.yaml")
    extra = health_extravars(bp)
    assert extra["hpckit_health_mounts"] == ["/shared"]
    assert extra["hpckit_health_settings"]["resume_after"] == bp.health.resume_after
    assert health_host_vars(bp.partitions[0]) == {}
    lines = slurm_conf_lines(bp)
    assert lines["HealthCheckProgram"] == "/etc/hpckit/health-check" and lines["HealthCheckNodeState"] == "ANY"


# --- CLI ------------------------------------------------------------------------------------------------


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hpckit.health", *args], capture_output=True, text=True, cwd=REPO, check=False
    )


def test_cli_list_and_bad_input(tmp_path: Path) -> None:
    listed = _cli("list")
    assert listed.returncode == 0 and "host.munge" in listed.stdout and "gpu.gemm" in listed.stdout
    bad = _cli("check", "--config", str(tmp_path / "nope.json"))
    assert bad.returncode == 2 and "does not exist" in bad.stderr and "Traceback" not in bad.stderr
    typo = _cli("check", "--dry-run", "--disable", "gpu.eccc")
    assert typo.returncode == 2 and "no health check or area 'gpu.eccc'" in typo.stderr


def test_cli_check_json(tmp_path: Path) -> None:
    config = tmp_path / "health.json"
    config.write_text(json.dumps({"store": str(tmp_path / "store"), "state_dir": str(tmp_path / "st")}))
    done = _cli("check", "--config", str(config), "--json", "--only", "host.procs")
    data = json.loads(done.stdout)
    assert {r["check"] for r in data["rows"]} == {"host.procs"} and data["decision"] is None
    assert (tmp_path / "store" / "latest").is_dir()
