"""The per-release slurm.conf table: the facts it holds, `hpckit plan` labelling every key it knows from it
for every release, the roles restarting for the same keys, and slurm.conf rendered for each release with
only keys and plugins that release reads (checked against SchedMD's 24.11.5 source where it is cached)."""

from __future__ import annotations

import io
import re
import tarfile
from typing import Any

import pytest

from hpckit.blueprint import parse_blueprint
from hpckit.clusters import SshAccess
from hpckit.deploy.changes import Action, key_action, plan_changes, slurm_conf_changes
from hpckit.deploy.events import ConfigDiff
from hpckit.deploy.playvars import build_vars
from hpckit.deploy.release_vars import slurm_conf_for_release
from hpckit.paths import source_cache
from hpckit.slurm_releases import (
    APPLY_ORDER,
    Version,
    apply_for,
    conf_key,
    conf_keys,
    default_series,
    key_problem,
    releases,
    restart_keys,
    unread_keys,
    value_problems,
)
from tests.test_ansible_static import _contract_vars, _lines, _render

SERIES = list(releases())
BASE = """\
ClusterName=lab
SlurmctldHost=ctl(10.77.0.10)
NodeName=node[1-2] CPUs=2 State=UNKNOWN
PartitionName=gpu Nodes=node[1-2] Default=YES State=UP
"""
ACTIONS = {
    "reconfigure": Action.RECONFIGURE,
    "slurmd_restart": Action.SLURMD_RESTART,
    "slurmctld_restart": Action.SLURMCTLD_RESTART,
    "unsupported": Action.UNSUPPORTED,
}


def test_the_table_is_well_formed() -> None:
    for name, key in conf_keys().items():
        assert name == key.name.lower()
        assert {cls for _, cls in key.apply} <= set(APPLY_ORDER), name
        if key.renamed_to:
            assert conf_key(key.renamed_to) is not None, f"{key.name} renamed to an unknown key"
        for plugin, span in key.plugins.items():
            if span.replaced_by and "/" in span.replaced_by and " " not in span.replaced_by:
                assert span.replaced_by.lower() in key.plugins, f"{key.name}: {plugin} -> {span.replaced_by}"
    assert default_series() == Version.parse("22.05")


@pytest.mark.parametrize(
    ("key", "release", "says"),
    [
        ("ControlMachine", "22.05", "renamed SlurmctldHost in Slurm 18.08; write SlurmctldHost"),
        ("BackupController", "24.11", "renamed SlurmctldHost"),
        ("CryptoType", "22.05", "renamed CredType"),
        ("SbcastParameters", "24.11", "renamed BcastParameters"),
        ("FastSchedule", "22.05", "removed in Slurm 20.02; use SlurmdParameters=config_overrides"),
        ("SallocDefaultCommand", "24.11", "removed in Slurm 20.11; use LaunchParameters=use_interactive_step"),
        ("AccountingStoreJobComment", "22.05", "use AccountingStoreFlags=job_comment"),
        ("RoutePlugin", "23.11", "use TopologyParam=RouteTree"),
        ("FrontendName", "25.05", "removed in Slurm 25.05"),
        ("AccountingStorageUser", "25.11", "removed in Slurm 25.11"),
        ("JobContainerType", "25.11", "renamed NamespaceType in Slurm 25.11"),
        ("PreemptParameters", "22.05", "new in Slurm 23.02"),
        ("DataParserParameters", "24.05", "new in Slurm 24.11"),
        ("PrologTimeout", "24.11", "new in Slurm 25.05"),
        ("TLSType", "24.11", "new in Slurm 25.05"),
        ("MetricsType", "25.05", "new in Slurm 25.11"),
        ("NamespaceType", "25.05", "new in Slurm 25.11"),
        ("MetricsAuthUsers", "25.11", "new in Slurm 26.05"),
        ("SchedulerTyp", "24.11", "not a slurm.conf key; did you mean 'SchedulerType'?"),
    ],
)
def test_keys_per_release(key: str, release: str, says: str) -> None:
    assert says in (key_problem(key, release) or "")


def test_keys_exist_where_the_table_says() -> None:
    assert key_problem("JobContainerType", "25.05") is None and key_problem("NamespaceType", "25.11") is None
    assert key_problem("PrologTimeout", "26.05") is None and key_problem("SlurmctldHost", "22.05") is None
    assert key_problem("defmempercpu", "22.05") is None  # Slurm's keys ignore case


