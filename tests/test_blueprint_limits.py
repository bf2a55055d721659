"""Blueprint input that used to hang, pass or hide other problems: reference bombs, bytes that are not
UTF-8, values no cluster has, duplicate keys; the shipped JSON Schema against a real validator; and
partitions that share nodes."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from hpckit.blueprint import BlueprintError, blueprint_schema, load_blueprint, parse_blueprint
from tests.test_blueprint import GOOD, problems

REPO = Path(__file__).resolve().parent.parent
SHIPPED = sorted((REPO / "blueprints").glob("*.yaml"))


def chain(kind: str, depth: int = 100) -> str:
    """vars that each use the next one twice: 2**depth copies of the last if expanded naively."""
    shapes = {
        "text": '"$(vars.v{n})$(vars.v{n})"',
        "list": '["$(vars.v{n})", "$(vars.v{n})"]',
        "map": '{{a: "$(vars.v{n})", b: "$(vars.v{n})"}}',
    }
    lines = [f"  v{i}: {shapes[kind].format(n=i + 1)}" for i in range(depth)] + [f"  v{depth}: abcdefgh"]
    text = GOOD.replace("name: t\n", "name: t\nvars:\n" + "\n".join(lines) + "\n")
    return text.replace("provider: {type: lab}", "provider: {type: lab}\nslurm: {cluster_name: $(vars.v0)}")


@pytest.mark.parametrize("kind", ["text", "list", "map"])
def test_a_reference_bomb_ends_at_once_with_a_located_error(kind: str) -> None:
    text = chain(kind)
    assert len(text) < 5000  # the bomb was 2.5 KB: this one is of the same order
    line = text.splitlines().index("slurm: {cluster_name: $(vars.v0)}") + 1
    start = time.perf_counter()
    found = problems(text)
    assert time.perf_counter() - start < 2.0
    assert len(found) == 1, found
    assert found[0].startswith(f"bp.yaml:{line}:23: slurm.cluster_name: vars.v")
    assert "expands to" in found[0] and "reached through vars.v0 -> vars.v1 -> ..." in found[0]


def test_shared_references_are_resolved_once_and_keep_their_values() -> None:
    text = GOOD.replace("name: t\n", "name: t\nvars: {a: $(vars.b), b: $(vars.c), c: 2, p: node}\n")
    text = text.replace("cpus: 2", "cpus: $(vars.a)").replace("cores_per_socket: 2", "cores_per_socket: $(vars.b)")
    text = text.replace("nodes: node[1-2]", "nodes: $(vars.p)[1-2]")
    bp = parse_blueprint(text, "bp.yaml")
    hw = bp.partitions[0].hardware
    assert hw is not None and (hw.cpus, hw.cores_per_socket) == (2, 2)
    assert bp.partitions[0].hostnames() == ["node1", "node2"]


def test_a_cycle_names_its_variables_and_an_undefined_one_names_who_uses_it() -> None:
    text = GOOD.replace("name: t\n", "name: t\nvars: {a: $(vars.b), b: $(vars.c), c: $(vars.a), d: $(vars.nope)}\n")
    found = problems(text.replace("cpus: 2", "cpus: $(vars.a)").replace("memory_mb: 1000", "memory_mb: $(vars.d)"))
    assert any("cycle: vars.a -> vars.b -> vars.c -> vars.a" in p and "hardware.cpus" in p for p in found), found
    assert any("undefined variable vars.nope (used by vars.d)" in p and "memory_mb" in p for p in found), found


def test_a_byte_that_is_not_utf8_is_reported_where_it_is(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(GOOD.replace("name: gpu", "name: gpu  # caf\xe9").encode("latin-1"))
    with pytest.raises(BlueprintError) as info:
        load_blueprint(path)
    (problem,) = info.value.problems
    assert (problem.line, problem.col) == (7, 21), problem
    assert "byte e9 is not UTF-8" in problem.message


@pytest.mark.parametrize(
    ("patch", "fragment"),
    [
        (("memory_mb: 1000", "memory_mb: 1e30"), "valid integer"),  # YAML 1.1 reads 1e30 as text
        (("memory_mb: 1000", "memory_mb: 1.0e+30"), "less than or equal to 67108864"),
        (("memory_mb: 1000", "memory_mb: 1000000000000000000000000000000"), "less than or equal to 67108864"),
        (("memory_mb: 1000", "memory_mb: 1000.5"), "valid integer"),
        (("cpus: 2", "cpus: 100000"), "less than or equal to 65535"),
    ],
)
def test_numbers_no_machine_has_are_refused(patch: tuple[str, str], fragment: str) -> None:
    found = problems(GOOD.replace(*patch))
    assert any("hardware." in p and fragment in p for p in found), found


def test_a_whole_float_is_an_integer() -> None:
    bp = parse_blueprint(GOOD.replace("memory_mb: 1000", "memory_mb: 1.0e+3"), "bp.yaml")
    assert bp.partitions[0].hardware is not None and bp.partitions[0].hardware.memory_mb == 1000


@pytest.mark.parametrize("cron", ["x", "0 2 * *", "61 2 * * *", "0 2 * * mon-fri", "0 2 */0 * *"])
def test_a_nightly_schedule_the_sweep_cannot_follow_is_refused(cron: str) -> None:
    found = problems(GOOD + f"health: {{nightly: '{cron}'}}\n")
    assert any(p.startswith("bp.yaml:11:") and "health.nightly: cron expression" in p for p in found), found


@pytest.mark.parametrize("version", ["latest", "3.5", "3.5.0; rm -rf /", "v3.5.0", "3.5.0\nx", ""])
def test_enroot_and_pyxis_versions_are_release_numbers(version: str) -> None:
    for tool in ("enroot", "pyxis"):
        found = problems(GOOD + f"containers: {{{tool}: {{version: {json.dumps(version)}}}}}\n")
        assert any(f"containers.{tool}.version: String should match pattern" in p for p in found), found


def test_a_pinned_enroot_package_must_be_the_version_named() -> None:
    pinned = "containers: {enroot: {version: 3.5.0, package: /srv/debs/enroot_3.4.1-1_amd64.deb}}\n"
    found = problems(GOOD + pinned)
    assert any("is enroot 3.4.1, but version is 3.5.0" in p for p in found), found
    parse_blueprint(GOOD + pinned.replace("3.4.1", "3.5.0"), "bp.yaml")


def test_a_duplicate_key_is_reported_beside_every_other_problem() -> None:
    text = GOOD.replace("  - name: gpu\n", "  - name: gpu\n    name: gpu2\n").replace("cpus: 2", "cpus: 3")
    text = text.replace("address: 10.77.0.11", "address: ten")
    found = problems(text)
    assert any("duplicate key (first at line 7)" in p for p in found), found
    assert any("cpus (3) must equal" in p for p in found), found
    assert any("not an IPv4 address" in p for p in found), found


# --- the shipped JSON Schema -------------------------------------------------------------------------


def shipped_schema() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads((REPO / "hpckit-blueprint.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return schema


def schema_errors(doc: Any) -> list[str]:
    """Every error, those under an anyOf included, as PATH: message."""

    def flat(error: jsonschema.ValidationError) -> list[jsonschema.ValidationError]:
        return [error, *(e for child in error.context or [] for e in flat(child))]

    validator = jsonschema.Draft202012Validator(shipped_schema())
    found = [e for top in validator.iter_errors(doc) for e in flat(top)]
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in found]


@pytest.mark.parametrize("path", SHIPPED, ids=[p.name for p in SHIPPED])
def test_every_shipped_blueprint_passes_the_shipped_schema(path: Path) -> None:
    assert shipped_schema() == blueprint_schema()
    load_blueprint(path)
    assert schema_errors(yaml.safe_load(path.read_text())) == []


def test_the_schema_takes_a_reference_wherever_the_loader_does() -> None:
    refs = {
        "vars": {"n": 2, "gpus": {"type": "lab", "count": 4}, "hw": 1000, "net": "10.77.0", "yes": True},
        "provider": {"type": "lab", "subnet": "$(vars.net).0/24"},
        "controller": {"host": "ctl", "address": "$(vars.net).10"},
        "login": [{"host": "login", "address": "$(vars.net).11"}],
        "partitions": [
            {
                "name": "gpu",
                "nodes": "node[1-2]",
                "addresses": "$(vars.net).[21-22]",
                "default": "$(vars.yes)",
                "hardware": {"cpus": "$(vars.n)", "cores_per_socket": "$(vars.n)", "memory_mb": "$(vars.hw)"},
            }
        ],
    }
    refs["partitions"][0]["hardware"]["gpus"] = "$(vars.gpus)"
    doc = {"name": "t", **refs}
    parse_blueprint(yaml.safe_dump(doc), "bp.yaml")
    assert schema_errors(doc) == []
    doc["partitions"][0]["hardware"]["cpus"] = "two"  # not a reference: still wrong for the schema
    assert "partitions/0/hardware/cpus: 'two' is not of type 'integer'" in schema_errors(doc)


# --- partitions that share nodes -------------------------------------------------------------------------

SHARED = GOOD.replace("name: gpu\n", "name: gpu\n    default: true\n") + (
    "  - name: debug\n"
    "    nodes: node1\n"
    '    max_time: "1:00:00"\n'
    "    default_time: 10\n"
    "    oversubscribe: FORCE:2\n"
    "    allow_accounts: [ops, ml-team]\n"
    "    allow_qos: [debug]\n"
    "    def_mem_per_cpu: 100\n"
)


def test_a_node_in_two_partitions_is_declared_once() -> None:
    bp = parse_blueprint(SHARED, "bp.yaml")
    assert [h for _, h, _ in bp.compute_hosts()] == ["node1", "node2"]
    assert [p.name for p in bp.partitions_of("node1")] == ["gpu", "debug"]
    debug = bp.partitions[1]
    assert debug.hardware is None and bp.hardware_in(debug) is bp.partitions[0].hardware
    assert bp.containers_on(debug) == bp.containers_on(bp.partitions[0])


@pytest.mark.parametrize(
    ("patch", "fragment"),
    [
        (("nodes: node1\n", "nodes: node[1-3]\n"), "node 'node3' is not declared by any partition with hardware"),
        (("nodes: node1\n", "nodes: node1\n    addresses: [10.77.0.21]\n"), "addresses go with the partition"),
        (('max_time: "1:00:00"', 'max_time: "5"'), "default_time 10 is longer than max_time 5"),
        (("oversubscribe: FORCE:2", "oversubscribe: sometimes"), "String should match pattern"),
        (("allow_accounts: [ops, ml-team]", "allow_accounts: ['ops,root']"), "String should match pattern"),
        (("def_mem_per_cpu: 100", "def_mem_per_cpu: -1"), "greater than or equal to 0"),
    ],
)
def test_partition_settings_are_checked(patch: tuple[str, str], fragment: str) -> None:
    text = SHARED.replace(*patch)
    assert text != SHARED
    found = problems(text)
    assert any(fragment in p for p in found), found


def test_a_second_declaration_with_hardware_points_at_the_way_to_share() -> None:
    text = GOOD + "  - name: two\n    nodes: node2\n    hardware: {cpus: 1, cores_per_socket: 1, memory_mb: 500}\n"
    found = problems(text)
    assert any("node 'node2' is also in partitions[0]; to put a node in several partitions" in p for p in found)
