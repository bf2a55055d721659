"""The blueprint's users: validated (distinct uids and gids), passed to the roles, and the unix_users role's own
check run by Ansible over a local connection in check mode against this machine's real passwd and group files
(read with getent; nothing is created): a name or number that belongs to someone else fails the host with both."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hpckit.blueprint import BlueprintError, parse_blueprint
from hpckit.deploy.inventory import build_extravars
from tests.test_ansible_static import ANSIBLE, _ansible_env, _tool
from tests.test_blueprint import GOOD


def test_users_reach_the_roles_with_their_defaults() -> None:
    bp = parse_blueprint(GOOD + "users:\n  alice: {uid: 4101}\n  bob: {uid: 4102, gid: 5000, shell: /bin/sh}\n")
    assert build_extravars(bp)["unix_users_list"] == [
        {"name": "alice", "uid": 4101, "gid": 4101, "shell": "/bin/bash", "home": "/home/alice"},
        {"name": "bob", "uid": 4102, "gid": 5000, "shell": "/bin/sh", "home": "/home/bob"},
    ]
    assert build_extravars(parse_blueprint(GOOD))["unix_users_list"] == []


@pytest.mark.parametrize(
    ("users", "message"),
    [
        ("  alice: {uid: 4101}\n  bob: {uid: 4101}\n", "bob and alice have the same uid 4101"),
        ("  alice: {uid: 4101}\n  bob: {uid: 4102, gid: 4101}\n", "bob and alice have the same gid 4101"),
        ("  alice: {uid: 0}\n", "greater than or equal to 1000"),
        ("  Alice: {uid: 4101}\n", "Alice"),
    ],
)
def test_bad_users_are_located(users: str, message: str) -> None:
    with pytest.raises(BlueprintError, match=message):
        parse_blueprint(GOOD + "users:\n" + users, "bp.yaml")


def _check(tmp_path: Path, users: list[dict[str, Any]]) -> subprocess.CompletedProcess[str]:
    inventory = {
        "all": {"hosts": {"here": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}
    }
    (tmp_path / "inventory.json").write_text(json.dumps(inventory))
    play = [{"hosts": "all", "gather_facts": False, "roles": [{"role": str(ANSIBLE / "roles" / "unix_users")}]}]
    (tmp_path / "play.json").write_text(json.dumps(play))
    argv = [_tool("ansible-playbook"), "--check", "-i", str(tmp_path / "inventory.json"), str(tmp_path / "play.json")]
    extra = json.dumps({"unix_users_list": users})
    return subprocess.run([*argv, "-e", extra], env=_ansible_env(tmp_path), capture_output=True, text=True, check=False)


def _user(name: str, uid: int, gid: int | None = None) -> dict[str, Any]:
    return {"name": name, "uid": uid, "gid": uid if gid is None else gid, "shell": "/bin/sh", "home": f"/home/{name}"}


def test_someone_elses_name_uid_or_gid_fails_the_host(tmp_path: Path) -> None:
    done = _check(tmp_path, [_user("root", 4000), _user("hpckit-nobody", 0, 45601)])
    assert done.returncode == 2, done.stdout[-3000:]
    assert "here: root is uid:gid 0:0 here, the blueprint says 4000:4000" in done.stdout, done.stdout[-3000:]
    assert "uid 0 is root's here, the blueprint gives it to hpckit-nobody" in done.stdout, done.stdout[-3000:]


def test_a_missing_user_is_made_and_an_existing_one_left(tmp_path: Path) -> None:
    done = _check(tmp_path, [_user("hpckit-nobody", 45601), _user("root", 0)])
    assert done.returncode == 0, done.stdout[-3000:]
    recap = done.stdout[done.stdout.index("PLAY RECAP") :]
    assert "changed=2" in recap, done.stdout[-3000:]  # its group and itself, root untouched
    assert "hpckit-nobody" in done.stdout and "item=root" not in done.stdout


def test_a_host_that_has_every_user_ends_the_role_after_one_lookup(tmp_path: Path) -> None:
    """A no-op deploy: one round trip, then `end_role` (the group and user tasks were queued on every host)."""
    done = _check(tmp_path, [_user("root", 0)])
    assert done.returncode == 0, done.stdout[-3000:]
    recap = done.stdout[done.stdout.index("PLAY RECAP") :]
    assert "ok=1 " in recap and "skipped=0" in recap, done.stdout  # the lookup alone (end_role prints nothing)
    assert "Create the users" not in done.stdout, done.stdout
