from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.labutil import Cluster, lab_blueprint, lab_skip_reason

REPO = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests of a Slurm built from source run last: scripts/test.sh builds what the package cache lacks in the
    background, and every other test running first gives those builds the time they need."""
    items.sort(key=lambda item: item.get_closest_marker("built_slurm") is not None)


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
    c = Cluster(name, lab_blueprint(tmp, name, net, bridge), tmp / "state")
    try:
        done = c.deploy()
        if done.rc != 0:
            pytest.fail(f"deploying the shared lab cluster failed:\n{done.stdout}\n{done.stderr}")
        yield c
    finally:
        c.destroy()
