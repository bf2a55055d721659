"""`hpckit upgrade`: the plan follows SchedMD's order with slurmd in batches, and every upgrade Slurm does not
support is refused (exit 2) before anything is touched."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hpckit.blueprint import Blueprint, parse_blueprint
from hpckit.deploy.record import DeploymentRecord
from hpckit.deploy.upgrade import (
    UPGRADE_TIMEOUT_S,
    LiveCluster,
    UpgradeRefused,
    batch_size,
    live_cluster,
    plan_upgrade,
)
from hpckit.errors import InputError
from hpckit.slurm_releases import Version

HOSTS = frozenset({"ctl", "login", *(f"node{i}" for i in range(1, 9))})


def blueprint(version: str | None = "24.11.6", provider: str = "lab", extra: str = "") -> Blueprint:
    slurm = f'slurm:\n  version: "{version}"\n{extra}' if version else ""
    return parse_blueprint(
        f"name: up\nprovider: {{type: {provider}}}\ncontroller: {{host: ctl, address: 10.77.0.10}}\n"
        "login:\n  - {host: login, address: 10.77.0.11}\n"
        "partitions:\n  - name: gpu\n    nodes: node[1-8]\n    addresses: 10.77.0.[21-28]\n"
        "    hardware: {cpus: 2, cores_per_socket: 2, memory_mb: 1000, gpus: {type: lab, count: 4}}\n" + slurm,
        "up.yaml",
    )


def live(version: str = "24.11.5", hosts: frozenset[str] = HOSTS) -> LiveCluster:
    timeouts = {"SlurmctldTimeout": 120, "SlurmdTimeout": 300}
    return LiveCluster("up", Version.parse(version), hosts, timeouts, "/var/spool/slurmctld")


# --- refusals ---------------------------------------------------------------------------------------------


def test_a_downgrade_is_refused() -> None:
    downgrade = r"from Slurm 24\.11\.6 to 24\.11\.5: 24\.11\.6 -> 24\.11\.5 is a downgrade"
    with pytest.raises(UpgradeRefused, match=downgrade):
        plan_upgrade(live("24.11.6"), blueprint("24.11.5"))
    with pytest.raises(UpgradeRefused, match="is a downgrade"):
        plan_upgrade(live("25.05.2"), blueprint("24.11.5"))


def test_a_jump_slurm_does_not_read_is_refused_naming_the_path() -> None:
    with pytest.raises(UpgradeRefused) as info:
        plan_upgrade(live("22.05.8"), blueprint("24.11.5"))
    assert str(info.value) == (
        "cannot upgrade up from Slurm 22.05.8 to 24.11.5: Slurm 24.11 accepts upgrades from 24.05, 23.11, 23.02 "
        "only, not from 22.05; upgrade through 22.05 -> 23.02 -> 24.11"
    )
    assert info.value.exit_code == 2
    with pytest.raises(UpgradeRefused, match=r"26\.05 accepts upgrades from 25\.11, 25\.05, 24\.11 only.*-> 26\.05"):
        plan_upgrade(live("22.05.8"), blueprint("26.05.1"))


def test_other_hosts_are_refused() -> None:
    with pytest.raises(UpgradeRefused, match=r"\(new: node8; gone: node9\); an upgrade changes only Slurm"):
        plan_upgrade(live(hosts=(HOSTS - {"node8"}) | {"node9"}), blueprint())


@pytest.mark.parametrize("spec", ["0", "0%", "abc", "-2", "150%", "2.5"])
def test_a_bad_batch_is_refused(spec: str) -> None:
    with pytest.raises(InputError, match="--batch"):
        batch_size(spec, 8)


# --- the plan ---------------------------------------------------------------------------------------------


def test_the_plan_follows_schedmd_s_order() -> None:
    plan = plan_upgrade(live(), blueprint(), batch="3")
    assert [s.kind for s in plan.steps] == [
        "backup",
        "raise_timeouts",
        "slurmdbd",
        "slurmctld",
        "slurmd",
        "slurmd",
        "slurmd",
        "clients",
        "restore_timeouts",
        "verify",
    ]
    assert plan.batches == [("node1", "node2", "node3"), ("node4", "node5", "node6"), ("node7", "node8")]
    assert [s.restarts for s in plan.steps if s.restarts] == ["slurmdbd", "slurmctld", "slurmd", "slurmd", "slurmd"]
    backup = plan.steps[0]
    assert backup.hosts == ("ctl",)
    assert "mysqldump --single-transaction slurm_acct_db -> /var/backups/hpckit/up-24.11.5-to-24.11.6/" in backup.action
    assert "StateSaveLocation /var/spool/slurmctld -> " in backup.action
    assert plan.steps[1].action == (
        f"SlurmctldTimeout 120 -> {UPGRADE_TIMEOUT_S}, SlurmdTimeout 300 -> {UPGRADE_TIMEOUT_S} in slurm.conf; "
        "scontrol reconfigure"
    )
    assert plan.steps[-2].action.startswith(f"SlurmctldTimeout {UPGRADE_TIMEOUT_S} -> 120, SlurmdTimeout")
    assert plan.steps[-1].hosts == ("ctl", *(f"node{i}" for i in range(1, 9)), "login")
    assert not plan.major and "wait until it answers" in plan.steps[2].action


@pytest.mark.parametrize(
    ("spec", "sizes"),
    [("25%", [2, 2, 2, 2]), ("10%", [1] * 8), ("100%", [8]), ("3", [3, 3, 2]), ("20", [8]), ("30%", [3, 3, 2])],
)
def test_batches_are_a_count_or_a_share_of_the_nodes(spec: str, sizes: list[int]) -> None:
    plan = plan_upgrade(live(), blueprint(), batch=spec)
    assert [len(b) for b in plan.batches] == sizes
    assert [h for b in plan.batches for h in b] == [f"node{i}" for i in range(1, 9)]


def test_a_major_upgrade_converts_the_database_and_rebuilds_pyxis() -> None:
    plan = plan_upgrade(live("24.11.5"), blueprint("25.05.3", provider="static"), batch="50%")
    assert plan.major
    kinds = [s.kind for s in plan.steps]
    assert kinds.index("clients") < kinds.index("spank") < kinds.index("restore_timeouts")
    spank = plan.steps[kinds.index("spank")]
    assert spank.hosts == (*(f"node{i}" for i in range(1, 9)), "login")
    assert spank.action == "rebuild pyxis 0.24.0 against Slurm 25.05.3"
    assert "converts the database" in plan.steps[kinds.index("slurmdbd")].action
    assert plan.packages.startswith("built on ctl from SchedMD's source with pmix, hwloc")
    assert plan.steps[kinds.index("slurmctld")].action.startswith("install Slurm 25.05.3; restart slurmctld")
    assert plan.lines()[0] == (
        "upgrade up: Slurm 24.11.5 -> 25.05.3 (a new release series: slurmdbd converts the database; install: build)"
    )


def test_a_micro_release_keeps_the_spank_plugins() -> None:
    plan = plan_upgrade(live("24.11.5"), blueprint("24.11.6", provider="static"))
    assert "spank" not in [s.kind for s in plan.steps]


def test_without_accounting_there_is_no_slurmdbd_and_no_dump() -> None:
    plan = plan_upgrade(live(), blueprint(extra="  accounting: false\n"))
    assert "slurmdbd" not in [s.kind for s in plan.steps]
    assert "mysqldump" not in plan.steps[0].action and plan.steps[-1].action.startswith("slurmctld, every slurmd")


def test_at_the_target_there_is_nothing_to_do() -> None:
    plan = plan_upgrade(live("24.11.6"), blueprint("24.11.6"))
    assert plan.steps == () and plan.lines() == ["up: Slurm 24.11.6 is what the blueprint names; nothing to upgrade"]
    site = "  install: packages\n  packages: ['deb http://repo.invalid/slurm bookworm main']\n"
    assert plan_upgrade(live("25.05.2"), blueprint("25.05", extra=site)).steps == ()


def test_from_the_distribution_s_22_05_to_23_11() -> None:
    plan = plan_upgrade(live("22.05.8"), blueprint("23.11.10"))
    assert plan.major and plan.steps[2].kind == "slurmdbd"
    # 22.05 applies a timeout change with `scontrol reconfigure` too (the per-release table)
    assert plan.steps[1].action.endswith("scontrol reconfigure")


# --- the record and the command -------------------------------------------------------------------------


def _record(state: Path, bp: Blueprint, slurm: str, conf: str) -> None:
    rec = DeploymentRecord.create(bp.cluster_name, state)
    rec.write_json("blueprint.json", bp.model_dump(mode="json"))
    rec.write_json("versions.json", {"hpckit": "0", "slurm": slurm})
    rec.write_config("ctl", "/etc/slurm/slurm.conf", conf)
    rec.mark_current()


def test_the_live_cluster_comes_from_the_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HPCKIT_STATE", str(tmp_path))
    conf = "ClusterName=up\nStateSaveLocation=/srv/state # here\nslurmdtimeout=600\nSlurmctldTimeout=x\n"
    _record(tmp_path, blueprint("24.11.5"), "24.11.5", conf)
    got = live_cluster("up")
    assert got.version == Version.parse("24.11.5") and got.version_seen
    assert got.timeouts == {"SlurmctldTimeout": 120, "SlurmdTimeout": 600} and got.state_save == "/srv/state"
    assert got.hosts == HOSTS
    _record(tmp_path, blueprint(None), "unknown (controller unreachable)", "")
    unseen = live_cluster("up")
    assert unseen.version == Version.parse("22.05") and not unseen.version_seen
    assert unseen.state_save == "/var/spool/slurmctld"


def _hpckit(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HPCKIT_STATE": str(state)}
    cmd = [sys.executable, "-m", "hpckit", "upgrade", *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120, check=False)


def test_the_command_prints_the_plan_and_refuses_with_exit_2(tmp_path: Path) -> None:
    target = tmp_path / "up.yaml"
    target.write_text(blueprint("24.11.6").model_dump_json())  # JSON is YAML
    assert "no deployment recorded for cluster 'up'" in _hpckit(tmp_path, str(target), "--dry-run").stderr
    _record(tmp_path, blueprint("24.11.5"), "24.11.5", "SlurmdTimeout=300\n")
    done = _hpckit(tmp_path, str(target), "--dry-run", "--batch", "50%")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("upgrade up: Slurm 24.11.5 -> 24.11.6 (a micro release")
    assert lines[1].startswith("packages: built on ctl from SchedMD's source")
    assert [line.split()[1] for line in lines[2:]][4:6] == ["slurmd", "slurmd"]
    as_json = json.loads(_hpckit(tmp_path, str(target), "--dry-run", "--json").stdout)
    assert as_json["from"] == "24.11.5" and as_json["to"] == "24.11.6" and as_json["batch_size"] == 1
    not_yet = _hpckit(tmp_path, str(target))
    # a release the roles cannot install here, or nobody to answer the question: nothing runs
    assert not_yet.returncode == 2 and ("not yet supported" in not_yet.stderr or "add --yes" in not_yet.stderr)
    _record(tmp_path, blueprint("24.11.6"), "24.11.6", "")
    again = _hpckit(tmp_path, str(target))  # at the target: nothing to do, with or without --dry-run
    assert again.returncode == 0 and "nothing to upgrade" in again.stdout
    _record(tmp_path, blueprint(None), "22.05.8", "")
    refused = _hpckit(tmp_path, str(target), "--dry-run")
    assert refused.returncode == 2 and "upgrade through 22.05 -> 23.02 -> 24.11" in refused.stderr
    assert refused.stdout == ""


def test_plan_labels_changes_by_the_release_the_record_saw_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`hpckit plan` through the CLI, its check run replaced by one slurm.conf diff: the running daemons take the
    change, so its label follows the release the record saw running (22.05 restarts slurmctld for a new
    SchedulerType, 24.11 reconfigures), not the blueprint's; without a record, the blueprint's."""
    from click.testing import CliRunner

    from hpckit.cli import cli
    from hpckit.cli import deploy as cli_deploy
    from hpckit.deploy.apply import PlanResult
    from hpckit.deploy.changes import key_action
    from hpckit.deploy.events import ConfigDiff, Tracker
    from hpckit.deploy.runner import RunOutcome

    before, after = "ClusterName=up\nSchedulerType=sched/backfill\n", "ClusterName=up\nSchedulerType=sched/builtin\n"

    def check_run(bp: Blueprint, tracker: Tracker, sink: object) -> PlanResult:
        tracker.diffs.append(ConfigDiff("ctl", "Write slurm.conf", "/etc/slurm/slurm.conf", before, after))
        return PlanResult(RunOutcome("successful", 0, None))

    monkeypatch.setattr(cli_deploy, "plan", check_run)
    monkeypatch.setenv("HPCKIT_STATE", str(tmp_path))
    target = tmp_path / "up.yaml"
    target.write_text(blueprint("24.11.6").model_dump_json())  # JSON is YAML
    old, new = key_action("SchedulerType", "22.05").label, key_action("SchedulerType", "24.11").label
    assert old != new  # else this test could not tell the releases apart

    def planned() -> tuple[str, dict[str, object]]:
        text = CliRunner().invoke(cli, ["plan", str(target)])
        report = CliRunner().invoke(cli, ["plan", str(target), "--json"])
        assert text.exit_code == 0 and report.exit_code == 0, text.output + report.output
        return text.output, json.loads(report.output)

    output, report = planned()  # no record: the blueprint's 24.11
    assert report["slurm_release"] == "24.11" and report["action"] == new
    _record(tmp_path, blueprint(None), "22.05.8", before)  # the record: 22.05.8 runs
    target.write_text(blueprint(None).model_dump_json())  # the blueprint names no release: 22.05 here
    output, report = planned()
    assert report["slurm_release"] == "22.05" and report["action"] == old
    assert report["changes"] == [{"file": "/etc/slurm/slurm.conf", "what": "schedulertype changed", "action": old}]
    assert f"{old:<26} /etc/slurm/slurm.conf: schedulertype changed" in output
    assert f"applying this plan needs: {old} (Slurm 22.05)" in output


