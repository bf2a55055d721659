"""`hpckit expand`: inventory, variables and every config the roles write, offline, from the roles' own
templates; linear in hosts, NodeName lines hostlist-compressed; nodes in several partitions."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import hostlist
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.bench_blueprint import many_partitions as blueprint_text
from hpckit.blueprint import load_blueprint, parse_blueprint
from hpckit.clusters import SshAccess
from hpckit.deploy import render as render_module
from hpckit.deploy.expand import expand
from hpckit.deploy.inventory import build_extravars, ordered_hostlist
from hpckit.deploy.playvars import build_vars
from hpckit.deploy.render import Inventory, host_context, render, render_all
from hpckit.errors import InputError
from tests.test_blueprint_limits import SHARED

REPO = Path(__file__).resolve().parent.parent
FABRIC = REPO / "tests" / "data" / "preflight" / "infiniband" / "ibnetdiscover-6switch-edr-fattree-96ca-4xDDR-link.txt"


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """No connection and no program may be started while hpckit expands."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"expand tried to reach out: {args[:2]}")

    render_module._environments()  # importing Ansible's filters asks ldconfig where libc is: done before

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(subprocess, "Popen", refuse)


def read(folder: Path, rel: str) -> str:
    return (folder / "files" / rel).read_text()


def test_a_real_cluster_expands_to_every_config(tmp_path: Path, offline: None) -> None:
    bp = load_blueprint(REPO / "blueprints" / "h100-ib.yaml")
    out = tmp_path / "h100"
    done = expand(bp, out, fabric=FABRIC.read_text())
    manifest = yaml.safe_load((out / "files.yml").read_text())["files"]
    written = sorted(str(p.relative_to(out)) for p in (out / "files").rglob("*") if p.is_file())
    assert written == sorted(e["path"] for e in manifest) == sorted(f"files/{f.path}" for f in done.files)
    for wanted in (
        "all/etc/slurm/slurm.conf",
        "all/etc/slurm/topology.conf",
        "partition_gpu/etc/slurm/gres.conf",
        "partition_gpu/etc/slurm/cgroup.conf",
        "partition_gpu/etc/nccl.conf",
        "partition_gpu/etc/enroot/enroot.conf",
        "partition_gpu/etc/slurm/plugstack.conf.d/pyxis.conf",
        "login01/etc/slurm/plugstack.conf.d/pyxis.conf",
        "head01/etc/exports.d/hpckit.exports",
        "head01/etc/slurm/slurmdbd.conf",
        "partition_gpu/etc/hpckit/health.json",
    ):
        assert f"files/{wanted}" in written, wanted
    conf = read(out, "all/etc/slurm/slurm.conf").splitlines()
    assert "TopologyPlugin=topology/tree" in conf  # the fabric gave a topology.conf, as the role would
    assert (
        "NodeName=gpu[001-016] NodeAddr=10.10.0.[101-116] CPUs=224 Sockets=2 CoresPerSocket=56 ThreadsPerCore=2 "
        "RealMemory=1900000 Gres=gpu:h100:8 State=UNKNOWN" in conf
    )
    assert (
        "PartitionName=gpu Nodes=gpu[001-016] Default=YES MaxTime=7-00:00:00 DefMemPerCPU=8482 DefMemPerGPU=237500 "
        "State=UP" in conf
    )
    assert read(out, "all/etc/slurm/topology.conf").startswith("# Slurm topology.conf")
    gres = read(out, "partition_gpu/etc/slurm/gres.conf")
    assert gres.startswith("# gres.conf of gpu[001-016],") and "File=/dev/nvidia[4-7] Cores=56-111" in gres
    assert "NCCL_IB_HCA==mlx5_0:1," in read(out, "partition_gpu/etc/nccl.conf")
    assert "StoragePass=<secret: written by deploy, never shown>" in read(out, "head01/etc/slurm/slurmdbd.conf")
    by_path = {e["path"]: e for e in manifest}
    assert by_path["files/all/etc/slurm/slurm.conf"]["hosts"] == "gpu[001-016],head01,login[01-02]"
    assert "NVML" in by_path["files/partition_gpu/etc/slurm/gres.conf"]["assumes"]