def test_the_issue_s_keys_need_a_slurmctld_restart_where_reconfigure_does_not_restart_daemons() -> None:
    """slurm.conf(5) 22.05: a restart of slurmctld is required for these; scontrol(1) 24.11: since 23.11
    reconfigure replaces the daemon processes, so it applies them."""
    for key in ("AccountingStorageEnforce", "SchedulerType", "MaxJobCount"):
        assert apply_for(key, "22.05") == apply_for(key, "23.02") == "slurmctld_restart", key
        assert apply_for(key, "23.11") == apply_for(key, "26.05") == "reconfigure", key
    for key in ("SlurmctldPort", "SlurmdPort", "AuthType"):  # listening ports and auth: never live
        assert all(apply_for(key, s) == "slurmctld_restart" for s in SERIES), key
    assert all(apply_for("ClusterName", s) == "unsupported" for s in SERIES)
    assert apply_for("CoreSpecPlugin", "22.05") == "slurmd_restart"


def test_configless_needs_a_restart_where_the_man_page_says() -> None:
    assert apply_for("SlurmctldParameters", "22.05") == "slurmctld_restart"
    assert apply_for("SlurmctldParameters", "24.11") == "reconfigure"


@pytest.mark.parametrize("series", SERIES)
def test_plan_labels_every_key_it_knows_from_the_table(series: str) -> None:
    """The Done-when of #14: for every release and every key that release reads, the label `hpckit plan`
    gives a changed value is the table's class."""
    for name, key in conf_keys().items():
        if key.problem(series) is not None or name in {"nodename", "partitionname"}:
            continue
        changes = slurm_conf_changes(BASE, BASE + f"{key.name}=changed\n", version=series)
        assert [(c.what, c.action) for c in changes] == [(f"{name} changed", ACTIONS[key.apply_in(series)])], name
    grown = BASE.replace("node[1-2] CPUs", "node[1-3] CPUs")
    assert {c.action for c in slurm_conf_changes(BASE, grown, version=series)} == {
        ACTIONS[conf_keys()["nodename"].apply_in(series)]
    }


def test_plan_reads_the_cluster_s_release() -> None:
    diff = ConfigDiff(
        host="ctl", task="Write slurm.conf", path="/etc/slurm/slurm.conf", before=BASE, after=BASE + "SchedulerType=x\n"
    )
    assert [c.action for c in plan_changes([diff])] == [Action.SLURMCTLD_RESTART]  # the distro's 22.05
    assert [c.action for c in plan_changes([diff], "24.11.5")] == [Action.RECONFIGURE]
    assert key_action("MaxJobCount", Version.parse("25.05.2")) == Action.RECONFIGURE


