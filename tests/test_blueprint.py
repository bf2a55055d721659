"""The blueprint model: every rule reports FILE:LINE:COL: field.path: message, all problems at once."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hpckit.blueprint import BlueprintError, load_blueprint, load_site_vars, parse_blueprint

GOOD = """\
name: t
provider: {type: lab}
controller: {host: ctl, address: 10.77.0.10}
login:
  - {host: login, address: 10.77.0.11}
partitions:
  - name: gpu
    nodes: node[1-2]
    addresses: 10.77.0.[21-22]
    hardware: {cpus: 2, cores_per_socket: 2, memory_mb: 1000, gpus: {type: lab, count: 4}}
"""


def problems(text: str, **kw: object) -> list[str]:
    with pytest.raises(BlueprintError) as info:
        parse_blueprint(text, "bp.yaml", **kw)  # type: ignore[arg-type]
    lines = str(info.value).splitlines()
    for line in lines:
        assert re.match(r"^bp\.yaml:\d+:\d+: \S+: .+", line), line
    return lines


def test_example_blueprints_validate(repo: Path) -> None:
    lab = load_blueprint(repo / "blueprints" / "lab.yaml")
    assert [h for _, h, _ in lab.compute_hosts()] == ["node1", "node2", "node3", "node4"]
    assert lab.partitions[0].address_list()[0] == "10.77.0.21"
    assert lab.partitions[0].hardware.gpus is not None and lab.partitions[0].hardware.gpus.count == 4
    h100 = load_blueprint(repo / "blueprints" / "h100-ib.yaml")
    assert len(h100.compute_hosts()) == 16
    hw = h100.partitions[0].hardware
    assert hw.gpus is not None and hw.gpus.type == "h100-sxm" and hw.gpus.count == 8
    assert hw.infiniband is not None and hw.infiniband.rate_gbps == 400 and len(hw.infiniband.hcas) == 8
    assert h100.containers_on(h100.partitions[0])
    assert not lab.containers_on(lab.partitions[0])


def test_broken_blueprint_reports_every_mistake_at_its_line(data_dir: Path) -> None:
    path = data_dir / "blueprints" / "broken.yaml"
    with pytest.raises(BlueprintError) as info:
        load_blueprint(path)
    got = {(p.line, p.path): p.message for p in info.value.problems}
    expected = {
        (6, "provider.subnett"): "did you mean 'subnet'",
        (7, "controller.host"): "also a compute node in partitions[1]",
        (13, "partitions[0].nodes"): "bad hostlist",
        (18, "partitions[0].hardware.memory_mb"): "valid integer",
        (19, "partitions[0].hardware.gpus.type"): "undefined variable vars.gpu_typo",
        (22, "partitions[1].addresses"): "4 nodes but 3 addresses",
        (27, "partitions[1].hardware.gpus.type"): "unknown GPU type 'h900'",
        (28, "partitions[1].nodse"): "did you mean 'nodes'",
        (30, "partitions[2].nodes"): "node 'cpu3' is also in partitions[1]",
        (33, "filesystems[0].server"): "'nfs01' is not a declared host",
        (34, "filesystems[1].mount"): "also used by filesystems[0]",
    }
    for key, fragment in expected.items():
        assert key in got, f"missing problem at {key}; got {sorted(got)}"
        assert fragment in got[key], (key, got[key])
    assert len(info.value.problems) == len(expected)
    first = str(info.value).splitlines()[0]
    assert first.startswith(f"{path}:6:3: provider.subnett: unknown key 'subnett'")


@pytest.mark.parametrize(
    ("patch", "fragment"),
    [
        (("cpus: 2", "cpus: 3"), "cpus (3) must equal"),
        (("node[1-2]", "node[2-1]"), "bad hostlist"),
        (("node[1-2]", "node_a"), "not a valid hostname"),
        (("  - name: gpu\n", "  - name: gpu\n    name: gpu2\n"), "duplicate key (first at line 7)"),
        (("count: 4", "count: four"), "valid integer"),
        (("count: 4", "count: 4, driver: latest"), "'latest' is not a driver version"),
        (("10.77.0.[21-22]", "10.77.0.[21-23]"), "2 nodes but 3 addresses"),
        (("10.77.0.[21-22]", "10.78.0.[21-22]"), "outside the lab subnet"),
        (("{type: lab}", "{type: cloud}"), "does not match any of the expected tags"),
        (("address: 10.77.0.11", "address: 10.77.0.10"), "also used by"),
        (("address: 10.77.0.11", "address: 10.77.0.1"), "reserved in the lab subnet"),
        (("address: 10.77.0.11", "address: ten"), "not an IPv4 address"),
    ],
)
def test_each_rule(patch: tuple[str, str], fragment: str) -> None:
    text = GOOD.replace(*patch)
    assert text != GOOD
    found = problems(text)
    assert any(fragment in line for line in found), found


def test_missing_keys_and_wrong_top_level() -> None:
    found = problems("name: t\nprovider: {type: lab}\n")
    assert any("missing required key 'controller'" in p for p in found)
    assert any("missing required key 'partitions'" in p for p in found)
    assert problems("- a\n- b\n") == [
        "bp.yaml:1:1: (document): a blueprint must be a YAML mapping (name:, provider:, ...)"
    ]


def test_yaml_syntax_error_is_located() -> None:
    found = problems(GOOD + "  - name: [unclosed\n")
    assert len(found) == 1 and found[0].startswith("bp.yaml:12:") and "YAML syntax" in found[0]


def test_vars_keep_types_and_interpolate() -> None:
    text = GOOD.replace("count: 4", "count: $(vars.n)").replace("name: t", "name: t\nvars: {n: 4, p: node}")
    text = text.replace("node[1-2]", "$(vars.p)[1-2]")
    bp = parse_blueprint(text, "bp.yaml")
    gpus = bp.partitions[0].hardware.gpus
    assert gpus is not None and gpus.count == 4
    assert bp.partitions[0].hostnames() == ["node1", "node2"]


def test_site_vars_override(tmp_path: Path) -> None:
    site = tmp_path / "site.yaml"
    site.write_text("vars:\n  n: 2\n")
    text = GOOD.replace("count: 4", "count: $(vars.n)").replace("name: t", "name: t\nvars: {n: 4}")
    bp = parse_blueprint(text, "bp.yaml", load_site_vars([site]))
    gpus = bp.partitions[0].hardware.gpus
    assert gpus is not None and gpus.count == 2
    site.write_text("vars: {n: 2}\nname: other\n")
    with pytest.raises(BlueprintError, match=r"site.yaml:2:1: name: unknown key"):
        load_site_vars([site])


def test_var_cycle_is_reported() -> None:
    text = GOOD.replace("name: t", "name: t\nvars: {a: $(vars.b), b: $(vars.a)}").replace("cpus: 2", "cpus: $(vars.a)")
    assert any("cycle" in p for p in problems(text))


def test_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(BlueprintError, match="cannot read"):
        load_blueprint(tmp_path / "nope.yaml")


def test_a_non_text_host_is_a_type_error_not_a_crash() -> None:
    found = problems(GOOD.replace("controller: {host: ctl,", "controller: {host: [],"))
    assert any("controller.host" in p and "valid string" in p for p in found), found
