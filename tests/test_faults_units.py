"""Deploy and health under faults, without a lab: the join watchdog and drained nodes, the deployment
record (who, what, which blueprint, destroyed), `--cluster` for `hpckit health`, the out-of-band probe's
verdicts, and a deploy from an interpreter lab nodes cannot see."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from hpckit.clusters import RecordError, load_access
from hpckit.deploy.join import wait_for_join
from hpckit.deploy.record import DeploymentRecord, mark_destroyed, run_info
from hpckit.health.config import parse_config
from hpckit.health.model import Row, Status
from hpckit.health.oob import ProbeResult, probe_command, reach_row
from hpckit.proc import CommandResult
from hpckit.slurm.client import SlurmClient
from tests.health_fakes import FakeNode, FakeSlurm

REPO = Path(__file__).resolve().parent.parent


# --- join: a node someone took out is reported, not waited for ----------------------------------------


def test_join_does_not_wait_for_nodes_taken_out_on_purpose() -> None:
    sinfo = FakeSlurm(
        {
            "node1": FakeNode(),
            "node2": FakeNode("drained", "admin: fan"),
            "node3": FakeNode("down", "hpckit:unreachable:ssh"),
            "node4": FakeNode(flags="*"),
        }
    )
    clock = iter(range(0, 1000))
    report = wait_for_join(
        SlurmClient(sinfo),
        ["node1", "node2", "node3"],
        timeout=120,
        clock=lambda: float(next(clock)),
        sleep=lambda s: None,
    )
    assert report.ok and report.joined == ["node1"]
    assert report.held == {"node2": "drained (admin: fan)", "node3": "down (hpckit:unreachable:ssh)"}
    assert next(clock) == 2  # one look, nothing to wait for


def test_join_still_waits_for_a_node_slurm_took_out() -> None:
    sinfo = FakeSlurm(
        {"node1": FakeNode("down", "Not responding", "*"), "node2": FakeNode("drained", "Kill task failed", "*")}
    )
    clock = iter(range(0, 1000, 10))
    report = wait_for_join(
        SlurmClient(sinfo), ["node1", "node2"], timeout=30, clock=lambda: float(next(clock)), sleep=lambda s: None
    )
    assert not report.ok and set(report.missing) == {"node1", "node2"} and report.held == {}


# --- the record --------------------------------------------------------------------------------------


def test_run_info_names_who_what_and_the_blueprint() -> None:
    info = run_info({"name": "lab", "b": [1, 2]}, ["deploy", "bp.yaml", "-V", "site.yaml"])
    assert info["command"] == "hpckit deploy bp.yaml -V site.yaml"
    assert info["user"] and info["host"]
    same = run_info({"b": [1, 2], "name": "lab"}, [])
    other = run_info({"name": "lab", "b": [2, 1]}, [])
    assert info["blueprint_sha256"] == same["blueprint_sha256"] != other["blueprint_sha256"]


def test_a_destroyed_cluster_says_so_and_a_new_deploy_clears_it(tmp_path: Path) -> None:
    record = DeploymentRecord.create("c1", tmp_path)
    record.write_json(
        "access.json",
        {
            "cluster": "c1",
            "login_host": "login",
            "login_address": "10.0.0.2",
            "controller_host": "ctl",
            "addresses": {},
            "access": {"user": "root", "port": 22, "key_file": None, "known_hosts": "/gone/known_hosts"},
            "lab": True,
        },
    )
    record.mark_current()
    assert load_access("c1", tmp_path).login_host == "login"
    mark_destroyed("c1", tmp_path)
    with pytest.raises(RecordError, match=r"cluster 'c1' was destroyed at .* by .*deploy it again") as err:
        load_access("c1", tmp_path)
    assert "known_hosts" not in str(err.value) and err.value.exit_code == 2
    record.mark_current()
    assert load_access("c1", tmp_path).cluster == "c1"


def test_nodes_removed_from_the_blueprint_are_retired(tmp_path: Path) -> None:
    """A static cluster: compute hosts of the last deploy that the blueprint dropped get their slurmd
    stopped (the slurm_retired play); their failures (the machine may be gone) are notes, not failures."""
    from hpckit.blueprint import load_blueprint
    from hpckit.deploy.events import Tracker
    from hpckit.deploy.record import retired_hosts

    bp = load_blueprint(REPO / "blueprints" / "h100-ib.yaml")
    record = DeploymentRecord.create(bp.cluster_name, tmp_path)
    gone = {"ansible_host": "10.0.9.9"}
    old = {"all": {"children": {"slurm_compute": {"children": {"partition_gpu": {"hosts": {"gpu99": gone}}}}}}}
    record.write_yaml("inventory.yml", old)
    record.mark_current()
    assert retired_hosts(bp, tmp_path) == {"gpu99": gone}
    assert retired_hosts(bp, tmp_path / "nowhere") == {}
    tracker = Tracker()
    tracker.tolerate(["gpu99"])
    event = {"host": "gpu99", "task": "Stop slurmd", "res": {"msg": "ssh: connect to host 10.0.9.9: No route"}}
    tracker.feed({"event": "runner_on_unreachable", "event_data": event})
    assert tracker.ok and tracker.notes == [
        "gpu99 (removed from the blueprint): Stop slurmd: ssh: connect to host 10.0.9.9: No route"
    ]
    site = (REPO / "ansible" / "site.yml").read_text()
    assert "hosts: slurm_retired" in site and "state: stopped" in site


# --- hpckit health --cluster ----------------------------------------------------------------------------


def test_health_cluster_option_runs_the_same_command_on_the_login_node(monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[tuple[str, ...]] = []

    def login(argv: tuple[str, ...]) -> CommandResult:
        sent.append(argv)
        return CommandResult(argv, 3, '{"run_id": "r1"}\n', "warning: x\n", "login")

    import hpckit.jobs.submit

    monkeypatch.setattr(hpckit.jobs.submit, "transport_for", lambda cluster: FakeSlurm(other=login))
    from hpckit.cli.health import health

    out = CliRunner().invoke(
        health, ["sweep", "--cluster", "lab", "--json", "--disable", "gpu", "--disable", "ib", "--nodes", "node[1-2]"]
    )
    assert out.exit_code == 3 and out.stdout == '{"run_id": "r1"}\n'
    assert sent == [
        (
            "/etc/hpckit/hpckit-health",
            "sweep",
            "--disable",
            "gpu",
            "--disable",
            "ib",
            "--nodes",
            "node[1-2]",
            "--json",
        )
    ]
    sent.clear()
    CliRunner().invoke(health, ["report", "--cluster", "lab", "--run", "r1"])
    assert sent == [("/etc/hpckit/hpckit-health", "report", "--run", "r1")]


# --- the out-of-band probe --------------------------------------------------------------------------


def _row(check: str, status: Status, evidence: str = "") -> Row:
    return Row("n1", check, "running", status, fault=None if status == Status.OK else "x", evidence=evidence)


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"job_ran": True, "responding": True}, ("OK", None)),
        ({"job_ran": True, "responding": True, "job_error": "srun: error: x"}, ("UNKNOWN", "job")),
        ({"responding": False}, ("UNKNOWN", "slurmctld")),
        ({"responding": True}, None),
        (
            {"responding": False, "probe": ProbeResult("n1", [], "cannot reach n1 over SSH: timed out")},
            ("UNKNOWN", "ssh"),
        ),
        (
            {"responding": False, "probe": ProbeResult("n1", [_row("host.munge", Status.FAIL, "no munged process")])},
            ("UNKNOWN", "munge"),
        ),
        (
            {
                "job_ran": True,
                "job_error": "srun: error: Unable to contact slurm daemon",
                "responding": True,
                "probe": ProbeResult("n1", [_row("host.slurmd", Status.FAIL, "no slurmd process")]),
            },
            ("UNKNOWN", "slurmd"),
        ),
        ({"responding": False, "probe": ProbeResult("n1", [_row("host.munge", Status.OK)])}, ("UNKNOWN", "slurmctld")),
        ({"responding": True, "probe": ProbeResult("n1", [_row("host.munge", Status.OK)])}, ("OK", None)),
    ],
)
def test_reach_row(kwargs: dict[str, object], expected: tuple[str, str | None] | None) -> None:
    row = reach_row("n1", 1.0, **kwargs)  # type: ignore[arg-type]
    assert (None if row is None else (row.status.name, row.fault)) == expected
    if row is not None and row.status == Status.UNKNOWN:
        assert row.evidence  # always says what was seen


def test_probe_settings_and_command() -> None:
    config = parse_config(
        {"command": ["/etc/hpckit/hpckit-health"], "probe": {"user": "root", "key": "/k", "known_hosts": None}}, "t"
    )
    assert config.probe is not None and config.probe.key == "/k" and config.probe.known_hosts is None
    assert probe_command(config) == ["/etc/hpckit/hpckit-health", "check", "--tier", "quick", "--json", "--dry-run"]
    assert parse_config({}, "t").probe is None
    from hpckit.health.config import ConfigError

    with pytest.raises(ConfigError, match="probe: unknown key 'kye'"):
        parse_config({"probe": {"kye": "/k"}}, "t")


def test_lab_blueprint_allows_the_probe_with_the_labs_own_key(tmp_path: Path) -> None:
    from hpckit.blueprint import load_blueprint
    from hpckit.clusters import SshAccess
    from hpckit.deploy.playvars import build_vars
    from hpckit.deploy.targets import lab_extravars

    bp = load_blueprint(REPO / "blueprints" / "lab.yaml")
    _, extravars = build_vars(bp, SshAccess("root"))
    assert extravars["hpckit_health_settings"]["ssh_probe"] == {"user": "root", "key": None, "known_hosts": None}
    runtime = lab_extravars(SshAccess("root", 22, "/var/lib/hpckit/lab/lab/ssh/id", "/var/lib/hpckit/lab/lab/kh"))
    assert runtime["hpckit_health_probe_key"] == "/var/lib/hpckit/lab/lab/ssh/id"
    assert runtime["hpckit_login_bin"] == "/etc/hpckit/bin/hpckit"  # the node's own /etc, not this box's


def test_lab_sshd_puts_the_nodes_own_commands_on_the_path() -> None:
    from hpckit.lab import LabNode, LabSpec
    from hpckit.lab.ssh import NODE_BIN, sshd_config_text

    node = LabNode("login", "10.77.141.11")
    text = sshd_config_text(LabSpec("t", (node,), "10.77.141.0/24", "hf141"), node)
    assert f"SetEnv PATH={NODE_BIN}:/usr/local/sbin:/usr/local/bin:" in text
    assert NODE_BIN.startswith("/etc/")  # a node-private root


# --- a deploy from where lab nodes cannot see hpckit ------------------------------------------------------


def test_deploy_from_a_venv_under_tmp_fails_before_ansible_with_the_reason(tmp_path: Path) -> None:
    """Lab nodes have a private /tmp: an interpreter there is not theirs. A real venv under /tmp (with
    this environment's packages through a .pth file), and a real `hpckit deploy` from it."""
    import sysconfig
    import tempfile

    with tempfile.TemporaryDirectory(prefix="hpckit-venv-", dir="/tmp") as where:
        venv = Path(where) / "venv"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
        site = next(venv.glob("lib/python3*/site-packages"))
        (site / "hpckit-here.pth").write_text(f"{sysconfig.get_paths()['purelib']}\n{REPO}\n")
        env = {**os.environ, "HPCKIT_STATE": str(tmp_path / "state"), "TMPDIR": str(tmp_path)}
        done = subprocess.run(
            [str(venv / "bin" / "python"), "-m", "hpckit", "deploy", str(REPO / "blueprints" / "lab.yaml"), "-q"],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            check=False,
        )
    assert done.returncode != 0
    assert f"lab nodes cannot see this Python environment ({venv}" in done.stderr, done.stderr
    assert "/tmp" in done.stderr and "Install hpckit elsewhere" in done.stderr
    assert not (tmp_path / "state" / "clusters").exists()  # nothing started, nothing recorded
