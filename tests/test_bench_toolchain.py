"""The benchmark toolchain a deploy installs (the blueprint's `bench:`): which program each partition's benchmarks
run and where it lives (hpckit.blueprint.toolchain, the record's toolchain.json), the bench_toolchain role's
commands rendered offline and run here against a fake CUDA/NCCL/MPI tree, and the bench reading the record."""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from hpckit.bench.cluster import facts_from_blueprint, load_facts
from hpckit.bench.files import ClusterFiles
from hpckit.bench.registry import get
from hpckit.bench.run import BenchRequest, Context, plan
from hpckit.blueprint import Blueprint, load_blueprint
from hpckit.blueprint.errors import BlueprintError
from hpckit.blueprint.toolchain import toolchain_record
from hpckit.clusters import SshAccess
from hpckit.deploy.playvars import build_vars
from hpckit.deploy.record import DeploymentRecord
from hpckit.deploy.render import Inventory, host_context, render_value
from hpckit.deploy.source_fetch import with_local_toolchain
from hpckit.errors import InputError
from hpckit.jobs import library
from hpckit.proc import LocalTransport

REPO = Path(__file__).resolve().parent.parent
CPU_PART = """
  - name: cpu
    nodes: cpu[01-04]
    addresses: 10.10.0.[201-204]
    hardware: {cpus: 64, sockets: 2, cores_per_socket: 32, threads_per_core: 1, memory_mb: 256000}
"""


def blueprint(tmp_path: Path, bench: dict[str, Any], cpu: bool = True) -> Blueprint:
    """blueprints/h100-ib.yaml (one GPU partition, NFS /home first) with a CPU partition and `bench:`."""
    text = (REPO / "blueprints" / "h100-ib.yaml").read_text()
    if cpu:
        text = text.replace("\nfilesystems:", CPU_PART.rstrip() + "\nfilesystems:", 1)
    data = yaml.safe_load(text)
    data["bench"] = bench
    path = tmp_path / "bp.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_blueprint(path)


TORCH = {"requirements": ["torch==2.13.0"], "wheels": "/srv/wheels"}


def test_each_partition_runs_what_was_installed_for_it(tmp_path: Path) -> None:
    bp = blueprint(tmp_path, {"torch": TORCH, "nccl_tests": {}})
    record = toolchain_record(bp)
    venv = record["torch"]["venv"]
    assert venv.startswith("/home/hpckit/toolchain/torch-") and record["torch"]["location"] == "shared"
    assert record["partitions"]["gpu"] == {
        "backend": "nccl-tests",
        "python": f"{venv}/bin/python",
        "nccl_tests_dir": "/opt/nccl-tests/2.13.12/build",
        "container": None,
    }
    assert record["partitions"]["cpu"] == {
        "backend": "torch",
        "python": f"{venv}/bin/python",
        "nccl_tests_dir": None,
        "container": None,
    }
    assert record["nccl_tests"]["built_on"] == ["gpu"]


def test_other_requirements_make_another_virtualenv_and_node_puts_it_under_opt(tmp_path: Path) -> None:
    first = toolchain_record(blueprint(tmp_path, {"torch": TORCH}))["torch"]["venv"]
    other = toolchain_record(blueprint(tmp_path, {"torch": {**TORCH, "requirements": ["torch==2.14.0"]}}))
    assert other["torch"]["venv"] != first
    node = toolchain_record(blueprint(tmp_path, {"torch": {**TORCH, "location": "node"}}))
    assert node["torch"]["venv"].startswith("/opt/hpckit/toolchain/torch-")


def test_an_image_is_run_not_built(tmp_path: Path) -> None:
    bp = blueprint(tmp_path, {"nccl_tests": {"image": "nvcr.io#nvidia/hpc-benchmarks:25.04", "image_bin_dir": "/bin"}})
    record = toolchain_record(bp)
    assert record["partitions"]["gpu"]["container"] == "nvcr.io#nvidia/hpc-benchmarks:25.04"
    assert record["partitions"]["gpu"]["nccl_tests_dir"] == "/bin"
    assert record["partitions"]["cpu"]["backend"] is None  # no torch asked for: the bench's own defaults
    _, extravars = build_vars(bp, SshAccess("root"))
    assert extravars["bench_toolchain_enabled"] is False  # nothing to install


