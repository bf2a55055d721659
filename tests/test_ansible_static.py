"""Static checks of ansible/: syntax, rendered configs, secrets hygiene. No host is contacted. (ansible-lint runs
once per CI, in scripts/test.sh.)"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jinja2
import jinja2.nativetypes
import pytest
from ruamel.yaml import YAML

from hpckit.deploy.targets import vm_extravars
from hpckit.paths import ansible_dir

ANSIBLE = ansible_dir()
ROLES = ANSIBLE / "roles"
DATA = Path(__file__).parent / "data" / "ansible"
BIN = Path(sys.executable).parent


def _yaml(path: Path) -> Any:
    return YAML(typ="safe").load(path.read_text(encoding="utf-8"))


def _tool(name: str) -> str:
    found = shutil.which(name) or (str(BIN / name) if (BIN / name).exists() else None)
    if found is None:
        pytest.skip(f"{name} is not installed")
    return found


def _ansible_env(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "ANSIBLE_CONFIG": str(ANSIBLE / "ansible.cfg"),
        "ANSIBLE_CACHE_PLUGIN_CONNECTION": str(tmp_path / "facts"),
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "tmp"),
        "ANSIBLE_NOCOLOR": "1",
    }


# ------------------------------------------------------------------ rendering with plain jinja2


def _contract_vars(**changes: Any) -> dict[str, Any]:
    """Role defaults (the literal ones) overlaid with the sample extravars, as Ansible would see them."""
    merged: dict[str, Any] = {}
    for role in ("slurm", "slurm_compute", "slurm_accounting"):
        defaults = _yaml(ROLES / role / "defaults" / "main.yml")
        merged.update({k: v for k, v in defaults.items() if not (isinstance(v, str) and "{{" in v)})
    merged.update(_yaml(DATA / "extravars.yml"))
    # Derived in the role defaults from the inventory: the controller (and slurmdbd) address.
    merged["slurm_dbd_addr"] = merged["slurm_controller_addr"]
    merged["inventory_hostname"] = "node1"
    merged.update(changes)
    return merged


def _to_bool(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in {"yes", "true", "on", "1", "y"}
    return bool(value)


def _render(role: str, template: str, variables: dict[str, Any]) -> str:
    # Ansible's template module renders with trim_blocks on; `bool` is its filter.
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(ROLES / role / "templates"),
        trim_blocks=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters["bool"] = _to_bool
    return env.get_template(template).render(variables)


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line and not line.startswith("#")]


def test_slurm_conf_has_the_contract_settings() -> None:
    text = _render("slurm_common", "slurm.conf.j2", _contract_vars())
    lines = _lines(text)
    assert text.startswith("# slurm.conf of cluster lab, managed by hpckit.")
    for wanted in (
        "ClusterName=lab",
        "SlurmctldHost=ctl(10.77.0.10)",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core_Memory",
        "GresTypes=gpu",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/affinity",
        "SlurmdParameters=config_overrides",
        "AccountingStorageType=accounting_storage/slurmdbd",
        "AccountingStorageHost=10.77.0.10",
        "JobAcctGatherType=jobacct_gather/linux",
        "ReturnToService=2",
        "SlurmctldLogFile=/var/log/slurm/slurmctld.log",
        "SlurmdLogFile=/var/log/slurm/slurmd.log",
        "StateSaveLocation=/var/spool/slurmctld",
        "SlurmdSpoolDir=/var/spool/slurmd",
        "NodeName=node[1-4] NodeAddr=10.77.0.[21-24] CPUs=8 Sockets=1 CoresPerSocket=4 ThreadsPerCore=2 "
        "RealMemory=3000 Gres=gpu:h100:4 State=UNKNOWN",
        "PartitionName=gpu Nodes=node[1-4] Default=YES MaxTime=INFINITE State=UP",
    ):
        assert wanted in lines, wanted
    keys = [line.split("=", 1)[0] for line in lines if not line.startswith(("NodeName=", "PartitionName="))]
    assert len(keys) == len(set(keys)), "a setting appears twice"


def test_slurm_conf_defaults_are_those_of_a_real_cluster() -> None:
    lab_only = ("slurm_proctrack_type", "slurm_task_plugin", "slurmd_config_overrides")
    variables = {k: v for k, v in _contract_vars().items() if k not in lab_only}
    variables.update({k: v for k, v in _yaml(ROLES / "slurm" / "defaults" / "main.yml").items() if k in lab_only})
    lines = _lines(_render("slurm_common", "slurm.conf.j2", variables))
    assert "ProctrackType=proctrack/cgroup" in lines
    assert "TaskPlugin=task/cgroup,task/affinity" in lines
    assert not any(line.startswith("SlurmdParameters=") for line in lines)


def test_slurm_conf_without_gpus_or_accounting() -> None:
    nodes = [{"names": "cpu[01-02]", "cpus": 4, "real_memory": 2000, "gres": ""}]
    text = _render("slurm_common", "slurm.conf.j2", _contract_vars(slurm_nodes=nodes, slurm_accounting=False))
    lines = _lines(text)
    assert "NodeName=cpu[01-02] CPUs=4 RealMemory=2000 State=UNKNOWN" in lines
    assert not any(line.startswith(("GresTypes=", "Accounting", "JobAcctGather")) for line in lines)


def test_slurm_conf_overrides_come_last_and_win() -> None:
    overrides = {"SlurmctldTimeout": 60, "EnforcePartLimits": True, "PrologFlags": "Contain"}
    lines = _lines(_render("slurm_common", "slurm.conf.j2", _contract_vars(slurm_conf_overrides=overrides)))
    assert lines[-3:] == ["SlurmctldTimeout=60", "EnforcePartLimits=YES", "PrologFlags=Contain"]
    assert "SlurmctldTimeout=120" not in lines


@pytest.mark.parametrize(
    ("count", "gpu_type", "expected"),
    [
        (4, "h100", ["Name=gpu Type=h100 File=/dev/nvidia[0-3]"]),
        (1, "a100", ["Name=gpu Type=a100 File=/dev/nvidia0"]),
        (8, "", ["Name=gpu File=/dev/nvidia[0-7]"]),
        (0, "", []),
    ],
)
def test_gres_conf(count: int, gpu_type: str, expected: list[str]) -> None:
    variables = _contract_vars(hpckit_gpu_count=count, hpckit_gpu_type=gpu_type)
    text = _render("slurm_compute", "gres.conf.j2", variables)
    assert "managed by hpckit" in text
    assert _lines(text) == expected


def test_cgroup_conf_follows_the_switch() -> None:
    enabled = _lines(_render("slurm_compute", "cgroup.conf.j2", _contract_vars(slurm_cgroup_enabled=True)))
    assert "ConstrainCores=yes" in enabled and "CgroupPlugin=autodetect" in enabled
    disabled = _lines(_render("slurm_compute", "cgroup.conf.j2", _contract_vars(slurm_cgroup_enabled=False)))
    assert disabled == ["CgroupPlugin=cgroup/v1"]


def test_accounting_configs() -> None:
    variables = _contract_vars(slurm_accounting_db_password="s3cret", hpckit_cluster_name="lab")
    dbd = _lines(_render("slurm_accounting", "slurmdbd.conf.j2", variables))
    for wanted in (
        "StorageType=accounting_storage/mysql",
        "StoragePass=s3cret",
        "DbdHost=localhost",
        "StorageHost=localhost",
    ):
        assert wanted in dbd
    lab = _render("slurm_accounting", "mariadb.cnf.j2", variables)
    assert "skip-networking" in _lines(lab) and "bind-address" not in lab
    real = _render("slurm_accounting", "mariadb.cnf.j2", _contract_vars(slurm_accounting_mariadb_skip_networking=False))
    assert "bind-address = 127.0.0.1" in _lines(real) and "skip-networking" not in _lines(real)


# ------------------------------------------------------------------ the playbook as Ansible sees it


def _tasks(path: Path) -> Iterator[dict[str, Any]]:
    for task in _yaml(path) or []:
        yield task
        for key in ("block", "rescue", "always"):
            yield from task.get(key, [])


# What a task's arguments name when it reads or writes a secret's bytes (not merely its path or checksum).
SECRET_MARKERS = (
    "slurm_auth_key_content",
    "ansible.builtin.slurp",
    "db_password",
    "password_b64",
    "slurmdbd.conf",
)


def test_every_task_touching_a_secret_has_no_log() -> None:
    """The cluster key (munge or auth/slurm) and the DB password never reach a log: each task naming them is no_log."""
    checked = 0
    for path in sorted(ROLES.glob("*/tasks/*.yml")):
        for task in _tasks(path):
            text = repr({k: v for k, v in task.items() if k not in ("name", "no_log", "when", "register")})
            if any(marker in text for marker in SECRET_MARKERS) and "apt" not in text:
                checked += 1
                assert task.get("no_log") is True, f"{path.relative_to(ANSIBLE)}: {task['name']!r} lacks no_log"
    assert checked >= 6


def test_no_log_only_where_a_secret_is() -> None:
    """no_log hides a failure's cause too (an unreachable host's SSH error among them): only tasks that
    handle a secret's bytes may have it."""
    for path in sorted(ROLES.glob("*/tasks/*.yml")):
        for task in _tasks(path):
            if task.get("no_log"):
                text = repr({k: v for k, v in task.items() if k not in ("name", "no_log", "when", "register")})
                assert any(m in text for m in SECRET_MARKERS), f"{path.relative_to(ANSIBLE)}: {task['name']!r}"