def test_deploy_and_plan_never_change_the_release_the_record_saw_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hpckit.deploy.upgrade import ReleaseChangeRefused, release_guard

    monkeypatch.setenv("HPCKIT_STATE", str(tmp_path))
    release_guard(blueprint("24.11.6"))  # no record: a new cluster
    _record(tmp_path, blueprint("24.11.5"), "24.11.5", "")
    release_guard(blueprint("24.11.5"))
    with pytest.raises(ReleaseChangeRefused, match=r"up runs Slurm 24.11.5; the blueprint names Slurm 24.11.6 \(built "
                       r"from SchedMD's source\): `hpckit deploy` never changes the Slurm release; run `hpckit upgrade "
                       r"up.yaml`"):  # fmt: skip
        release_guard(blueprint("24.11.6"), "up.yaml")
    _record(tmp_path, blueprint(None), "22.05.8", "")
    release_guard(blueprint(None))  # the distribution's 22.05, whatever its micro release
    with pytest.raises(ReleaseChangeRefused, match=r"cannot upgrade that way either: .*22.05 -> 23.02 -> 24.11"):
        release_guard(blueprint("24.11.5"))
    rec = DeploymentRecord.create("up", tmp_path)
    rec.write_json("versions.json", {"slurm": "24.11.5", "slurm_install": {"mode": "distro"}})
    rec.mark_current()
    with pytest.raises(ReleaseChangeRefused, match=r"runs Slurm 24.11.5 \(the distribution's packages\).*or where it"):
        release_guard(blueprint("24.11.5"))
    target = tmp_path / "up.yaml"
    target.write_text(blueprint("24.11.6").model_dump_json())
    for command in ("deploy", "plan"):
        env = {**os.environ, "HPCKIT_STATE": str(tmp_path)}
        done = subprocess.run([sys.executable, "-m", "hpckit", command, str(target)], env=env, capture_output=True,
                              text=True, timeout=120, check=False)  # fmt: skip
        assert done.returncode == 2 and "never changes the Slurm release" in done.stderr, done.stderr
