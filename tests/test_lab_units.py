"""Lab pieces that need neither root nor a running lab: spec rules, generated files, adapters."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from hpckit.lab import LabError, LabNode, LabSpec, etcfiles, net, node, required_packages, spec_from_blueprint
from hpckit.lab.state import LabPaths

NODES = (LabNode("ctl", "10.77.9.10"), LabNode("node1", "10.77.9.11", gpus=2))


def make_spec(**changes: object) -> LabSpec:
    fields: dict[str, object] = {
        "cluster": "unit",
        "nodes": NODES,
        "subnet": "10.77.9.0/24",
        "bridge": "hpckt9",
    }
    fields.update(changes)
    return LabSpec(**fields)  # type: ignore[arg-type]


# ------------------------------------------------------------------ spec rules


def test_valid_spec_round_trips_through_json() -> None:
    spec = make_spec(shared_dirs=("/shared",))
    assert LabSpec.from_json(spec.to_json()) == spec
    assert spec.host_address == "10.77.9.1"
    assert spec.veth_name(NODES[1]) == "hpckt9v11"


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"nodes": (LabNode("a", "10.77.8.5"),)}, "outside subnet"),
        ({"nodes": (LabNode("a", "10.77.9.1"),)}, "host's own address"),
        ({"nodes": (LabNode("a", "10.77.9.255"),)}, "outside subnet"),
        ({"nodes": (LabNode("a", "10.77.9.5"), LabNode("a", "10.77.9.6"))}, "used twice"),
        ({"nodes": (LabNode("a", "10.77.9.5"), LabNode("b", "10.77.9.5"))}, "share address"),
        ({"nodes": ()}, "at least one node"),
        ({"subnet": "10.77.9.1/24"}, "not an IPv4 network"),
        ({"subnet": "fd00::/64"}, "IPv4 network"),
        ({"bridge": "a-very-long-bridge"}, "at most 9"),
        ({"cluster": "../etc"}, "cluster name"),
        ({"shared_dirs": ("shared",)}, "absolute"),
        ({"shared_dirs": ("/",)}, "system directory"),
        ({"shared_dirs": ("/usr",)}, "system directory"),
        ({"shared_dirs": ("/proc/x",)}, "kernel filesystem"),
        ({"shared_dirs": ("/a", "/a/b")}, "overlap"),
        ({"shared_dirs": ("/a,b",)}, "mount options"),
        ({"state_root": Path("relative")}, "absolute"),
    ],
)
def test_bad_spec_is_a_clear_lab_error(changes: dict[str, object], message: str) -> None:
    with pytest.raises(LabError, match=message):
        make_spec(**changes)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": "bad_name", "address": "10.0.0.1"}, "not a valid hostname"),
        ({"name": "node1\n", "address": "10.0.0.1"}, "not a valid hostname"),
        ({"name": "n", "address": "10.0.0"}, "not an IPv4"),
        ({"name": "n", "address": "::1"}, "not an IPv4"),
        ({"name": "n", "address": "10.0.0.1", "gpus": -1}, "gpus"),
    ],
)
def test_bad_node_is_a_clear_lab_error(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(LabError, match=message):
        LabNode(**kwargs)  # type: ignore[arg-type]


def test_spec_from_malformed_json_names_the_problem() -> None:
    with pytest.raises(LabError, match="missing field 'nodes'"):
        LabSpec.from_json('{"cluster": "x"}', origin="f.json")
    with pytest.raises(LabError, match="not valid JSON"):
        LabSpec.from_json("{", origin="f.json")


# ------------------------------------------------------------------ generated node files


def test_hosts_lists_nodes_also_as_ipv4_mapped() -> None:
    text = etcfiles.hosts_text(make_spec())
    assert "10.77.9.11 node1\n" in text
    assert "::ffff:10.77.9.11 node1\n" in text
    assert "127.0.1.1" not in text  # the node name must resolve to its lab address only


def test_nsswitch_keeps_host_sources_but_hosts_from_files_only() -> None:
    host = "passwd:         files systemd\nhosts:          files mdns4_minimal [NOTFOUND=return] dns\n"
    text = etcfiles.nsswitch_text(host)
    assert "passwd:         files systemd" in text
    assert [line for line in text.splitlines() if line.startswith("hosts:")] == ["hosts:          files"]


def test_locked_root_is_unlocked_for_key_logins_only_when_needed() -> None:
    assert etcfiles.unlocked_root_shadow("root:*:20228:0:99999:7:::\n") is None
    unlocked = etcfiles.unlocked_root_shadow("root:!$y$abc:20228::::::\nbin:*:1::::::\n")
    assert unlocked == "root:*:20228::::::\nbin:*:1::::::\n"


def test_boot_script_mounts_private_views_and_fake_gpus() -> None:
    spec = make_spec(shared_dirs=("/shared",))
    paths = LabPaths.of(Path("/var/lib/hpckit/lab"), spec.cluster)
    gpu_script = node.boot_script(spec, paths, NODES[1])
    cpu_script = node.boot_script(spec, paths, NODES[0])
    assert "mknod -m 0666 /dev/nvidia0 c 1 3" in gpu_script
    assert "mknod -m 0666 /dev/nvidia1 c 1 3" in gpu_script
    assert "nvidia" not in cpu_script
    assert "mount -t tmpfs -o mode=0755,nosuid,nodev hpckit-run /run" in gpu_script
    assert "mkdir -m 1777 /run/lock" in gpu_script
    assert "/var/lib/hpckit/lab/unit/shared/shared /shared" in gpu_script
    assert "lowerdir=/etc,upperdir=/var/lib/hpckit/lab/unit/nodes/node1/layers/etc/upper" in gpu_script
    assert 'mount --bind "/etc/skel/$f" "/root/$f"' in gpu_script  # not the host's own shell start-up
    assert gpu_script.rstrip().endswith("exec tini -- sleep infinity")


def test_node_network_has_dead_end_default_route() -> None:
    batch = net.node_network_batch(make_spec(), NODES[0])
    assert "addr add 10.77.9.10/24 dev eth0" in batch
    assert "link add dead0 type veth peer name dead1" in batch
    assert "route add default dev dead0 src 10.77.9.10" in batch
    assert "via" not in batch
    assert net.node_mac(NODES[0]) == "02:68:0a:4d:09:0a"


def test_package_list_names_the_daemons() -> None:
    packages = required_packages()
    for name in ("slurmctld", "slurmd", "slurmdbd", "munge", "mariadb-server", "openssh-server", "tini"):
        assert name in packages
    assert all(" " not in p and not p.startswith("#") for p in packages)


# ------------------------------------------------------------------ blueprint adapter


@dataclass
class FakeHost:
    host: str
    address: str | None = None


@dataclass
class FakeGpus:
    count: int


@dataclass
class FakeHardware:
    gpus: FakeGpus | None


@dataclass
class FakePartition:
    hardware: FakeHardware


@dataclass
class FakeFs:
    mount: str


@dataclass
class FakeProvider:
    type: str = "lab"
    subnet: str = "10.77.9.0/24"
    bridge: str = "hpckt9"


@dataclass
class FakeBlueprint:
    name: str
    controller: FakeHost
    login: list[FakeHost]
    computes: list[tuple[FakePartition, str, str | None]]
    provider: object = field(default_factory=FakeProvider)
    filesystems: list[FakeFs] = field(default_factory=list)

    def compute_hosts(self) -> list[tuple[FakePartition, str, str | None]]:
        return self.computes


def test_blueprint_hosts_become_nodes_with_gpus_and_free_addresses() -> None:
    gpu = FakePartition(FakeHardware(FakeGpus(4)))
    bp = FakeBlueprint(
        name="lab",
        controller=FakeHost("ctl", "10.77.9.10"),
        login=[FakeHost("ctl"), FakeHost("login")],
        computes=[(gpu, "node1", "10.77.9.21"), (gpu, "node2", None)],
        filesystems=[FakeFs("/shared"), FakeFs("/shared")],
    )
    spec = spec_from_blueprint(bp)
    assert [(n.name, n.address, n.gpus) for n in spec.nodes] == [
        ("ctl", "10.77.9.10", 0),
        ("login", "10.77.9.11", 0),
        ("node1", "10.77.9.21", 4),
        ("node2", "10.77.9.12", 4),
    ]
    assert spec.shared_dirs == ("/shared",)
    assert (spec.subnet, spec.bridge) == ("10.77.9.0/24", "hpckt9")


def test_blueprint_of_another_provider_is_refused() -> None:
    bp = FakeBlueprint("x", FakeHost("ctl"), [], [], provider=FakeProvider(type="static"))
    with pytest.raises(LabError, match="not 'lab'"):
        spec_from_blueprint(bp)


def test_blueprint_host_with_two_addresses_is_refused() -> None:
    bp = FakeBlueprint("x", FakeHost("ctl", "10.77.9.10"), [FakeHost("ctl", "10.77.9.11")], [])
    with pytest.raises(LabError, match="two addresses"):
        spec_from_blueprint(bp)
