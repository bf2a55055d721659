"""Containers for real on the shared lab cluster: enroot 4.1.2 and pyxis 0.24.0 installed by the deploy from the
shared files (no registry, no archive: lab nodes reach neither), pyxis compiled on each node against the Slurm
that runs there, and a registry-free image (Debian minbase packed by hpckit) run by an ordinary user with
srun and with the NeMo template's sbatch script. That a second deploy of this cluster changes nothing, enroot
and pyxis included, tests/test_accounts_lab.py shows on the same cluster (its export round trip)."""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hpckit.jobs.library import Library
from hpckit.lab.container_image import container_image
from hpckit.lab.provider import shared_dir_source
from hpckit.lab.vm.mirror import host_codename
from tests.labutil import Cluster, hpckit, lab_containers, needs_lab

pytestmark = [
    pytest.mark.lab,
    needs_lab(),
    pytest.mark.skipif(lab_containers() is None, reason="enroot's and pyxis' files are not in ../shared/sources"),
]

HOSTS = ("ctl", "login", "node1", "node2", "node3", "node4")
NODES = HOSTS[2:]
USER, UID = "alice", 4101
IMAGE_DIR = Path("/shared/containers")
IMAGE = str(IMAGE_DIR / "minbase.sqsh")
# The stand-in for NeMo's training script: what a rank sees inside the container, and the arguments it got.
STAND_IN = '#!/bin/sh\ngrep ^PRETTY_NAME= /etc/os-release\necho "rank $SLURM_PROCID as $(id -un): $*"\n'


@pytest.fixture(scope="module")
def containers(cluster: Cluster) -> Iterator[Cluster]:
    """The shared cluster (its blueprint's users on every host) with the image (the nodes' own release, minbase)
    in a folder of the shared filesystem that the user owns."""
    folder = shared_dir_source(cluster.name, "/shared") / "containers"
    folder.mkdir(exist_ok=True)
    shutil.copyfile(container_image(host_codename()), folder / "minbase.sqsh")
    (folder / "stand-in.sh").write_text(STAND_IN, encoding="utf-8")
    (folder / "stand-in.sh").chmod(0o755)
    shutil.chown(folder, UID, UID)
    try:
        yield cluster
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def as_user(cluster: Cluster, *argv: str, timeout: float = 300) -> str:
    done = cluster.on("login", "runuser", "-u", USER, "--", *argv, timeout=timeout)
    return str(done.stdout)


def test_pyxis_is_built_for_the_running_slurm_and_in_plugstack(containers: Cluster) -> None:
    for host in (*NODES, "login"):
        stamp = containers.on(host, "cat", "/usr/local/lib/slurm/spank_pyxis.so.hpckit").stdout.strip()
        slurm = containers.on(host, "dpkg-query", "--show", "--showformat=${Version}", "slurm-client").stdout
        assert stamp == f"pyxis 0.24.0 slurm {slurm.split('-')[0]}", (host, stamp, slurm)
        plugstack = containers.on(host, "cat", "/etc/slurm/plugstack.conf.d/pyxis.conf").stdout
        assert "required /usr/local/lib/slurm/spank_pyxis.so container_scope=job" in plugstack, (host, plugstack)
    for host in NODES:
        enroot = containers.on(host, "enroot", "version").stdout.strip()
        assert enroot == "4.1.2", (host, enroot)
    # srun on the login node knows pyxis' options
    assert "--container-image" in as_user(containers, "srun", "--help")


def test_an_ordinary_user_runs_the_image_on_every_node(containers: Cluster) -> None:
    argv = ["srun", "-N4", "--ntasks-per-node=1", "--chdir=/tmp", f"--container-image={IMAGE}"]
    times = []
    for _ in range(2):  # the second run finds nothing cached for a squashfs image: both unpack it
        started = time.monotonic()
        out = as_user(containers, *argv, "sh", "-c", 'echo "$(id -un) $(hostname) $(grep ^ID= /etc/os-release)"')
        times.append(time.monotonic() - started)
        assert sorted(out.split("\n")[:-1]) == [f"{USER} node{i} ID=debian" for i in range(1, 5)], out
    print(f"container start on 4 nodes: first {times[0]:.1f} s, second {times[1]:.1f} s")


def test_the_nemo_template_runs_in_the_container(containers: Cluster) -> None:
    rendered = (
        Library()
        .get("nemo")
        .render(
            {
                "container": IMAGE,
                "container_mounts": "/shared:/shared",
                "python": "sh",
                "script": str(IMAGE_DIR / "stand-in.sh"),
                "nodes": "2",
                "gpus_per_node": "1",
                "exclusive": "false",
                "mem": "",
                "time": "5",
                "log_dir": str(IMAGE_DIR),
                "requeue": "false",
            }
        )
    )
    script = shared_dir_source(containers.name, "/shared") / "containers" / "nemo.sbatch"
    script.write_text(rendered.script, encoding="utf-8")
    out = as_user(
        containers, "sbatch", "--wait", "--parsable", "--chdir=/shared/containers", str(IMAGE_DIR / "nemo.sbatch")
    )
    job = out.strip().split(";")[0]
    log = (script.parent / f"nemo-{job}.out").read_text(encoding="utf-8")
    assert log.count('PRETTY_NAME="Debian GNU/Linux') == 2, log
    assert f"rank 0 as {USER}: trainer.num_nodes=2 trainer.devices=1" in log, log
    assert f"rank 1 as {USER}: " in log, log


def test_the_blueprints_users_are_alike_on_every_host(containers: Cluster) -> None:
    for host in HOSTS:
        found = containers.on(host, "id", USER).stdout.strip()
        assert found.startswith(f"uid={UID}({USER}) gid={UID}({USER})"), (host, found)


def test_a_uid_another_user_holds_stops_the_deploy_before_any_user_is_made(containers: Cluster, tmp_path: Path) -> None:
    containers.on("node2", "useradd", "--no-create-home", "--uid", "4103", "carol")
    try:
        path = tmp_path / "carol.yaml"
        path.write_text(containers.blueprint.read_text().replace("users:\n", "users:\n  carol: {uid: 4104}\n", 1))
        # Limited to two nodes, which leaves the auth key's host out: slurm_auth compares them with its key from
        # there (a limited run once failed on that key's checksum), then the users play stops both.
        done = hpckit("deploy", str(path), "--limit", "node1:node2", "-q", state=containers.state)
        out = done.stdout + done.stderr
        assert done.rc == 1, out[-3000:]
        assert re.search(r"node2: carol is uid:gid 4103:\d+ here, the blueprint says 4104:4104", out), out[-3000:]
        assert "slurm_auth" not in out, out[-3000:]
        assert containers.on("node2", "id", "-u", "carol").stdout.strip() == "4103"
        for host in ("ctl", "login", "node1"):
            assert containers.on(host, "getent", "passwd", "carol", check=False).rc == 2, host
    finally:
        containers.on("node2", "userdel", "carol", check=False)
        containers.on("node2", "groupdel", "carol", check=False)
