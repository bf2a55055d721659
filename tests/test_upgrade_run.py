"""`hpckit upgrade` without --dry-run: what Python decides (upgrade.yml's variables, the messages of a failed
step, exit codes, the record) with a stand-in for the runner, and upgrade.yml itself read statically: its plays
in the plan's order, every one stopping the run at the first failure."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from ruamel.yaml import YAML

from hpckit.blueprint import Blueprint, parse_blueprint
from hpckit.cli import cli
from hpckit.clusters import ClusterDir
from hpckit.deploy import upgrade_run
from hpckit.deploy.events import Tracker
from hpckit.deploy.record import DeploymentRecord
from hpckit.deploy.runner import PlaybookRun, RunOutcome
from hpckit.deploy.upgrade import UPGRADE_TIMEOUT_S, LiveCluster, plan_upgrade
from hpckit.deploy.upgrade_run import failure_lines, upgrade_extravars
from hpckit.paths import ansible_dir
from hpckit.slurm_releases import Version

NODES = [f"node{i}" for i in range(1, 9)]
HOSTS = frozenset({"ctl", "login", *NODES})
ANSIBLE = ansible_dir()


def blueprint(version: str | None = "24.11.6", extra: str = "") -> Blueprint:
    slurm = f'slurm:\n  version: "{version}"\n{extra}' if version else ""
    return parse_blueprint(
        "name: up\nprovider: {type: static}\ncontroller: {host: ctl, address: 10.77.200.10}\n"
        "login:\n  - {host: login, address: 10.77.200.11}\n"
        "partitions:\n  - name: gpu\n    nodes: node[1-8]\n    addresses: 10.77.200.[21-28]\n"
        "    hardware: {cpus: 2, cores_per_socket: 2, memory_mb: 1000, gpus: {type: lab, count: 4}}\n" + slurm,
        "up.yaml",
    )


def live(version: str = "24.11.5", timeouts: Mapping[str, int] | None = None) -> LiveCluster:
    timeouts = dict(timeouts or {"SlurmctldTimeout": 120, "SlurmdTimeout": 300})
    return LiveCluster("up", Version.parse(version), HOSTS, timeouts, "/srv/state")


# --- upgrade.yml's variables ------------------------------------------------------------------------------


@pytest.mark.parametrize(("spec", "size"), [("3", 3), ("25%", 2), ("10%", 1), ("100%", 8), ("20", 8)])
def test_the_batch_is_the_plan_s(spec: str, size: int) -> None:
    plan = plan_upgrade(live(), blueprint(), spec)
    extravars = upgrade_extravars(plan, live(), blueprint())
    assert extravars["slurm_upgrade_batch"] == size == len(plan.batches[0])


def test_the_variables_follow_the_plan() -> None:
    now = live(timeouts={"SlurmctldTimeout": 120, "SlurmdTimeout": 7200})
    plan = plan_upgrade(now, blueprint("25.05.3"))
    extravars = upgrade_extravars(plan, now, blueprint("25.05.3"))
    assert extravars == {
        "slurm_upgrade_version": "25.05.3",
        "slurm_upgrade_batch": 1,
        "slurm_upgrade_timeouts": {"SlurmctldTimeout": 120, "SlurmdTimeout": 7200},
        # a longer timeout than the upgrade's is kept
        "slurm_upgrade_raised_timeouts": {"SlurmctldTimeout": UPGRADE_TIMEOUT_S, "SlurmdTimeout": 7200},
        "slurm_upgrade_timeouts_apply": "reconfigure",
        "slurm_upgrade_backup_dir": "/var/backups/hpckit/up-24.11.5-to-25.05.3",
        "slurm_upgrade_state_save": "/srv/state",
        "slurm_upgrade_spank": True,  # a new series with pyxis on the nodes
    }
    assert extravars["slurm_upgrade_backup_dir"] in plan.steps[0].action
    micro = plan_upgrade(now, blueprint("24.11.6"))
    assert upgrade_extravars(micro, now, blueprint("24.11.6"))["slurm_upgrade_spank"] is False


def test_every_variable_has_a_role_default_and_is_in_the_contract() -> None:
    defaults = YAML(typ="safe").load((ANSIBLE / "roles" / "slurm_upgrade" / "defaults" / "main.yml").read_text())
    contract = (ANSIBLE / "ANSIBLE-CONTRACT.md").read_text(encoding="utf-8")
    names = set(upgrade_extravars(plan_upgrade(live(), blueprint()), live(), blueprint()))
    assert names <= set(defaults)
    assert [n for n in sorted(names) if f"`{n}`" not in contract] == []


# --- upgrade.yml, statically ------------------------------------------------------------------------------


def _plays() -> list[dict[str, Any]]:
    plays: list[dict[str, Any]] = YAML(typ="safe").load((ANSIBLE / "upgrade.yml").read_text())
    return plays


def test_the_plays_come_in_the_plan_s_order() -> None:
    """The plan and the playbook cannot drift: the plays' steps are the kinds of a plan that has all of them
    (accounting, a new series, pyxis), in its order, after the survey."""
    plan = plan_upgrade(live("24.11.5"), blueprint("25.05.3"), "4")
    kinds = list(dict.fromkeys(step.kind for step in plan.steps))
    assert set(kinds) == {"backup", "raise_timeouts", "slurmdbd", "slurmctld", "slurmd", "clients", "spank"} | {
        "restore_timeouts",
        "verify",
    }
    steps = [play["vars"]["slurm_upgrade_step"] for play in _plays()]
    assert steps == ["survey", "build", *kinds]  # install: build's packages exist before anything changes


def test_every_play_stops_the_run_at_the_first_failure() -> None:
    for play in _plays():
        assert play.get("any_errors_fatal") is True, play["name"]
        if "serial" in play:
            assert "slurm_upgrade_batch" in play["serial"] and play["max_fail_percentage"] == 0, play["name"]
    batched = [p["vars"]["slurm_upgrade_step"] for p in _plays() if "serial" in p]
    assert batched == ["slurmd", "spank"]


def _tasks(path: Path) -> Iterator[dict[str, Any]]:
    for task in YAML(typ="safe").load(path.read_text()) or []:
        yield task
        for key in ("block", "rescue", "always"):
            yield from task.get(key, [])


def test_the_upgrade_reads_no_secret() -> None:
    """The dump runs as root over MariaDB's Unix socket (as slurm_accounting creates the database): no task
    reads the database password or slurmdbd.conf, so none needs no_log and a failure keeps its output."""
    for path in sorted((ANSIBLE / "roles" / "slurm_upgrade" / "tasks").glob("*.yml")):
        for task in _tasks(path):
            text = repr(task)
            assert not any(m in text for m in ("slurp", "password", "slurmdbd.conf", "StoragePass")), path
            assert "no_log" not in task, path


def test_every_host_task_changes_nothing_at_the_target() -> None:
    """What changes a host is guarded: by where the survey found it, by the pending upgrade, or by `creates`;
    the reads and waits never report a change."""
    for path in sorted((ANSIBLE / "roles" / "slurm_upgrade" / "tasks").glob("*.yml")):
        for task in _tasks(path):
            module = next(k for k in task if k.startswith("ansible.builtin."))
            if module in ("ansible.builtin.debug", "ansible.builtin.set_fact", "ansible.builtin.include_tasks"):
                continue
            guarded = "when" in task or task.get("changed_when") is False
            assert guarded or "creates" in str(task.get(module)), f"{path.name}: {task['name']}"


# --- failures, from runner events -------------------------------------------------------------------------


def _events(*events: dict[str, Any]) -> Tracker:
    tracker = Tracker()
    for event in events:
        tracker.feed(event)
    return tracker


PLAY = "Upgrade slurmd: the new release, a batch of nodes at a time"


def _play(name: str = PLAY) -> dict[str, Any]:
    return {"event": "playbook_on_play_start", "event_data": {"play": name}}


def _failed(host: str, task: str, res: dict[str, Any]) -> dict[str, Any]:
    return {"event": "runner_on_failed", "event_data": {"host": host, "task": task, "res": res}}


def test_a_failed_task_names_the_step_host_and_its_stderr() -> None:
    res = {"msg": "non-zero return code", "rc": 1, "stderr": "warming up\nslurmd: fatal: Unable to bind port 6818"}
    tracker = _events(_play(), _failed("node3", "Restart the daemon on the new release: slurmd", res))
    [line] = failure_lines(tracker, RunOutcome("failed", 2, None))
    assert line.startswith(f"upgrade stopped at step {PLAY!r} on node3: task 'Restart the daemon on the new")
    assert line.endswith("failed: non-zero return code\nstderr: warming up\nslurmd: fatal: Unable to bind port 6818")


def test_a_lost_host_names_the_step_and_host() -> None:
    lost = {"msg": "Failed to connect to the host via ssh: Connection refused", "unreachable": True}
    event = {"event": "runner_on_unreachable", "event_data": {"host": "node2", "task": "Upgrade slurmd", "res": lost}}
    [line] = failure_lines(_events(_play(), event), RunOutcome("failed", 4, None))
    assert line == (
        f"upgrade stopped at step {PLAY!r} on node2: task 'Upgrade slurmd' unreachable (SSH): "
        "Failed to connect to the host via ssh: Connection refused"
    )


def test_ansible_stopping_outside_a_task_shows_its_last_lines() -> None:
    tracker = _events({"event": "error", "stdout": "ERROR! the role 'slurm_packages' was not found"})
    lines = failure_lines(tracker, RunOutcome("failed", 1, None))
    assert lines == [
        "upgrade stopped: Ansible ended failed (rc 1) outside any task:",
        "ERROR! the role 'slurm_packages' was not found",
    ]


# --- the command, with a stand-in runner -------------------------------------------------------------------


class FakeRunner:
    """Plays back events as upgrade.yml would send them; records what it was asked to run."""

    def __init__(self, events: list[dict[str, Any]], status: str = "successful") -> None:
        self.events = events
        self.status = status
        self.calls: list[tuple[dict[str, Any], PlaybookRun]] = []

    def __call__(
        self,
        inventory: Mapping[str, Any],
        extravars: Mapping[str, Any],
        run: PlaybookRun,
        on_event: Any,
        keep_events: Path | None = None,
    ) -> RunOutcome:
        self.calls.append((dict(extravars), run))
        for event in self.events:
            on_event(event)
        return RunOutcome(self.status, 0 if self.status == "successful" else 2, keep_events)


def _verified(version: str) -> list[dict[str, Any]]:
    reported = {"stdout": f"slurmctld {version}\nnode1 {version}"}
    verify = {"host": "ctl", "task": upgrade_run.VERIFY_TASK, "res": reported}
    stats = {"artifact_data": {"slurm_upgrade_backups": ["/var/backups/hpckit/x/slurm_acct_db.sql"]}}
    return [
        _play("Verify: every daemon reports the target"),
        {"event": "runner_on_ok", "event_data": verify},
        {"event": "playbook_on_stats", "event_data": stats},
    ]


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HPCKIT_STATE", str(tmp_path / "state"))
    rec = DeploymentRecord.create("up")
    rec.write_json("blueprint.json", blueprint("22.05.7").model_dump(mode="json"))
    rec.write_json("versions.json", {"hpckit": "0", "slurm": "22.05.7"})
    rec.write_json("access.json", {"cluster": "up"})
    rec.write_config("ctl", "/etc/slurm/slurm.conf", "SlurmdTimeout=300\n")
    rec.mark_current()
    target = tmp_path / "up.yaml"
    # A micro release of the distribution's series: what the roles install on every branch of hpckit.
    target.write_text(blueprint("22.05.8").model_dump_json())  # JSON is YAML
    return target


def _upgrade(monkeypatch: pytest.MonkeyPatch, runner: FakeRunner, *args: str) -> Any:
    monkeypatch.setattr(upgrade_run, "run_playbook", runner)
    return CliRunner().invoke(cli, ["upgrade", *args])


def test_a_successful_upgrade_moves_the_record_to_the_new_release(state: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runner = FakeRunner(_verified("22.05.8"))
    done = _upgrade(monkeypatch, runner, str(state), "--yes", "--batch", "25%", "-q")
    assert done.exit_code == 0, done.output
    [(extravars, run)] = runner.calls
    assert run.playbook == "upgrade.yml" and extravars["slurm_upgrade_batch"] == 2
    assert extravars["slurm_upgrade_version"] == "22.05.8" and "hpckit_cluster_name" in extravars
    assert "Slurm 22.05.8 on every host" in done.output
    assert "backup on the controller: /var/backups/hpckit/x/slurm_acct_db.sql" in done.output
    current = ClusterDir.of("up").current
    assert json.loads((current / "versions.json").read_text())["slurm"] == "22.05.8"
    upgrade = json.loads((current / "upgrade.json").read_text())
    assert upgrade["backups"] == ["/var/backups/hpckit/x/slurm_acct_db.sql"] and upgrade["to"] == "22.05.8"
    assert (current / "configs" / "ctl" / "etc" / "slurm" / "slurm.conf").read_text() == "SlurmdTimeout=300\n"
    assert (current / "access.json").is_file()
    again = _upgrade(monkeypatch, FakeRunner([]), str(state), "--yes")  # at the target: nothing runs
    assert again.exit_code == 0 and "nothing to upgrade" in again.output


def test_a_failed_step_exits_1_naming_it_and_keeps_the_record(state: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    res = {"msg": "non-zero return code", "stderr": "slurmd: fatal: Unable to bind port 6818"}
    runner = FakeRunner([_play(), _failed("node3", "Restart slurmd", res)], status="failed")
    done = _upgrade(monkeypatch, runner, str(state), "--yes", "-q")
    assert done.exit_code == 1
    assert f"upgrade stopped at step {PLAY!r} on node3: task 'Restart slurmd' failed" in done.output
    assert "stderr: slurmd: fatal: Unable to bind port 6818" in done.output
    assert json.loads((ClusterDir.of("up").current / "versions.json").read_text())["slurm"] == "22.05.7"
    lost = {"msg": "Failed to connect to the host via ssh: Connection timed out"}
    event = {"event": "runner_on_unreachable", "event_data": {"host": "node5", "task": "Upgrade slurmd", "res": lost}}
    unreachable = _upgrade(monkeypatch, FakeRunner([_play(), event], status="failed"), str(state), "--yes", "-q")
    assert unreachable.exit_code == 1
    assert f"step {PLAY!r} on node5: task 'Upgrade slurmd' unreachable (SSH): Failed to connect" in unreachable.output


def test_refusals_exit_2_before_anything_runs(state: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runner = FakeRunner([])
    downgrade = state.with_name("down.yaml")
    downgrade.write_text(blueprint("22.05.6").model_dump_json())
    refused = _upgrade(monkeypatch, runner, str(downgrade), "--yes")
    assert refused.exit_code == 2 and "is a downgrade" in refused.output
    jump = state.with_name("jump.yaml")
    jump.write_text(blueprint("24.11.5").model_dump_json())
    too_far = _upgrade(monkeypatch, runner, str(jump), "--yes")
    assert too_far.exit_code == 2 and "upgrade through 22.05 -> 23.02 -> 24.11" in too_far.output
    # a release the roles cannot install (yet) on these hosts is refused before anything, and before the question
    built = state.with_name("built.yaml")
    built.write_text(blueprint("23.11.10").model_dump_json())  # built from source, on static hosts
    not_installable = _upgrade(monkeypatch, runner, str(built))
    assert not_installable.exit_code == 2 and "not yet supported" in not_installable.output
    unanswered = _upgrade(monkeypatch, runner, str(state))  # no terminal to ask, no --yes
    assert unanswered.exit_code == 2 and "add --yes" in unanswered.output
    bad_batch = _upgrade(monkeypatch, runner, str(state), "--yes", "--batch", "0")
    assert bad_batch.exit_code == 2 and "--batch '0'" in bad_batch.output
    assert runner.calls == []