def test_every_service_task_uses_the_service_module() -> None:
    for path in sorted(ROLES.glob("*/tasks/*.yml")):
        for task in _tasks(path):
            assert "ansible.builtin.systemd" not in task and "systemd" not in task, path


def test_apt_never_refreshes_its_cache_unconditionally() -> None:
    for path in sorted(ROLES.glob("*/tasks/*.yml")):
        for task in _tasks(path):
            apt = task.get("ansible.builtin.apt")
            if apt is None:
                continue
            # Removing reads no package list, nor does a package file (its dependencies were installed before).
            if apt["state"] == "absent" or "deb" in apt:
                assert "update_cache" not in apt, path
            else:
                assert apt["state"] == "present"
                assert "cache_valid_time" in apt, path
            assert "when" in task, f"{path}: apt must run only when something is missing (or present)"


def test_contract_variables_are_all_used() -> None:
    used = "".join(p.read_text(encoding="utf-8") for p in ROLES.rglob("*") if p.suffix in {".yml", ".j2"})
    for name in _yaml(DATA / "extravars.yml"):
        if name != "hpckit_lab":  # informational only, by contract
            assert name in used, name


def test_syntax_check(tmp_path: Path) -> None:
    playbook = _tool("ansible-playbook")
    result = subprocess.run(
        [
            playbook,
            "--syntax-check",
            "-i",
            str(DATA / "inventory.yml"),
            "-e",
            f"@{DATA / 'extravars.yml'}",
            "site.yml",
        ],
        cwd=ANSIBLE,
        env=_ansible_env(tmp_path),
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_templates_render_the_same_through_ansible(tmp_path: Path) -> None:
    """Ansible 2.19's own templating (not plain jinja2) renders slurm.conf as the jinja2 tests expect."""
    playbook = _tool("ansible-playbook")
    out = tmp_path / "slurm.conf"
    template = ROLES / "slurm_common" / "templates" / "slurm.conf.j2"
    play = tmp_path / "render.yml"
    play.write_text(
        f"""- hosts: node1
  connection: local
  gather_facts: false
  roles: [slurm]
  tasks:
    - ansible.builtin.copy:
        content: "{{{{ lookup('ansible.builtin.template', '{template}') }}}}"
        dest: {out}
        mode: "0644"
""",
        encoding="utf-8",
    )
    result = subprocess.run(
        [
            playbook,
            "-i",
            str(DATA / "inventory.yml"),
            "-e",
            f"@{DATA / 'extravars.yml'}",
            "-e",
            f"ansible_python_interpreter={sys.executable}",
            str(play),
        ],
        env={**_ansible_env(tmp_path), "ANSIBLE_ROLES_PATH": str(ROLES)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert out.read_text(encoding="utf-8") == _render("slurm_common", "slurm.conf.j2", _contract_vars())


# ------------------------------------------------------------------ site.yml's order


def test_site_plays_come_in_the_order_the_cluster_needs() -> None:
    plays = _yaml(ANSIBLE / "site.yml")
    roles = [[r["role"] for r in play.get("roles", [])] or [play["name"]] for play in plays]
    assert roles == [
        ["slurm_auth"],
        ["unix_users"],  # the same uids everywhere before any daemon starts or job runs
        ["Slurm built from source"],  # install: build: SchedMD's packages depend on munge,
        ["Slurm's built packages on every Slurm host"],  # and every role below configures what they installed
        ["Nodes removed from the blueprint"],  # slurmd off before slurmctld learns they are gone
        ["shared_fs"],
        ["infiniband", "nvidia"],  # before slurm.conf: topology.conf turns on TopologyPlugin
        ["slurm_common"],
        ["slurm_accounting"],
        ["slurm_controller"],
        ["slurm_compute"],
        ["slurm_login"],
        ["hpckit_login"],  # the login nodes and, where it is a wheel, the compute nodes at once, before
        ["enroot_pyxis"],  # after Slurm: pyxis is built against it
        ["Container smoke test"],
        ["bench_toolchain"],  # after the shared filesystems and the GPU stack it is built against
        ["hpckit_health"],  # the health checks that run it
        ["monitoring"],  # last: hpckit on the login node (its Slurm exporter), the sweep's textfile dir
    ]
    # Only the first play gathers (the service manager, cached): the others cost no fact round trip.
    assert [p.get("gather_facts", True) for p in plays[1:]] == [False] * (len(plays) - 1)
    fabric = next(p for p in plays if p["name"] == "Fabric and GPUs")
    assert fabric["hosts"] == plays[0]["hosts"]  # topology.conf reaches slurmctld's host too


def _play_hosts(play: dict[str, Any], extravars: dict[str, Any]) -> Any:
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    return Templar(loader=DataLoader(), variables=extravars).template(trust_as_template(play["hosts"]))


def test_plays_that_do_not_apply_have_no_hosts() -> None:
    """A task skipped on every host still costs a worker process per host (most of a no-op deploy's time went
    to them): a play that does not apply to the cluster has no hosts instead."""
    plays = {p["name"]: p for p in _yaml(ANSIBLE / "site.yml")}
    optional = {
        "Slurm built from source": {"slurm_install": "build"},
        "Slurm's built packages on every Slurm host": {"slurm_install": "build"},
        "Containers (enroot and pyxis)": {"enroot_pyxis_enabled": True},
        "Container smoke test": {"enroot_pyxis_enabled": True},
        "Benchmark toolchain": {"bench_toolchain_enabled": True},
    }
    lab = {"slurm_install": "distro", "enroot_pyxis_enabled": False, "hpckit_install_mode": "shared"}
    for name, applies in optional.items():
        assert not _play_hosts(plays[name], lab), name
        assert _play_hosts(plays[name], {**lab, **applies}), name
    # hpckit reaches the compute nodes (for the health checks) only from the wheel: a shared install is theirs
    hpckit = plays["The hpckit CLI on the login nodes, and from the wheel on the compute nodes"]
    assert _play_hosts(hpckit, lab) == "slurm_login"
    assert _play_hosts(hpckit, {**lab, "hpckit_install_mode": "wheel"}) == "slurm_login:slurm_compute"
    assert _play_hosts(hpckit, {**lab, "hpckit_install_mode": "wheel", "hpckit_health_enabled": False}) == "slurm_login"


def test_slurm_conf_turns_on_the_tree_topology_when_the_fabric_gave_one() -> None:
    assert "TopologyPlugin" not in _render("slurm_common", "slurm.conf.j2", _contract_vars())
    text = _render("slurm_common", "slurm.conf.j2", _contract_vars(slurm_topology_plugin="topology/tree"))
    assert "TopologyPlugin=topology/tree" in _lines(text)


def test_gres_conf_is_left_to_the_nvidia_role_on_gpu_nodes() -> None:
    derived = _yaml(ROLES / "slurm_compute" / "vars" / "main.yml")
    inspect = next(_tasks(ROLES / "slurm_compute" / "tasks" / "main.yml"))["hpckit_inspect"]
    assert inspect["paths"]["gres"]["managed"] == "{{ slurm_compute_writes_gres }}"
    # Configless: slurmctld serves cgroup.conf, and the node holds none of its own.
    assert inspect["paths"]["cgroup"]["managed"] == "{{ not slurm_configless | bool }}"
    assert "hpckit_gpu_count" in derived["slurm_compute_writes_gres"]
    assert "nvidia_gres_result" in derived["slurm_compute_earlier_changes"]


def test_roles_restart_for_the_keys_plan_labels_as_restarts() -> None:
    """The roles' default restart list is the per-release table's for the distribution's release (hpckit
    passes each cluster's own list in its extravars, tests/test_slurm_conf_table.py), and plan labels
    exactly those keys a restart."""
    from hpckit.deploy.changes import Action, key_action
    from hpckit.slurm_releases import conf_keys, default_series, restart_keys

    defaults = YAML(typ="safe").load((ROLES / "slurm_common" / "defaults" / "main.yml").read_text())
    assert defaults["slurm_common_restart_keys"] == restart_keys(default_series())
    restarts = {k.lower() for k in defaults["slurm_common_restart_keys"]}
    for name, key in conf_keys().items():
        if key.problem(default_series()) is None and key_action(name, default_series()) != Action.UNSUPPORTED:
            assert (key_action(name, default_series()) != Action.RECONFIGURE) == (name in restarts), name


# ------------------------------------------------------------------ the contract document


def _passed_names() -> tuple[set[str], set[str]]:
    """(inventory groups, variables) that hpckit writes for the example blueprints, the lab's runtime
    values and the retired nodes included."""
    from hpckit.blueprint import load_blueprint
    from hpckit.clusters import SshAccess
    from hpckit.deploy.playvars import build_vars
    from hpckit.paths import blueprints_dir

    groups, names = {"slurm_retired"}, set()
    for blueprint in sorted(blueprints_dir().glob("*.yaml")):
        inventory, extravars = build_vars(load_blueprint(blueprint), SshAccess("root", 22, "/k", "/kh"))
        names.update(extravars)
        names.update(inventory["all"]["vars"])
        for name, group in inventory["all"]["children"].items():
            groups.add(name)
            for child in group.get("children", {}).values():
                names.update(child.get("vars", {}))
                for host_vars in child["hosts"].values():
                    names.update(host_vars)
            for host_vars in group.get("hosts", {}).values():
                names.update(host_vars)
    return groups, names


def test_the_contract_names_every_group_and_variable_hpckit_passes() -> None:
    text = (ANSIBLE / "ANSIBLE-CONTRACT.md").read_text(encoding="utf-8")
    groups, names = _passed_names()
    lab_runtime = {"hpckit_install_mode", "hpckit_python", "hpckit_source", "hpckit_login_bin"}
    lab_runtime |= {"hpckit_health_probe_key", "hpckit_health_probe_known_hosts", "slurm_build_cache_dir"}
    lab_runtime |= set(vm_extravars(Path("/w/hpckit-0.1.0-py3-none-any.whl")))
    missing = sorted(n for n in groups | names | lab_runtime if f"`{n}`" not in text and f"{n}:" not in text)
    assert missing == [], f"ANSIBLE-CONTRACT.md does not name {missing}"
    sample = set(_yaml(DATA / "extravars.yml"))
    assert sample <= names, f"tests/data/ansible/extravars.yml has names hpckit never passes: {sample - names}"


# ------------------------------------------------------------------ hpckit_inspect, on this machine


def _inspect_play(tmp_path: Path, tasks: list[dict[str, Any]], variables: dict[str, Any]) -> Any:
    """ansible-playbook over a local connection: the hpckit_inspect role (its action), then ``tasks``."""
    playbook = _tool("ansible-playbook")
    play = tmp_path / "inspect.yml"
    plays = [{"hosts": "localhost", "connection": "local", "gather_facts": False, "roles": ["hpckit_inspect"]}]
    plays[0].update({"vars": variables, "tasks": tasks})
    play.write_text(json.dumps(plays), encoding="utf-8")  # JSON is YAML
    return subprocess.run(
        [playbook, "-i", "localhost,", "-e", f"ansible_python_interpreter={sys.executable}", str(play)],
        env={**_ansible_env(tmp_path), "ANSIBLE_ROLES_PATH": str(ROLES)},
        capture_output=True,
        text=True,
        check=False,
    )


def test_hpckit_inspect_reads_and_compares(tmp_path: Path) -> None:
    """The action every role starts with, run for real over a local connection on files made here."""
    (tmp_path / "wanted.j2").write_text("value {{ wanted }}\n", encoding="utf-8")
    for name, text in (("same", "value 1\n"), ("other", "value 2\n")):
        (tmp_path / name).write_text(text, encoding="utf-8")
        (tmp_path / name).chmod(0o644)
    ours = {"owner": tmp_path.owner(), "group": tmp_path.group()}
    result = tmp_path / "result.json"
    inspect = {
        "packages": ["dpkg", "hpckit-no-such-package"],
        "paths": {
            "dir": {"path": str(tmp_path), **ours, "mode": f"{tmp_path.stat().st_mode & 0o777:o}"},
            "same": {"path": str(tmp_path / "same"), **ours, "mode": "0644", "template": str(tmp_path / "wanted.j2")},
            "other": {"path": str(tmp_path / "other"), **ours, "mode": "0644", "template": str(tmp_path / "wanted.j2")},
            "absent": {"path": str(tmp_path / "absent"), "managed": "{{ 1 == 2 }}"},
        },
        "services": ["hpckit-no-such-service"],
        "checks": {"succeeds": f"test -d {tmp_path}", "fails": "exit 1"},
        "reads": {"lines": "printf 'a\\nb\\n'", "quoted": 'echo "it\'s"'},
    }
    tasks = [
        {"hpckit_inspect": inspect, "register": "found"},
        {"ansible.builtin.copy": {"content": "{{ found | to_json }}", "dest": str(result), "mode": "0644"}},
    ]
    done = _inspect_play(tmp_path, tasks, {"wanted": 1})
    assert done.returncode == 0, done.stdout + done.stderr
    found = json.loads(result.read_text(encoding="utf-8"))
    assert found["missing"] == ["hpckit-no-such-package"]
    owner = f"{tmp_path.owner()}:{tmp_path.group()}"
    assert found["paths"]["dir"].endswith(" -") and found["paths"]["same"].startswith(f"{owner}:644 ")
    assert found["paths"]["absent"] == " "
    assert found["outdated"] == ["other"]
    assert found["running"] == {"hpckit-no-such-service": False}
    assert found["checks"] == {"succeeds": True, "fails": False}
    assert found["reads"] == {"lines": "a\nb", "quoted": "it's"}
    assert found["differs"] is True and found["changed"] is False


def test_ssh_gives_up_on_a_host_that_goes_silent() -> None:
    """A host gone from the network sends no reset: only keepalives end the connection, and the run."""
    import configparser

    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(ANSIBLE / "ansible.cfg")
    words = cfg["ssh_connection"]["ssh_args"].split()
    options = dict(word.split("=", 1) for word in words if "=" in word)
    assert int(options["ServerAliveInterval"]) > 0 and int(options["ServerAliveCountMax"]) > 0, options


def _inspect_plugin() -> Any:
    import importlib.util

    path = ROLES / "hpckit_inspect" / "action_plugins" / "hpckit_inspect.py"
    spec = importlib.util.spec_from_file_location("hpckit_inspect_action", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_hpckit_inspect_script_fails_on_a_check_that_cannot_answer() -> None:
    """A check that breaks (its command missing, a syntax error) is no "no": the script, run by /bin/sh as
    Ansible runs it, still answers the other checks, then exits non-zero carrying what the broken ones printed."""
    plugin = _inspect_plugin()
    checks = {
        "yes": "true",
        "no": "grep -q x /dev/null",
        "missing": "hpckit-no-such-command --now",
        "syntax": "if then fi",
    }
    script = plugin._script([], {}, [], checks, {})
    done = subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True, check=False, timeout=30)
    assert done.returncode != 0
    assert "hpckit-no-such-command: not found" in done.stderr, done.stderr
    found = plugin._parse(done.stdout)
    assert found["c"] == {"yes": "true", "no": "false"}
    assert set(found["e"]) == {"missing", "syntax"}
    message = plugin._broken_checks(found["e"])
    assert "check 'missing' could not answer (exit 127): " in message and "hpckit-no-such-command: not found" in message
    assert "check 'syntax' could not answer (exit 2): " in message and "Syntax error" in message


def test_hpckit_inspect_fails_the_task_on_a_check_that_cannot_answer(tmp_path: Path) -> None:
    """Through Ansible: the task fails (the role stops there) and its message is the check's stderr."""
    tasks = [{"hpckit_inspect": {"checks": {"broken": "hpckit-no-such-command", "fine": "true"}}, "register": "found"}]
    done = _inspect_play(tmp_path, tasks, {})
    assert done.returncode == 2, done.stdout + done.stderr
    assert "check 'broken' could not answer (exit 127): " in done.stdout, done.stdout
    assert "hpckit-no-such-command: not found" in done.stdout


def test_shared_fs_writes_the_fstab_line_its_inspection_looks_for() -> None:
    """The fstab line is made in one place (vars/main.yml): the inspection's check and lineinfile both read it,
    so they cannot drift apart (the role would then rewrite fstab on every run and never converge)."""
    role = ROLES / "shared_fs"
    texts = {p.relative_to(role).as_posix(): p.read_text(encoding="utf-8") for p in role.rglob("*.yml")}
    assert [name for name, text in texts.items() if "none bind 0 0" in text] == ["vars/main.yml"]
    assert [name for name, text in texts.items() if "',_netdev'" in text] == ["vars/main.yml"]
    declare = next(t for t in _tasks(role / "tasks" / "client.yml") if "ansible.builtin.lineinfile" in t)
    assert declare["ansible.builtin.lineinfile"]["line"] == "{{ shared_fs_fstab_lines[shared_fs_index] }}"
    assert declare["loop"] == "{{ shared_fs_nfs }}" and declare["loop_control"]["index_var"] == "shared_fs_index"
    variables = _yaml(role / "vars" / "main.yml")
    env = jinja2.nativetypes.NativeEnvironment()
    nfs = [
        {"server": "ctl", "server_addr": "10.0.0.1", "export": "/srv/home", "mount": "/home", "options": "rw"},
        {"server": "node1", "export": "/srv/data", "mount": "/data", "options": "rw,_netdev"},
    ]
    lines = env.from_string(variables["shared_fs_fstab_lines"]).render(shared_fs_nfs=nfs, inventory_hostname="node1")
    assert lines == ["10.0.0.1:/srv/home /home nfs rw,_netdev 0 0", "/srv/data /data none bind 0 0"]


# What a role may use only from some ansible-core release on: (what its files say, the release).
ANSIBLE_FEATURES = (("end_role", (2, 18)),)


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in str(text).split("."))


def test_every_role_declares_the_ansible_its_tasks_need() -> None:
    """min_ansible_version is what a role's tasks need (meta: end_role came with 2.18), and never below the
    ansible-core hpckit installs and tests with (pyproject's floor): an older one was never run."""
    import tomllib

    pyproject = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text(encoding="utf-8"))
    floor = next(d for d in pyproject["project"]["dependencies"] if d.startswith("ansible-core"))
    floor_version = _version(floor.split(">=")[1].split(",")[0].split()[0])
    for role in sorted(p for p in ROLES.iterdir() if p.is_dir()):
        declared = _version(_yaml(role / "meta" / "main.yml")["galaxy_info"]["min_ansible_version"])
        text = "".join(p.read_text(encoding="utf-8") for p in role.rglob("*.yml"))
        needed = max([floor_version] + [version for word, version in ANSIBLE_FEATURES if word in text])
        assert declared >= needed, f"{role.name} declares {declared}, needs {needed}"


# Keys whose string values Ansible reads as bare Jinja expressions (no {{ }} around them).
_BARE_KEYS = {"when", "until", "failed_when", "changed_when", "that"}


def _strings(node: Any, bare: bool = False) -> Iterator[tuple[str, bool]]:
    if isinstance(node, str):
        yield node, bare
    elif isinstance(node, dict):
        for key, value in node.items():
            yield from _strings(value, key in _BARE_KEYS)
    elif isinstance(node, list):
        for item in node:
            yield from _strings(item, bare)


_REGEX_ESCAPE = re.compile(r"\\\\[sSdDwWbB.()\[\]*+?0-9]")  # two backslashes, then what a regex escapes


def _backslash_problems(text: str, bare: bool) -> Iterator[str]:
    r"""Ansible keeps a string literal's backslashes as written inside {{ }} of a YAML value ('\s' is the
    regex's \s; '\\s' would match a backslash), while in {% %} and in conditionals Jinja reads them as
    Python escapes ('\\s' there; '\s' works, with a DeprecationWarning on every render)."""
    inside = False
    for _, kind, value in jinja2.Environment().lex("{{ " + text + " }}" if bare else text):
        if kind in ("variable_begin", "variable_end"):
            inside = kind == "variable_begin" and not bare
        elif kind == "string" and inside and _REGEX_ESCAPE.search(value):
            yield f"{value}: inside {{{{ }}}} Ansible keeps backslashes as written: write one"
        elif kind == "string" and not inside:
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                try:
                    value[1:-1].encode("ascii", "backslashreplace").decode("unicode-escape")
                except (DeprecationWarning, SyntaxWarning) as exc:
                    yield f"{value}: {exc} (Jinja reads escapes here: write two backslashes)"


def test_backslashes_in_jinja_strings_are_written_as_ansible_reads_them() -> None:
    found = []
    for path in sorted(ANSIBLE.rglob("*.yml")):
        for text, bare in _strings(_yaml(path)):
            if "{" in text or bare:
                found += [f"{path.relative_to(ANSIBLE)}: {p}" for p in _backslash_problems(text, bare)]
    assert not found, "\n".join(found)