def test_expand_renders_what_the_roles_render(tmp_path: Path) -> None:
    """The same templates through the same variables: slurm.conf and gres.conf as a deploy's host would get them."""
    bp = load_blueprint(REPO / "blueprints" / "h100-ib.yaml")
    expand(bp, tmp_path / "out")
    inventory, extravars = build_vars(bp, SshAccess("root"))
    ctx = host_context(Inventory(inventory), extravars, "gpu007", "slurm_common")
    assert read(tmp_path / "out", "all/etc/slurm/slurm.conf") == render("slurm_common", "slurm.conf.j2", ctx)
    ctx = host_context(Inventory(inventory), extravars, "gpu007", "nvidia", nvidia_state={"reads": {}, "paths": {}})
    per_host = render("nvidia", "gres.conf.j2", ctx)
    assert read(tmp_path / "out", "partition_gpu/etc/slurm/gres.conf") == per_host.replace("gpu007", "gpu[001-016]")


def test_the_lab_blueprint_expands_without_a_lab(tmp_path: Path, offline: None) -> None:
    done = expand(load_blueprint(REPO / "blueprints" / "lab.yaml"), tmp_path / "lab")
    paths = {f.path for f in done.files}
    assert "gpu/etc/slurm/gres.conf" not in paths and "partition_gpu/etc/slurm/gres.conf" in paths
    assert "partition_gpu/etc/enroot/enroot.conf" not in paths  # containers are off in the lab
    conf = read(tmp_path / "lab", "all/etc/slurm/slurm.conf")
    assert "ProctrackType=proctrack/linuxproc" in conf and "NodeAddr=10.77.0.[21-24]" in conf


def test_a_second_expand_replaces_the_first_and_a_foreign_folder_is_left_alone(tmp_path: Path) -> None:
    out = tmp_path / "out"
    expand(load_blueprint(REPO / "blueprints" / "h100-ib.yaml"), out)
    (out / "README.md").write_text("mine\n")  # the admin's own file beside the output stays
    expand(load_blueprint(REPO / "blueprints" / "lab.yaml"), out)
    assert not (out / "files" / "head01").exists() and (out / "files" / "ctl").is_dir()
    assert (out / "README.md").read_text() == "mine\n"
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("x")
    with pytest.raises(InputError, match="neither empty nor an earlier"):
        expand(load_blueprint(REPO / "blueprints" / "lab.yaml"), foreign)
    assert [p.name for p in foreign.iterdir()] == ["notes.txt"]