@pytest.mark.parametrize(
    ("bench", "words"),
    [
        ({"torch": {**TORCH, "index_url": "https://pypi.example/simple"}}, "not both"),
        ({"torch": {"requirements": ["torch; rm -rf /"]}}, "requirements"),
        ({"torch": {"requirements": ["--index-url=http://x"]}}, "requirements"),
        ({"nccl_tests": {"gencode": "-gencode=arch=compute_90,code=sm_90 $(reboot)"}}, "gencode"),
    ],
)
def test_bad_toolchain_settings_are_refused_naming_the_field(tmp_path: Path, bench: dict[str, Any], words: str) -> None:
    with pytest.raises(BlueprintError, match=words):
        blueprint(tmp_path, bench)


def test_a_shared_virtualenv_needs_a_filesystem(tmp_path: Path) -> None:
    data = yaml.safe_load((REPO / "blueprints" / "lab.yaml").read_text())
    data.pop("filesystems")
    data["bench"] = {"torch": {**TORCH, "location": "shared"}}
    (tmp_path / "bp.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(BlueprintError, match=r"bench\.torch\.location"):
        load_blueprint(tmp_path / "bp.yaml")


def test_the_wheel_folder_is_checked_before_any_host(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    bp = blueprint(tmp_path, {"torch": {**TORCH, "wheels": str(wheels)}})
    with pytest.raises(InputError, match="no such folder"):
        with_local_toolchain(bp)
    wheels.mkdir()
    (wheels / "torch.tar.gz").write_text("")
    with pytest.raises(InputError, match="holds no wheel"):
        with_local_toolchain(bp)
    (wheels / "torch-2.13.0-cp311-cp311-linux_x86_64.whl").write_text("")
    assert with_local_toolchain(bp) is bp


def test_a_wrong_nccl_tests_tarball_stops_the_deploy(tmp_path: Path) -> None:
    tarball = tmp_path / "nccl-tests-2.13.12.tar.gz"
    tarball.write_bytes(b"not the release")
    bp = blueprint(tmp_path, {"nccl_tests": {"source": str(tarball), "sha256": "0" * 64}})
    with pytest.raises(InputError, match=r"bench\.nccl_tests\.source: .* has SHA256"):
        with_local_toolchain(bp)


# --- the role's commands, rendered as Ansible renders them (hpckit.deploy.render) -----------------------------


def role_context(bp: Blueprint, host: str, **facts: Any) -> Mapping[str, Any]:
    inventory, extravars = build_vars(bp, SshAccess("root"))
    inv = Inventory(inventory)
    groups = [name for name, members in inv.groups.items() if host in members]
    base = {"group_names": groups, "ansible_play_hosts_all": ["gpu001", "gpu002"]}
    return host_context(inv, extravars, host, "bench_toolchain", **base, **facts)


def nested(ctx: Mapping[str, Any], group: str, name: str) -> Any:
    """A value inside a role variable's mapping, templated as Ansible templates it when a task reads it."""
    return render_value(ctx[group][name], ctx)


def test_nccl_tests_is_built_with_mpi_against_the_declared_homes(tmp_path: Path) -> None:
    bench = {"nccl_tests": {"cuda_home": "/usr/local/cuda-12.8", "gencode": "-gencode=arch=compute_90,code=sm_90"}}
    state = {"reads": {"nproc": "112\n", "nccl_inputs": "cuda=12.8 nccl=2.27.7 mpi=/usr/lib/x86_64-linux-gnu/openmpi"}}
    ctx = role_context(blueprint(tmp_path, bench), "gpu003", bench_toolchain_state=state)
    assert ctx["bench_toolchain_nccl_here"] is True
    assert ctx["bench_toolchain_nccl_make_argv"] == [
        "make",
        "-C",
        "/opt/nccl-tests/2.13.12/src",
        "-j",
        "112",
        "MPI=1",
        "MPI_HOME=/usr/lib/x86_64-linux-gnu/openmpi",
        "CUDA_HOME=/usr/local/cuda-12.8",
        "NCCL_HOME=/usr",
        "BUILDDIR=/opt/nccl-tests/2.13.12/build",
        "NVCC_GENCODE=-gencode=arch=compute_90,code=sm_90",
    ]
    # what the build was made against is its stamp: another CUDA or NCCL rebuilds it
    assert ctx["bench_toolchain_nccl_stamp"].split() == [
        "nccl-tests",
        "2.13.12",
        "cuda=12.8",
        "nccl=2.27.7",
        "mpi=/usr/lib/x86_64-linux-gnu/openmpi",
        "gencode=-gencode=arch=compute_90,code=sm_90",
        "sha256=",
    ]


def test_a_cpu_node_builds_nothing(tmp_path: Path) -> None:
    ctx = role_context(blueprint(tmp_path, {"nccl_tests": {}}), "cpu01", bench_toolchain_state={"reads": {}})
    assert ctx["bench_toolchain_nccl_here"] is False
    assert nested(ctx, "bench_toolchain_reads", "nccl_inputs") == "true"


def fake_tree(root: Path, cuda: bool = True) -> None:
    (root / "cuda" / "bin").mkdir(parents=True)
    if cuda:
        nvcc = root / "cuda" / "bin" / "nvcc"
        nvcc.write_text(
            "#!/bin/sh\necho 'nvcc: NVIDIA (R) Cuda compiler driver'\n"
            "echo 'Cuda compilation tools, release 12.8, V12.8.93'\n"
        )
        nvcc.chmod(0o755)
    (root / "nccl" / "include").mkdir(parents=True)
    (root / "nccl" / "include" / "nccl.h").write_text(
        '#define NCCL_H_\n#define NCCL_MAJOR 2\n#define NCCL_MINOR 27\n#define NCCL_PATCH 7\n#define NCCL_SUFFIX ""\n'
    )
    (root / "mpi dir" / "include").mkdir(parents=True)
    (root / "mpi dir" / "include" / "mpi.h").write_text("")


@pytest.mark.parametrize("cuda", [True, False])
def test_the_inspection_reads_cuda_nccl_and_mpi_as_the_build_finds_them(tmp_path: Path, cuda: bool) -> None:
    fake_tree(tmp_path, cuda)
    homes = {"cuda_home": str(tmp_path / "cuda"), "nccl_home": str(tmp_path / "nccl")}
    ctx = role_context(blueprint(tmp_path, {"nccl_tests": {**homes, "mpi_home": str(tmp_path / "mpi dir")}}), "gpu001")
    script = nested(ctx, "bench_toolchain_reads", "nccl_inputs")
    out = subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=True).stdout.split()
    assert out == [f"cuda={'12.8' if cuda else ''}", "nccl=2.27.7", f"mpi={tmp_path / 'mpi'}", "dir"]


def test_pip_installs_from_the_copied_wheels_alone(tmp_path: Path) -> None:
    bp = blueprint(tmp_path, {"torch": TORCH})
    ctx = role_context(bp, "gpu001", bench_toolchain_state={"reads": {}, "checks": {}})
    venv = toolchain_record(bp)["torch"]["venv"]
    assert ctx["bench_toolchain_pip_argv"] == [
        f"{venv}/bin/python",
        "-m",
        "pip",
        "install",
        "--no-input",
        "--disable-pip-version-check",
        "--no-compile",
        "--isolated",
        "--no-index",
        "--find-links",
        f"{venv}/wheels",
        "torch==2.13.0",
    ]
    # shared: the play's first host makes it, the others only read it
    assert ctx["bench_toolchain_torch_here"] is True
    assert role_context(bp, "gpu002")["bench_toolchain_torch_here"] is False


def test_the_stamp_check_says_done_only_for_the_same_requirements(tmp_path: Path) -> None:
    bp = blueprint(tmp_path, {"torch": {**TORCH, "location": "node"}})
    venv = Path(toolchain_record(bp)["torch"]["venv"])
    ctx = role_context(bp, "cpu01")
    check = nested(ctx, "bench_toolchain_checks", "torch_current")
    stamp = ctx["bench_toolchain_torch_stamp"].strip()
    assert stamp == "requirements=torch==2.13.0 wheels=/srv/wheels index_url="
    here = tmp_path / "venv"
    here.mkdir()
    local = check.replace(shlex.quote(f"{venv}/hpckit-toolchain"), str(here / "hpckit-toolchain"))
    assert subprocess.run(["sh", "-c", local], check=False).returncode == 1  # no stamp: an unfinished one
    (here / "hpckit-toolchain").write_text(stamp)
    assert subprocess.run(["sh", "-c", local], check=False).returncode == 0


# --- the bench reads the record ----------------------------------------------------------------------------------


def test_the_bench_runs_the_recorded_python_and_nccl_tests(tmp_path: Path) -> None:
    bp = blueprint(tmp_path, {"torch": TORCH, "nccl_tests": {"image": "/lustre/nccl-tests.sqsh"}})
    state = tmp_path / "state"
    record = DeploymentRecord.create(bp.cluster_name, state)
    record.write_json("blueprint.json", bp.model_dump(mode="json"))
    recorded = toolchain_record(bp)
    recorded["partitions"]["cpu"]["python"] = "/home/older/bin/python"  # what that deploy installed
    record.write_json("toolchain.json", recorded)
    record.mark_current()
    ctx = Context(LocalTransport(), load_facts(bp.cluster_name, "cpu", state))
    ctx.files = ClusterFiles(LocalTransport())
    cpu = plan(BenchRequest(get("allreduce"), 2, bench_dir=str(tmp_path)), ctx)
    assert (cpu.backend, cpu.place.python, cpu.place.container) == ("torch", "/home/older/bin/python", "")
    ctx = Context(LocalTransport(), load_facts(bp.cluster_name, "gpu", state))
    ctx.files = ClusterFiles(LocalTransport())
    gpu = plan(BenchRequest(get("allreduce"), 2, bench_dir=str(tmp_path)), ctx)
    assert (gpu.backend, gpu.place.container, gpu.place.nccl_tests_dir) == (
        "nccl-tests",
        "/lustre/nccl-tests.sqsh",
        "/usr/local/bin",
    )
    forced = plan(BenchRequest(get("allreduce"), 2, bench_dir=str(tmp_path), backend="torch"), ctx)
    assert forced.place.container == ""  # torch never runs in the nccl-tests image


def test_without_a_toolchain_the_bench_keeps_its_defaults(repo: Path) -> None:
    facts = facts_from_blueprint(load_blueprint(repo / "blueprints" / "lab.yaml"))
    assert (facts.toolchain, facts.python, facts.nccl_tests_dir) == (None, None, None)


def test_the_clusters_jobs_default_to_the_toolchains_python(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real cluster (hpckit from its wheel) names the torch virtualenv as its templates' `python`, so torchrun
    jobs and a bench run on the login node itself (no --cluster: no record there) run the deployed torch."""
    bp = blueprint(tmp_path, {"torch": TORCH})
    inventory, extravars = build_vars(bp, SshAccess("root"))
    login = bp.login[0].host
    ctx = host_context(Inventory(inventory), extravars, login, "hpckit_login")
    venv_python = toolchain_record(bp)["partitions"]["gpu"]["python"]
    assert render_value("{{ hpckit_login_template_defaults_all }}", ctx) == {"python": venv_python}
    without = blueprint(tmp_path, {})
    inventory, extravars = build_vars(without, SshAccess("root"))
    ctx = host_context(Inventory(inventory), extravars, login, "hpckit_login")
    assert render_value("{{ hpckit_login_template_defaults_all }}", ctx) == {}

    defaults = tmp_path / "template-defaults.yaml"
    defaults.write_text(f"python: {venv_python}\n")
    monkeypatch.setattr(library, "SITE_DEFAULTS", defaults)
    assert load_facts(None, None).python == venv_python
    defaults.unlink()
    assert load_facts(None, None).python is None
