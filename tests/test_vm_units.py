"""The pure parts of VM labs: spec, kernel command line, MAC, image key, qemu's command line, seed disk,
the archive read from apt's sources, and a `provider: vm` blueprint's machines. No root, no qemu."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from hpckit.blueprint import parse_blueprint
from hpckit.lab import LabError, LabNode, LabSpec, VmSpec, vm_spec_from_blueprint
from hpckit.lab.vm import guest, image, machines, mirror
from hpckit.lab.vm import net as vmnet

LAB = LabSpec(
    cluster="vmt",
    nodes=(LabNode("ctl", "10.78.130.10"), LabNode("c1", "10.78.130.11")),
    subnet="10.78.130.0/24",
    bridge="hpkvt",
)
SPEC = VmSpec(LAB, memory_mib={"ctl": 1536})


def test_spec_defaults_roundtrip_and_names() -> None:
    assert SPEC.memory_of("ctl") == 1536
    assert SPEC.memory_of("c1") == 1024
    assert SPEC.netns == "hpckvm-vmt"
    assert VmSpec.from_json(SPEC.to_json()) == SPEC
    moved = SPEC.with_state_root(Path("/tmp/elsewhere"))
    assert moved.lab.state_root == Path("/tmp/elsewhere") and moved.memory_mib == SPEC.memory_mib


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"memory_mib": {"nope": 1024}}, "no node 'nope'"),
        ({"memory_mib": {"c1": 100}}, "memory must be"),
        ({"default_memory_mib": 99999}, "memory must be"),
        ({"cpus": 0}, "cpus must be"),
    ],
)
def test_spec_refuses_bad_machines(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(LabError, match=message):
        VmSpec(LAB, **kwargs)  # type: ignore[arg-type]


def test_spec_refuses_gpus_and_shared_dirs() -> None:
    with pytest.raises(LabError, match="no GPUs"):
        VmSpec(LabSpec("vmt", (LabNode("c1", "10.78.130.11", gpus=1),), subnet="10.78.130.0/24"))
    with pytest.raises(LabError, match="share no host directories"):
        VmSpec(LabSpec("vmt", LAB.nodes, subnet="10.78.130.0/24", shared_dirs=("/shared",)))


def test_spec_json_errors_name_the_file() -> None:
    with pytest.raises(LabError, match=r"vm\.json: missing field 'lab'"):
        VmSpec.from_json("{}", origin="vm.json")
    with pytest.raises(LabError, match=r"vm\.json: not valid JSON"):
        VmSpec.from_json("{", origin="vm.json")


def test_kernel_cmdline_carries_address_and_hostname() -> None:
    line = guest.kernel_cmdline("10.78.130.11", 24, "c1")
    words = line.split()
    assert "root=/dev/vda" in words and "console=ttyS0" in words and "net.ifnames=0" in words
    assert "hpckit.ip=10.78.130.11/24" in words
    assert "systemd.hostname=c1" in words


def test_mac_is_fixed_per_address_and_locally_administered() -> None:
    mac = machines.machine_mac("10.78.130.11")
    assert mac == "02:68:0a:4e:82:0b"
    assert int(mac.split(":")[0], 16) & 0b10  # locally administered
    assert machines.machine_mac("10.78.130.12") != mac


def test_tap_names_follow_the_address() -> None:
    assert vmnet.tap_name(SPEC, LAB.node("ctl")) == "tap10"
    assert vmnet.tap_name(SPEC, LAB.node("c1")) == "tap11"


def test_image_key_follows_the_recipe() -> None:
    recipe = image.Recipe("trixie", ("openssh-server",), ("click>=8.1",))
    assert recipe.key == image.Recipe("trixie", ("openssh-server",), ("click>=8.1",)).key
    assert len(recipe.key) == 16
    others = [
        image.Recipe("forky", ("openssh-server",), ("click>=8.1",)),
        image.Recipe("trixie", ("openssh-server", "munge"), ("click>=8.1",)),
        image.Recipe("trixie", ("openssh-server",), ("click>=8.2",)),
        image.Recipe("trixie", ("openssh-server",), ("click>=8.1",), version=image.RECIPE_VERSION + 1),
    ]
    assert len({recipe.key, *(r.key for r in others)}) == 5


def test_default_recipe_has_every_role_package() -> None:
    recipe = image.default_recipe()
    for package in ("slurmctld", "slurmd", "slurmdbd", "slurm-client", "munge", "mariadb-server"):
        assert package in recipe.packages
    for package in ("nfs-kernel-server", "nfs-common", "python3-venv", "python3-pymysql", "openssh-server"):
        assert package in recipe.packages
    assert any(r.startswith("click") for r in recipe.python_requirements)
    assert not any("pytest" in r for r in recipe.python_requirements)  # extras stay out


def test_cached_image_needs_every_file(tmp_path: Path) -> None:
    recipe = image.Recipe("trixie", ("openssh-server",), ())
    assert image.cached_image(recipe, tmp_path) is None
    folder = tmp_path / recipe.key
    folder.mkdir()
    for name in ("base.qcow2", "vmlinuz", "initrd.img"):
        (folder / name).write_text("x")
    assert image.cached_image(recipe, tmp_path) is None  # no recipe.json: an unfinished build
    (folder / "recipe.json").write_text(recipe.to_json())
    found = image.cached_image(recipe, tmp_path)
    assert found is not None and found.base == folder / "base.qcow2"


def test_qemu_argv() -> None:
    built = image.Image(Path("/cache/images/k"))
    argv = machines.qemu_argv(SPEC, LAB.node("ctl"), Path("/state/vmt/nodes/ctl"), built, "tap10")
    assert argv[0] == "qemu-system-x86_64"
    assert "-no-reboot" not in argv  # a reboot inside must bring the machine back
    options = dict(zip(argv[1::2], argv[2::2], strict=False))
    assert options["-accel"] == "tcg,tb-size=64"
    assert options["-m"] == "1536"
    assert options["-kernel"] == "/cache/images/k/vmlinuz"
    assert options["-initrd"] == "/cache/images/k/initrd.img"
    assert "hpckit.ip=10.78.130.10/24" in options["-append"]
    drives = [argv[i + 1] for i, a in enumerate(argv) if a == "-drive"]
    assert drives[0].startswith("file=/state/vmt/nodes/ctl/disk.qcow2,format=qcow2,if=virtio")
    assert drives[1].startswith("file=/state/vmt/nodes/ctl/seed.tar,format=raw,if=virtio,readonly=on")
    assert "ifname=tap10" in options["-netdev"]
    assert "mac=02:68:0a:4e:82:0a" in " ".join(argv)
    assert options["-serial"] == "file:/state/vmt/nodes/ctl/console.log"
    assert argv[-1] == "-daemonize"


def test_seed_tar_is_root_owned_with_modes() -> None:
    data = machines.seed_tar({"/etc/hostname": ("c1\n", 0o644), "/root/.ssh/authorized_keys": ("k\n", 0o600)})
    assert len(data) % 512 == 0  # a disk's whole sectors
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert members["root/.ssh"].isdir() and members["root/.ssh"].mode == 0o700
        assert members["root/.ssh/authorized_keys"].mode == 0o600
        assert all(m.uid == 0 and m.gid == 0 for m in members.values())
        handle = tar.extractfile("etc/hostname")
        assert handle is not None and handle.read() == b"c1\n"


def test_hosts_text_lists_every_machine() -> None:
    text = guest.hosts_text({"ctl": "10.78.130.10", "c1": "10.78.130.11"})
    assert "10.78.130.10 ctl\n" in text and "10.78.130.11 c1\n" in text and text.startswith("127.0.0.1 localhost")


def _apt(tmp_path: Path, sources_list: str = "", parts: dict[str, str] | None = None) -> tuple[Path, Path]:
    etc = tmp_path / "apt"
    (etc / "sources.list.d").mkdir(parents=True)
    if sources_list:
        (etc / "sources.list").write_text(sources_list)
    for name, text in (parts or {}).items():
        (etc / "sources.list.d" / name).write_text(text)
    os_release = tmp_path / "os-release"
    os_release.write_text('PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nVERSION_CODENAME=bookworm\n')
    return etc, os_release


def test_mirror_from_deb822_sources(tmp_path: Path) -> None:
    deb822 = (
        "Types: deb\nURIs: http://archive.example/debian-security\nSuites: bookworm-security\nComponents: main\n\n"
        "Types: deb-src\nURIs: http://src.example/debian\nSuites: bookworm\n\n"
        "Enabled: no\nTypes: deb\nURIs: http://off.example/debian\nSuites: bookworm\n\n"
        "Types: deb\nURIs: http://archive.example/debian/\nSuites: bookworm bookworm-updates\nComponents: main\n"
    )
    etc, os_release = _apt(tmp_path, parts={"debian.sources": deb822, "other.sources": "Types: deb\n"})
    assert mirror.debian_mirror(etc, os_release) == "http://archive.example/debian"


def test_mirror_from_one_line_sources(tmp_path: Path) -> None:
    lines = (
        "# deb http://commented.example/debian bookworm main\n"
        "deb https://cloud.example/apt cloud-sdk-bookworm main\n"
        "deb [arch=amd64 signed-by=/k.gpg] http://one.example/debian bookworm main\n"
    )
    etc, os_release = _apt(tmp_path, sources_list=lines)
    assert mirror.debian_mirror(etc, os_release) == "http://one.example/debian"


def test_no_mirror_is_a_clear_error(tmp_path: Path) -> None:
    etc, os_release = _apt(tmp_path, sources_list="deb http://x.example/apt nodistro main\n")
    with pytest.raises(LabError, match="no Debian archive for this machine's release 'bookworm'"):
        mirror.debian_mirror(etc, os_release)


def test_vm_spec_from_blueprint(repo: Path) -> None:
    text = (repo / "blueprints" / "lab.yaml").read_text()
    text = text.replace("  type: lab\n", "  type: vm\n  controller_memory_mib: 2048\n  memory_mib: 768\n")
    text = text.replace('net: "10.77.0"', 'net: "10.78.130"').replace("bridge: hpck0", "bridge: hpkvt")
    text = text.replace("      gpus: {type: lab, count: $(vars.gpus_per_node)}\n", "")
    spec = vm_spec_from_blueprint(parse_blueprint(text))
    assert [(n.name, n.address) for n in spec.nodes][:3] == [
        ("ctl", "10.78.130.10"),
        ("login", "10.78.130.11"),
        ("node1", "10.78.130.21"),
    ]
    assert spec.lab.bridge == "hpkvt" and spec.lab.subnet == "10.78.130.0/24" and not spec.lab.shared_dirs
    assert spec.memory_of("ctl") == 2048 and spec.memory_of("node1") == 768
    with pytest.raises(LabError, match="not 'vm'"):
        vm_spec_from_blueprint(parse_blueprint((repo / "blueprints" / "lab.yaml").read_text()))


def test_cli_reads_either_kind_of_spec_file(tmp_path: Path) -> None:
    from hpckit.cli.lab import _spec_from_args

    vm_file, lab_file = tmp_path / "vm.json", tmp_path / "spec.json"
    vm_file.write_text(SPEC.to_json())
    lab_file.write_text(LabSpec("lab", LAB.nodes, subnet=LAB.subnet).to_json())  # a namespace lab named "lab"
    assert _spec_from_args(None, vm_file) == SPEC
    assert isinstance(_spec_from_args(None, lab_file), LabSpec)
