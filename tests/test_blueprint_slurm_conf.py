"""`hpckit validate` on `slurm.conf:` overrides and `slurm.topology`: an unknown key with the closest one, a
key the blueprint's Slurm release does not read (removed: what replaces it; renamed: the new name), a
plugin that release lacks, a block topology Slurm would refuse; each located like every other problem."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hpckit.blueprint import parse_blueprint
from hpckit.blueprint.checks import cross_checks
from hpckit.blueprint.refs import resolve_vars
from hpckit.blueprint.source import load_located
from hpckit.deploy.release_vars import blueprint_blocks, release_extravars
from hpckit.deploy.topology import block_topology_conf
from tests.test_blueprint import GOOD, problems

# tests/test_blueprint.py's blueprint with eight GPU nodes (the same lines, so the same line numbers).
HEAD = (
    GOOD.replace("name: gpu", "name: gb200")
    .replace("node[1-2]", "gb[01-08]")
    .replace("10.77.0.[21-22]", "10.77.0.[21-28]")
)


def checked(text: str) -> list[str]:
    """Cross-field problems of a blueprint, `slurm.version` included (read by the checks before the model
    has that field)."""
    doc = load_located(text, "bp.yaml")
    data, _ = resolve_vars(doc, {})
    return [str(p) for p in cross_checks(doc, data)]


def test_a_key_with_a_trailing_newline_never_reaches_slurm_conf() -> None:
    """`"SchedulerType\\n": x` would write a line of its own into slurm.conf."""
    got = problems(HEAD + 'slurm:\n  conf:\n    "SchedulerType\\n": sched/backfill\n')
    assert got and all("slurm.conf" in line for line in got), got


def test_a_typo_gets_the_closest_key_at_its_line() -> None:
    text = HEAD + "slurm:\n  conf:\n    SchedulerTyp: sched/backfill\n    DefMemPerCPU: 500\n"
    assert problems(text) == [
        "bp.yaml:13:5: slurm.conf.SchedulerTyp: 'SchedulerTyp' is not a slurm.conf key; did you mean 'SchedulerType'?"
    ]


def test_removed_and_renamed_keys_say_what_to_write() -> None:
    text = HEAD + "slurm:\n  conf:\n    FastSchedule: 1\n    ControlMachine: ctl\n"
    got = problems(text)
    assert got[0].startswith("bp.yaml:13:5: slurm.conf.FastSchedule: FastSchedule was removed in Slurm 20.02; use")
    assert got[1] == (
        "bp.yaml:14:5: slurm.conf.ControlMachine: ControlMachine was renamed SlurmctldHost in Slurm 18.08; "
        "write SlurmctldHost"
    )


def test_a_nonexistent_plugin_is_caught() -> None:
    text = HEAD + "slurm:\n  conf:\n    SelectType: select/cons_tre\n    TaskPlugin: task/affinity,task/cgroupp\n"
    got = problems(text)
    assert "slurm.conf.SelectType: SelectType: 'select/cons_tre' is not a plugin of Slurm 22.05" in got[0]
    assert "did you mean 'select/cons_tres'?" in got[0]
    assert got[0].startswith("bp.yaml:13:17:") and "'task/cgroupp'" in got[1]


def test_keys_and_plugins_follow_the_blueprint_s_release() -> None:
    later = (
        HEAD
        + 'slurm:\n  version: "24.11.5"\n  conf:\n    DataParserParameters: v0.0.42\n    SelectType: select/cons_res\n'
    )
    got = checked(later)
    assert got == [
        "bp.yaml:15:17: slurm.conf.SelectType: SelectType=select/cons_res was removed in Slurm 23.11; "
        "use select/cons_tres"
    ]
    default = HEAD + "slurm:\n  conf:\n    DataParserParameters: v0.0.42\n"
    assert problems(default) == [
        "bp.yaml:13:5: slurm.conf.DataParserParameters: DataParserParameters is new in Slurm 24.11; this "
        "blueprint's Slurm is 22.05"
    ]
    newest = HEAD + 'slurm:\n  version: "25.11"\n  conf:\n    JobContainerType: job_container/tmpfs\n'
    assert "renamed NamespaceType in Slurm 25.11; write NamespaceType" in checked(newest)[0]
    # An unquoted series reads as a float; the site's own packages need no exact release.
    site = "  install: packages\n  packages: ['deb http://repo.invalid/slurm bookworm main']\n"
    assert checked(HEAD + f"slurm:\n  version: 24.11\n{site}  conf:\n    DataParserParameters: v0.0.42\n") == []


def test_validate_exits_non_zero_naming_the_line(tmp_path: Path) -> None:
    path = tmp_path / "bp.yaml"
    path.write_text(HEAD + "slurm:\n  conf:\n    SchedulerTyp: sched/backfill\n")
    done = subprocess.run(
        [sys.executable, "-m", "hpckit", "validate", str(path)], capture_output=True, text=True, check=False
    )
    assert done.returncode != 0
    assert f"{path}:13:5: slurm.conf.SchedulerTyp:" in done.stderr + done.stdout


# --- topology/block ---------------------------------------------------------------------------------------


def block(spec: str, version: str | None = "24.11.5") -> str:
    ver = f'  version: "{version}"\n' if version else ""
    return HEAD + f"slurm:\n{ver}  topology: {spec}\n"


def test_block_topology_is_refused_before_23_11() -> None:
    got = problems(block("{type: block, block_size: 4}", version=None))
    assert got == [
        "bp.yaml:12:20: slurm.topology.type: topology/block is new in Slurm 23.11; this blueprint's Slurm is 22.05 "
        "(set slurm.version to a release that has it)"
    ]
    assert "is new in Slurm 23.11" in checked(block("{type: block, block_size: 4}", "23.02"))[0]
    assert checked(block("{type: block, block_size: 4}", "23.11.10")) == []


def test_block_sizes_follow_slurm_s_rules() -> None:
    assert checked(block("{type: block, block_size: 2, sizes: [2, 4, 8]}")) == []
    got = checked(block("{type: block, block_size: 2, sizes: [2, 6, 4]}"))
    assert [re.sub(r"^bp.yaml:\d+:\d+: ", "", g).split(":")[0] for g in got] == [
        "slurm.topology.sizes[1]",
        "slurm.topology.sizes[2]",
    ]
    assert "power-of-two multiple of the base size 2" in got[0]
    on_2311 = checked(block("{type: block, block_size: 2, sizes: [2, 4]}", "23.11.10"))
    assert "BlockSizes is new in Slurm 24.05" in on_2311[0]


def test_blocks_smaller_than_the_base_size_need_25_05() -> None:
    uneven = "{type: block, block_size: 3}"  # 8 nodes: blocks of 3, 3 and 2
    assert "block 'block003' has 2 nodes, fewer than the base block size 3" in checked(block(uneven))[0]
    assert checked(block(uneven, "25.05.1")) == []


def test_named_blocks_are_checked_against_the_nodes() -> None:
    named = (
        "{type: block, blocks: [{name: nvl1, nodes: 'gb[01-04]'}, {name: nvl2, nodes: 'gb[04-07]'},"
        " {name: nvl1, nodes: 'gb[08-09]'}]}"
    )
    got = " | ".join(checked(block(named, "25.05.1")))
    assert "slurm.topology.blocks[1].nodes: node 'gb04' is also in block 'nvl1'" in got
    assert "slurm.topology.blocks[2].name: block 'nvl1' is already declared" in got
    assert "slurm.topology.blocks[2].nodes: 'gb09' is not a compute node of this blueprint" in got
    partial = "{type: block, blocks: [{name: nvl1, nodes: 'gb[01-04]'}]}"
    assert "4 compute node(s) in no block (gb05, gb06, gb07, ...)" in checked(block(partial))[0]
    assert (
        "give either blocks or block_size"
        in checked(block("{type: block, block_size: 4, blocks: [{name: a, nodes: gb01}]}"))[0]
    )
    assert "needs its blocks" in checked(block("{type: block}"))[0]


def test_block_topology_renders_topology_conf() -> None:
    bp = parse_blueprint(block("{type: block, block_size: 4, sizes: [4, 8]}"), "bp.yaml")
    assert bp.slurm.version == "24.11.5"
    assert blueprint_blocks(bp) == [
        ("block001", [f"gb0{i}" for i in range(1, 5)]),
        ("block002", [f"gb0{i}" for i in range(5, 9)]),
    ]
    conf = block_topology_conf(blueprint_blocks(bp), [4, 8])
    assert conf.splitlines()[1:] == [
        "BlockName=block001 Nodes=gb[01-04]",
        "BlockName=block002 Nodes=gb[05-08]",
        "BlockSizes=4,8",
    ]
    extravars = release_extravars(bp, {})
    assert extravars["infiniband_topology"] == "given" and extravars["infiniband_topology_plugin"] == "topology/block"
    assert extravars["infiniband_topology_given"] == conf


@pytest.mark.slow  # a playbook run: ~6 s
def test_the_infiniband_role_writes_the_given_topology_and_its_plugin(tmp_path: Path) -> None:
    """The role that owns topology.conf, run for real on this machine (connection local) in its `given`
    mode: it writes hpckit's text and hands slurm.conf the block plugin."""
    from tests.test_ansible_static import ANSIBLE, _ansible_env, _tool

    conf = block_topology_conf([("nvl1", ["gb01", "gb02"]), ("nvl2", ["gb03", "gb04"])], [2, 4])
    play = tmp_path / "play.yml"
    play.write_text(
        "- hosts: localhost\n  gather_facts: false\n  roles: [infiniband]\n"
        "  post_tasks:\n    - ansible.builtin.copy: {content: '{{ slurm_topology_plugin }}', dest: "
        f"'{tmp_path}/plugin'}}\n"
    )
    extravars = {
        "infiniband_topology": "given",
        "infiniband_topology_given": conf,
        "infiniband_topology_plugin": "topology/block",
        "infiniband_slurm_conf_dir": str(tmp_path / "etc"),
        "ansible_python_interpreter": sys.executable,
    }
    done = subprocess.run(
        [
            _tool("ansible-playbook"),
            "-i",
            "localhost,",
            "-c",
            "local",
            str(play),
            "-e",
            json.dumps(extravars),
        ],
        cwd=ANSIBLE,
        env={**_ansible_env(tmp_path), "ANSIBLE_ROLES_PATH": str(ANSIBLE / "roles")},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert (tmp_path / "etc" / "topology.conf").read_text() == conf
    assert (tmp_path / "plugin").read_text() == "topology/block"
