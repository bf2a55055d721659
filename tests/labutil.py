"""Shared helpers for tests that bring up a real lab (root, the lab packages installed)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent


def lab_skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "the lab needs root"
    from hpckit.lab.packages import missing_packages

    missing = missing_packages()
    if missing:
        return f"lab packages missing: {' '.join(missing)} (bash scripts/install.sh)"
    return None


def needs_lab() -> pytest.MarkDecorator:
    reason = lab_skip_reason()
    return pytest.mark.skipif(reason is not None, reason=reason or "")


def needs_built_slurm(*versions: str) -> pytest.MarkDecorator:
    """Skips a test that deploys SchedMD's Slurm built from source unless each of ``versions`` is built in
    hpckit's package cache, or HPCKIT_TEST_BUILD=1 lets the test build it (a cold build takes ~10 min of CPU,
    ~13 min at low priority; scripts/test.sh, which sets it, starts the builds in the background first). Either
    way the 24.11.5 tarball must be in the source cache (scripts/fetch-slurm-source.sh)."""
    import os

    from hpckit.paths import cache_dir, source_cache

    if not (source_cache() / "slurm-wlm_24.11.5.orig.tar.gz").is_file():
        return pytest.mark.skipif(True, reason="Slurm 24.11.5's source is not in hpckit's cache")
    built = {v for v in versions if any((cache_dir() / "packages").glob(f"{v}_*/manifest.json"))}
    missing = [v for v in versions if v not in built]
    reason = (
        f"Slurm {', '.join(missing)} not built in hpckit's package cache: scripts/build-slurm.sh (and "
        "scripts/build-slurm-test-release.sh) build them; scripts/test.sh builds them unless HPCKIT_TEST_BUILD=0"
    )
    return pytest.mark.skipif(bool(missing) and os.environ.get("HPCKIT_TEST_BUILD") != "1", reason=reason)


# Upstream releases no registry serves, kept beside the project the way an air-gapped site keeps them.
SHARED_SOURCES = REPO.parent / "shared" / "sources"
LAB_CONTAINERS_OFF = "containers:\n  enabled: false"


def lab_containers() -> str | None:
    """The containers section that turns enroot and pyxis on in a lab from the shared files (with their
    hashes, from SOURCES.md's table); None where the files are not there. enroot's cache and data go to the
    nodes' own scratch disk (/var/tmp is private to each lab node; /raid would be this machine's)."""
    files = {
        "enroot_4.1.2-1_amd64.deb": "96e7a4743aae6bc4a4799b01720df8d9588503ac0ce56c0373f8388fffdac77d",
        "enroot+caps_4.1.2-1_amd64.deb": "c702e227fa157e856f7bbb2258056ee43556f47d3c596bc434a5aae6016424f6",
        "pyxis-0.24.0.tar.gz": "063653ba39125ac29796cc6079701d1ec34dd4c5baf698efacc0f36bf3619681",
    }
    if not all((SHARED_SOURCES / name).is_file() for name in files):
        return None
    deb, caps, pyxis = ((SHARED_SOURCES / n, h) for n, h in files.items())
    return (
        "containers:\n  enabled: true\n"
        f"  enroot:\n    version: 4.1.2\n    package: {deb[0]}\n    sha256: {deb[1]}\n    caps_sha256: {caps[1]}\n"
        "    cache_path: /var/tmp/enroot/cache/group-$(id -g)\n    data_path: /var/tmp/enroot/data/user-$(id -u)\n"
        f"  pyxis:\n    version: 0.24.0\n    source: {pyxis[0]}\n    sha256: {pyxis[1]}"
    )


# What the shared lab cluster's benchmarks run (`bench.torch`): torch, and numpy, which torch warns without.
TORCH_REQUIREMENTS = ("torch==2.13.0", "numpy")


def lab_bench_toolchain() -> str:
    """The `bench:` section of the shared lab cluster: a torch virtualenv on its shared filesystem, installed from a
    wheel folder filled here once (`pip download`, cached by the requirements under hpckit's cache); "" when no
    package index answers, and the bench then runs the deploying machine's own interpreter, as the lab does."""
    from hpckit.paths import cache_dir

    key = hashlib.sha256("\n".join(TORCH_REQUIREMENTS).encode()).hexdigest()[:12]
    folder = cache_dir() / "bench-wheels" / f"torch-{key}"
    if not (folder / ".complete").is_file():
        part = folder.with_name(f".{folder.name}.{os.getpid()}")
        argv = [sys.executable, "-m", "pip", "download", "-q", "--dest", str(part), *TORCH_REQUIREMENTS]
        if subprocess.run(argv, capture_output=True, timeout=900, check=False).returncode != 0:
            return ""
        (part / ".complete").write_text("")
        part.rename(folder)
    wanted = ", ".join(TORCH_REQUIREMENTS)
    return f"bench:\n  torch:\n    requirements: [{wanted}]\n    wheels: {folder}\n"


def lab_blueprint(tmp: Path, name: str, net: str, bridge: str, extra: str = "", containers: str | None = None) -> Path:
    """blueprints/lab.yaml under another name, subnet and bridge, so tests never touch an admin's lab;
    ``containers`` replaces its containers section (off)."""
    text = (REPO / "blueprints" / "lab.yaml").read_text()
    assert LAB_CONTAINERS_OFF in text
    if containers is not None:
        text = text.replace(LAB_CONTAINERS_OFF, containers)
    text = text.replace("name: lab\n", f"name: {name}\n", 1).replace('net: "10.77.0"', f'net: "{net}"')
    text = text.replace("bridge: hpck0", f"bridge: {bridge}") + extra
    path = tmp / f"{name}.yaml"
    path.write_text(text)
    return path


def two_nodes(text: str) -> str:
    """lab.yaml's text with its partition cut to node[1-2], the smallest lab that runs a job on two nodes."""
    return text.replace("node[1-4]", "node[1-2]").replace("$(vars.net).[21-24]", "$(vars.net).[21-22]")


@dataclass
class CliRun:
    rc: int
    stdout: str
    stderr: str

    def json(self) -> dict[str, object]:
        data: dict[str, object] = json.loads(self.stdout)
        return data


def assert_no_change(run: CliRun) -> None:
    """A `deploy --json` that succeeded and changed nothing on any host."""
    assert run.rc == 0, run.stdout[-3000:] + run.stderr[-3000:]
    hosts = run.json()["hosts"]
    assert isinstance(hosts, dict)
    changed = {h: s["changed"] for h, s in hosts.items() if s["changed"]}
    assert not changed, changed


def _hpckit_env(state: Path) -> dict[str, str]:
    # A private TMPDIR per cluster lets tests see exactly what a run leaves behind.
    tmp = state / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    return {**os.environ, "HPCKIT_STATE": str(state), "TMPDIR": str(tmp)}


def hpckit(*args: str, state: Path, timeout: float = 600) -> CliRun:
    done = subprocess.run(
        [sys.executable, "-m", "hpckit", *args],
        capture_output=True,
        text=True,
        env=_hpckit_env(state),
        timeout=timeout,
        check=False,
    )
    return CliRun(done.returncode, done.stdout, done.stderr)


class Started:
    """An hpckit command running in the background while a test acts on the cluster; its output goes to
    files, so that a test that does not read it for minutes never blocks it on a full pipe."""

    def __init__(self, *args: str, state: Path) -> None:
        env = _hpckit_env(state)
        self._out = (state / "tmp" / "started.out").open("w+")
        self._err = (state / "tmp" / "started.err").open("w+")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "hpckit", *args], stdout=self._out, stderr=self._err, text=True, env=env
        )
        self._done: CliRun | None = None

    def running(self) -> bool:
        return self.process.poll() is None

    def finish(self, timeout: float = 600) -> CliRun:
        """Wait for the command (interrupted past ``timeout``) and return its exit status and output; the
        same again on later calls."""
        if self._done is not None:
            return self._done
        try:
            rc = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            # Ctrl-C first: hpckit then ends its ansible-playbook too, which SIGKILL would leave running.
            self.process.send_signal(signal.SIGINT)
            try:
                rc = self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                rc = self.process.wait()
        outputs = []
        for file in (self._out, self._err):
            file.seek(0)
            outputs.append(file.read())
            file.close()
        self._done = CliRun(rc, outputs[0], outputs[1])
        return self._done