def test_the_command_line(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "hpckit", "expand", str(REPO / "blueprints" / "h100-ib.yaml")]
    done = subprocess.run([*argv, "-o", str(tmp_path / "o"), "--json"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["hosts"] == 16 and any(f["dest"] == "/etc/slurm/slurm.conf" for f in report["files"])
    done = subprocess.run([*argv, "-o", str(tmp_path / "v"), "--no-configs"], capture_output=True, text=True)
    assert done.returncode == 0 and sorted(p.name for p in (tmp_path / "v").iterdir()) == [
        "extravars.yml",
        "files.yml",
        "inventory.yml",
    ]


# --- scale: linear in hosts ---------------------------------------------------------------------------


def test_ten_thousand_nodes_give_one_compressed_line_per_partition(tmp_path: Path) -> None:
    bp = parse_blueprint(blueprint_text(625, 16), "big.yaml")
    ev = build_extravars(bp)
    assert len(ev["slurm_nodes"]) == 625 and ev["slurm_nodes"][0]["names"] == "g000n[01-16]"
    assert ev["slurm_nodes"][-1]["addrs"] == "10.1.39.[0-15]"
    inventory, _ = build_vars(bp, SshAccess("root"))
    gpu = inventory["all"]["children"]["slurm_compute"]["children"]["partition_p624"]
    assert gpu["hosts"]["g624n16"] == {"ansible_host": "10.1.39.15"} and gpu["vars"]["hpckit_gpu_count"] == 8


def test_building_the_vars_expands_each_partition_a_fixed_number_of_times(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each host used to re-expand every partition (329 s at 10,000 nodes). Counted, not timed: the number of
    hostlist expansions per partition stays the same whatever the number of partitions."""
    calls = {"n": 0}
    real = hostlist.expand_hostlist

    def counted(expr: str, *args: Any, **kwargs: Any) -> list[str]:
        calls["n"] += 1
        return list(real(expr, *args, **kwargs))

    per_partition = []
    for parts in (10, 40):
        bp = parse_blueprint(blueprint_text(parts, 4), "big.yaml")
        monkeypatch.setattr(hostlist, "expand_hostlist", counted)
        calls["n"] = 0
        build_vars(bp, SshAccess("root"))
        monkeypatch.setattr(hostlist, "expand_hostlist", real)
        per_partition.append(calls["n"] / parts)
    assert per_partition[1] <= per_partition[0] <= 6, per_partition


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["n", "gpu", "10.0.0.", "a1b"]), st.integers(0, 120), st.sampled_from([0, 2, 3])),
        min_size=1,
        max_size=40,
        unique=True,
    )
)
def test_ordered_hostlist_expands_to_the_same_names_in_the_same_order(parts: list[tuple[str, int, int]]) -> None:
    names = list(dict.fromkeys(f"{prefix}{number:0{width}d}" for prefix, number, width in parts))
    assert hostlist.expand_hostlist(ordered_hostlist(names)) == names


# --- nodes in several partitions -------------------------------------------------------------------------


def test_a_node_in_two_partitions_has_one_node_line_and_two_partition_lines(tmp_path: Path) -> None:
    bp = parse_blueprint(SHARED, "bp.yaml")
    ev = build_extravars(bp)
    assert [n["names"] for n in ev["slurm_nodes"]] == ["node[1-2]"]
    debug = ev["slurm_partitions"][1]
    assert (debug["nodes"], debug["default"], debug["max_time"]) == ("node1", False, "1:00:00")
    assert debug["settings"] == {
        "DefaultTime": "10",
        "DefMemPerCPU": 100,
        "DefMemPerGPU": 250,
        "OverSubscribe": "FORCE:2",
        "AllowAccounts": "ops,ml-team",
        "AllowQos": "debug",
    }
    inventory, _ = build_vars(bp, SshAccess("root"))
    groups = inventory["all"]["children"]["slurm_compute"]["children"]
    assert list(groups["partition_debug"]["hosts"]) == ["node1"] and "vars" not in groups["partition_debug"]
    assert Inventory(inventory).variables("node1")["hpckit_gpu_count"] == 4
    done = expand(bp, tmp_path / "out")
    conf = read(tmp_path / "out", "all/etc/slurm/slurm.conf").splitlines()
    assert sum(line.startswith("NodeName=") for line in conf) == 1
    assert (
        "PartitionName=debug Nodes=node1 Default=NO MaxTime=1:00:00 DefaultTime=10 DefMemPerCPU=100 DefMemPerGPU=250 "
        "OverSubscribe=FORCE:2 AllowAccounts=ops,ml-team AllowQos=debug State=UP" in conf
    )
    assert not any(f.path.startswith("partition_debug/") for f in done.files)  # its nodes' files are gpu's


def test_memory_defaults_can_be_turned_off() -> None:
    text = SHARED.replace("    def_mem_per_cpu: 100\n", "    def_mem_per_cpu: 0\n    def_mem_per_gpu: 0\n")
    settings_ = build_extravars(parse_blueprint(text, "bp.yaml"))["slurm_partitions"][1]["settings"]
    assert "DefMemPerCPU" not in settings_ and "DefMemPerGPU" not in settings_


def test_a_given_topology_is_written_as_the_infiniband_role_writes_it() -> None:
    """topology/block: deploy hands the infiniband role the text (its `given` mode) and the plugin."""
    bp = load_blueprint(REPO / "blueprints" / "h100-ib.yaml")
    inventory, extravars = build_vars(bp, SshAccess("root"))
    given = "BlockName=b1 Nodes=gpu[001-008]\nBlockName=b2 Nodes=gpu[009-016]\n"
    extravars.update(
        infiniband_topology="given", infiniband_topology_given=given, infiniband_topology_plugin="topology/block"
    )
    files = {
        f.path: f.text for f in render_all(inventory, extravars, [("partition_gpu", bp.partitions[0].hostnames())])
    }
    assert files["all/etc/slurm/topology.conf"] == given
    assert "TopologyPlugin=topology/block" in files["all/etc/slurm/slurm.conf"].splitlines()
    extravars["infiniband_topology"] = "off"  # the lab: no topology.conf, even with a fabric dump at hand
    files = {f.path for f in render_all(inventory, extravars, [], FABRIC.read_text())}
    assert "all/etc/slurm/topology.conf" not in files


# --- Ansible's lazy templating, offline ---------------------------------------------------------------------


def test_the_command_line_prints_no_ansible_warning(tmp_path: Path) -> None:
    """slurm_compute's vars read `slurm_auth_key_changed | bool`; the renderer once handed the filter the default's
    untemplated text, which Ansible 2.19 coerces to False with a DEPRECATION WARNING (and a costly stack walk)."""
    argv = [sys.executable, "-m", "hpckit", "expand", str(REPO / "blueprints" / "h100-ib.yaml")]
    done = subprocess.run([*argv, "-o", str(tmp_path / "o")], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "DEPRECATION" not in done.stderr and "[WARNING]" not in done.stderr, done.stderr


def test_a_variable_is_templated_before_one_that_names_it_reads_it() -> None:
    """As Ansible does lazily: `a` reads `b`'s value, not its text, whatever their order."""
    values = {"a": "{{ b | bool }}", "b": "{{ c == 'slurm' and ({} is changed or x | default(false)) }}", "c": "slurm"}
    assert dict(render_module._Scope(values)) == {"a": False, "b": False, "c": "slurm"}
    assert render_module._Scope({**values, "c": "{{ 'slu' ~ 'rm' }}", "x": True})["a"] is True


def test_a_variable_that_names_one_only_a_run_can_tell_stays_a_template() -> None:
    """`b` needs a fact of the run: `a`, which reads it, is not rendered from `b`'s text either."""
    values = {"a": "{{ b | bool }}", "b": "{{ probe.stdout == 'yes' }}", "n": "{{ m + 1 }}", "m": "{{ 1 }}"}
    assert dict(render_module._Scope(values)) == {**values, "n": 2, "m": 1}
    scope = render_module._Scope(values)
    assert scope["b"] == values["b"] and scope["a"] == values["a"]  # read in the other order: the same


def test_a_variable_nobody_reads_is_never_rendered() -> None:
    """A host class reads 1-3 of a role's dozen templated variables; rendering the rest was half of expanding
    10,000 nodes. Reading one renders it and what it reads, nothing else; a cycle reads the text and stays it."""
    calls: list[int] = []
    values = {"a": "{{ b + 1 }}", "b": "{{ 2 }}", "z": "{{ count() }}", "count": lambda: calls.append(1) or 0}
    scope = render_module._Scope(values)
    assert scope["a"] == 3 and calls == [] and "z" in scope
    assert scope["z"] == 0 and calls == [1] and scope["z"] == 0 and calls == [1]
    loop = render_module._Scope({"p": "{{ q }}", "q": "{{ p }}"})
    assert loop["p"] == "{{ q }}" and loop["q"] == "{{ q }}"  # text, which render() refuses


def test_a_second_expand_leaves_unchanged_files_alone_and_removes_stale_ones(tmp_path: Path) -> None:
    """Re-expanding 10,000 nodes removed and wrote 5,006 files again: seconds of the kernel's time on this box.
    A file whose text is the same is left as it is (its mtime too); one no longer written goes."""
    out = tmp_path / "out"
    expand(load_blueprint(REPO / "blueprints" / "lab.yaml"), out)
    conf = out / "files" / "all" / "etc" / "slurm" / "slurm.conf"
    os.utime(conf, ns=(10**9, 10**9))
    (out / "files" / "partition_gpu" / "etc" / "old.conf").write_text("stale\n")
    manifest = yaml.safe_load((out / "files.yml").read_text())
    manifest["files"].append({"path": "files/partition_gpu/etc/old.conf"})
    (out / "files.yml").write_text(yaml.safe_dump(manifest))
    done = expand(load_blueprint(REPO / "blueprints" / "lab.yaml"), out)
    assert conf.stat().st_mtime_ns == 10**9
    assert not (out / "files" / "partition_gpu" / "etc" / "old.conf").exists()
    written = sorted(str(p.relative_to(out)) for p in (out / "files").rglob("*") if p.is_file())
    assert written == sorted(f"files/{f.path}" for f in done.files)


def test_a_file_alike_in_every_partition_is_rendered_once_and_is_what_each_alone_renders(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Partitions whose variables are alike share their rendering of a file (a large cluster's partitions mostly
    are): each file is the one its partition renders alone; a file that names its hosts is rendered per class;
    a partition with other hardware gets its own gres.conf."""
    text = blueprint_text(3, 4).replace("count: 8", "count: 4", 1)  # the first partition: 4 GPUs per node
    bp = parse_blueprint(text, "three.yaml")
    inventory, extravars = build_vars(bp, SshAccess("root"))
    declared = [(f"partition_{p.name}", p.hostnames()) for p in bp.partitions]
    calls: list[str] = []

    def counted(role: str, template: str, ctx: Any, **kw: Any) -> str:
        calls.append(template)
        return render(role, template, ctx, **kw)

    monkeypatch.setattr(render_module, "render", counted)
    together = {f.path: f for f in render_all(inventory, extravars, declared)}
    assert calls.count("cgroup.conf.j2") == 1 and calls.count("pyxis.conf.j2") == 2  # login node's, then the nodes'
    assert calls.count("gres.conf.j2") == 3  # its header names the class's hosts
    for group, hosts in declared:
        alone = [f for f in render_all(inventory, extravars, [(group, hosts)]) if f.path.startswith(group)]
        assert alone and all(together[f.path] == f for f in alone), group
    gres = {p: together[f"{p}/etc/slurm/gres.conf"].text for p, _ in declared}
    assert "4 x gpu:h100" in gres["partition_p000"] and "8 x gpu:h100" in gres["partition_p001"]