@pytest.mark.parametrize("series", SERIES)
def test_roles_get_the_restart_keys_of_the_cluster_s_release(series: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The one source: the extravars hpckit builds carry the table's restart list for the release, and
    those are exactly the keys plan labels a restart."""
    monkeypatch.setattr("hpckit.deploy.release_vars.slurm_release_of", lambda _bp: Version.parse(series))
    _, extravars = build_vars(_lab_blueprint(), SshAccess(user="root", key_file=None))
    assert extravars["slurm_common_restart_keys"] == restart_keys(series)
    assert extravars["slurm_common_skip_keys"] == unread_keys(series)
    restarts = {k.lower() for k in extravars["slurm_common_restart_keys"]}
    for name, key in conf_keys().items():
        if key.problem(series) is None and key.apply_in(series) != "unsupported":
            assert (key.apply_in(series) != "reconfigure") == (name in restarts), name


def test_plugins_per_release() -> None:
    assert value_problems("SelectType", "select/cons_tres", "26.05") == []
    assert "did you mean 'select/cons_tres'" in value_problems("SelectType", "select/cons_tre", "24.11")[0]
    assert "removed in Slurm 23.11; use select/cons_tres" in value_problems("SelectType", "select/cons_res", "24.11")[0]
    assert value_problems("SelectType", "select/cons_res", "22.05") == []
    assert value_problems("TaskPlugin", "task/affinity,cgroup", "24.11") == []  # lists may drop the prefix
    assert "task/affinty" in value_problems("TaskPlugin", "task/affinity,task/affinty", "24.11")[0]
    assert "new in Slurm 23.11" in value_problems("AuthType", "auth/slurm", "22.05")[0]
    assert value_problems("AuthType", "auth/slurm", "24.11") == []
    assert "new in Slurm 24.05" in value_problems("SwitchType", "switch/nvidia_imex", "23.11")[0]
    assert "new in Slurm 23.11" in value_problems("TopologyPlugin", "topology/block", "23.02")[0]
    assert value_problems("SchedulerParameters", "anything", "24.11") == []  # not a plugin key


def test_rendering_renames_and_drops_by_release() -> None:
    wanted = {"JobContainerType": "job_container/tmpfs", "FastSchedule": "1", "DataParserParameters": "v0.0.42"}
    assert slurm_conf_for_release(wanted, "25.11") == {
        "NamespaceType": "namespace/tmpfs",
        "DataParserParameters": "v0.0.42",
    }
    assert slurm_conf_for_release(wanted, "22.05") == {"JobContainerType": "job_container/tmpfs"}
    assert slurm_conf_for_release({"SomeNewKey": "1"}, "26.05") == {"SomeNewKey": "1"}  # not the table's to drop


def _lab_blueprint() -> Any:
    return parse_blueprint(
        """\
name: lab
provider: {type: lab}
controller: {host: ctl, address: 10.77.0.10}
login: [{host: login, address: 10.77.0.11}]
slurm: {conf: {SchedulerParameters: bf_interval=30}}
partitions:
  - name: gpu
    nodes: node[1-4]
    addresses: 10.77.0.[21-24]
    hardware: {cpus: 8, cores_per_socket: 4, threads_per_core: 2, memory_mb: 16000, gpus: {type: lab, count: 4}}
""",
        "lab.yaml",
    )


def _rendered(series: str, **extra: Any) -> list[tuple[str, str]]:
    variables = _contract_vars(
        **{"slurm_common_skip_keys": unread_keys(series), "slurm_topology_plugin": "topology/tree", **extra}
    )
    pairs = []
    for line in _lines(_render("slurm_common", "slurm.conf.j2", variables)):
        key, _, value = line.partition("=")
        if key not in {"NodeName", "PartitionName"}:
            pairs.append((key, value))
    return pairs


@pytest.mark.parametrize("series", SERIES)
def test_the_template_renders_only_what_each_release_reads(series: str) -> None:
    pairs = _rendered(series)
    assert len(pairs) > 30
    for key, value in pairs:
        assert key_problem(key, series) is None, (series, key)
        assert value_problems(key, value, series) == [], (series, key, value)


def test_the_template_leaves_out_what_the_release_does_not_read() -> None:
    overrides = {"MpiDefault": "pmix", "FastSchedule": "1"}
    keys = [k for k, _ in _rendered("24.11", slurm_conf_overrides=overrides)]
    assert "FastSchedule" not in keys and keys.count("MpiDefault") == 1
    skip = [*unread_keys("24.11"), "jobcomptype"]
    assert "JobCompType" not in [k for k, _ in _rendered("24.11", slurm_common_skip_keys=skip)]


# --- against SchedMD's own 24.11.5 source, in hpckit's source cache (scripts/fetch-slurm-source.sh) ---------

TARBALL = "slurm-wlm_24.11.5.orig.tar.gz"


def _source(member: str) -> str:
    tarball = source_cache() / TARBALL
    if not tarball.is_file():
        pytest.fail(f"{tarball} is missing: run scripts/fetch-slurm-source.sh (scripts/install.sh runs it)")
    with tarfile.open(tarball) as tar:
        handle = tar.extractfile(f"slurm-slurm-24-11-5-1/{member}")
        assert handle is not None
        return io.TextIOWrapper(handle, encoding="utf-8").read()


def test_every_key_the_table_gives_24_11_is_in_its_parser() -> None:
    code = _source("src/common/read_config.c")
    table = code[code.index("s_p_options_t slurm_conf_options[]") :]
    parsed = {k.lower() for k in re.findall(r'\{"([A-Za-z][A-Za-z0-9]*)"', table[: table.index("{NULL}")])}
    read = {name for name, key in conf_keys().items() if key.problem("24.11") is None}
    assert read <= parsed, sorted(read - parsed)
    assert parsed - set(conf_keys()) == set(), "keys 24.11 parses that the table does not know"


def test_every_key_24_11_documents_is_in_the_table() -> None:
    man = _source("doc/man/man5/slurm.conf.5")
    lines = man[man.index('.SH "PARAMETERS"') : man.index('.SH "NODE CONFIGURATION"')].splitlines()
    documented, depth = set(), 0
    for line, following in zip(lines, [*lines[1:], ""], strict=True):
        depth += line.startswith(".RS") - line.startswith(".RE")  # an option list inside a key's text
        match = re.match(r"\\fB([A-Za-z0-9]+)\\fR$", following)
        if line.startswith(".TP") and depth == 0 and match:
            documented.add(match.group(1))
    assert len(documented) > 200
    assert {k for k in documented if conf_key(k) is None} == set()
