from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.labutil import Cluster, lab_bench_toolchain, lab_blueprint, lab_containers, lab_skip_reason

REPO = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"


# Time limits (pytest-timeout) of the tests that bring up a lab, pyproject's default (600 s) being too short for
# them; each counts the lab's deploy in its module's (or the session's) first test, and is set for a loaded
# 2-core CI box. A test or module with its own timeout mark keeps it.
# A namespace-lab test: its own work (the longest, the 8-node bench bisect, ~360 s) plus a cold deploy (30 s for
# 4 nodes alone, 89 s for 16; several times that beside a full test run).
LAB_TIMEOUT_S = 1800
# A test of a Slurm built from source: it may wait for scripts/test.sh's background builds (its own limit on
# them is BUILD_TIMEOUT_S, 3600 s; a cold 24.11.5 build took 1045 s wall at nice 19 under load), then deploys.
BUILT_SLURM_TIMEOUT_S = 5400
LAB_USERS = "users:\n  alice: {uid: 4101}\n  bob: {uid: 4102}\n"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests of a Slurm built from source run last: scripts/test.sh builds what the package cache lacks in the
    background, and every other test running first gives those builds the time they need."""
    items.sort(key=lambda item: item.get_closest_marker("built_slurm") is not None)
    for item in items:
        if item.get_closest_marker("timeout") is not None:
            continue
        if item.get_closest_marker("built_slurm") is not None:
            item.add_marker(pytest.mark.timeout(BUILT_SLURM_TIMEOUT_S))
        elif item.get_closest_marker("lab") is not None:
            item.add_marker(pytest.mark.timeout(LAB_TIMEOUT_S))


@pytest.fixture
def repo() -> Path:
    return REPO


@pytest.fixture
def data_dir() -> Path:
    return DATA


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One deployed lab cluster shared by every test that only uses it (jobs, bench, health).

    Tests that break or reshape a cluster (deploy, day-2) bring up their own lab instead.
    """
    reason = lab_skip_reason()
    if reason:
        pytest.skip(reason)
    tmp = tmp_path_factory.mktemp("cluster")
    # Two checkouts testing on one machine at once need two labs: HPCKIT_TEST_LAB=NAME,NET,BRIDGE.
    name, net, bridge = os.environ.get("HPCKIT_TEST_LAB", "labci,10.77.8,hpckt8").split(",")
    # With enroot and pyxis from the shared files where they are there (tests/test_containers_lab.py), and two
    # ordinary users on every host (the accounts' and containers' tests run jobs as them).
    # The benchmarks' torch in a virtualenv on the shared filesystem, as a real cluster gets it (bench.torch).
    extra = LAB_USERS + lab_bench_toolchain()
    blueprint = lab_blueprint(tmp, name, net, bridge, extra=extra, containers=lab_containers())
    c = Cluster(name, blueprint, tmp / "state")
    try:
        done = c.deploy()
        if done.rc != 0:
            pytest.fail(f"deploying the shared lab cluster failed:\n{done.stdout}\n{done.stderr}")
        yield c
    finally:
        c.destroy()