class Cluster:
    """A deployed lab cluster as tests see it: run commands on its login node or any host."""

    def __init__(self, name: str, blueprint: Path, state: Path) -> None:
        self.name = name
        self.blueprint = blueprint
        self.state = state

    def deploy(self, *extra: str) -> CliRun:
        return hpckit("deploy", str(self.blueprint), "--json", "-q", "--join-timeout", "90", *extra, state=self.state)

    def destroy(self) -> CliRun:
        return hpckit("destroy", str(self.blueprint), state=self.state)

    def login(self) -> Any:
        from hpckit.slurm.connect import login_transport

        return login_transport(self.name, self.state)

    def on(self, host: str, *argv: str, check: bool = True, timeout: float = 60) -> Any:
        """Run argv on `host` over SSH (the deployment record's access); returns the CommandResult."""
        from hpckit.clusters import load_access
        from hpckit.slurm.connect import ssh_to

        conn = ssh_to(load_access(self.name, self.state), host)
        try:
            done = conn.run(argv, timeout=timeout)
        finally:
            conn.close()
        if check:
            assert done.ok, done.describe()
        return done


@contextlib.contextmanager
def deployed(cluster: Cluster) -> Iterator[Cluster]:
    """The cluster deployed (a failed deploy fails the test), and destroyed afterwards whatever happened."""
    try:
        done = cluster.deploy()
        assert done.rc == 0, done.stdout[-3000:] + done.stderr[-3000:]
        yield cluster
    finally:
        cluster.destroy()
