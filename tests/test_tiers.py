"""The test suite's own contract: every test has a time limit (pytest-timeout), larger for the tests that bring up a
lab, and a hang fails with its traceback."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from tests import conftest

REPO = Path(__file__).resolve().parent.parent


def _pytest_config() -> dict[str, Any]:
    config: dict[str, Any] = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    return config


def test_every_test_has_a_time_limit_fixtures_included() -> None:
    project = _pytest_config()
    ini = project["tool"]["pytest"]["ini_options"]
    assert ini["timeout"] > 0 and ini["timeout_func_only"] is False
    assert ini["timeout_method"] == "signal"  # the thread method ends the process: labs would stay up
    assert "pytest-timeout" in ini["required_plugins"]
    assert any(d.startswith("pytest-timeout") for d in project["project"]["optional-dependencies"]["dev"])


class _Item:
    def __init__(self, *marks: pytest.MarkDecorator) -> None:
        self.marks = [m.mark for m in marks]

    def get_closest_marker(self, name: str) -> Any:
        return next((m for m in reversed(self.marks) if m.name == name), None)

    def add_marker(self, mark: pytest.MarkDecorator) -> None:
        self.marks.append(mark.mark)


def test_lab_and_build_tests_get_their_larger_limits() -> None:
    plain, lab, built = _Item(), _Item(pytest.mark.lab), _Item(pytest.mark.lab, pytest.mark.built_slurm)
    own = _Item(pytest.mark.lab, pytest.mark.timeout(3600))
    conftest.pytest_collection_modifyitems([plain, lab, built, own])
    assert plain.get_closest_marker("timeout") is None  # pyproject's default
    assert lab.get_closest_marker("timeout").args == (conftest.LAB_TIMEOUT_S,)
    assert built.get_closest_marker("timeout").args == (conftest.BUILT_SLURM_TIMEOUT_S,)
    assert own.get_closest_marker("timeout").args == (3600,)
    assert _pytest_config()["tool"]["pytest"]["ini_options"]["timeout"] < conftest.LAB_TIMEOUT_S


def test_a_hang_fails_with_its_traceback(tmp_path: Path) -> None:
    """With the project's pytest configuration, a test stuck in a call fails at its limit, naming where it hung,
    and the run goes on to the next test."""
    (tmp_path / "test_hang.py").write_text(
        "import time\nimport pytest\n\n\n@pytest.mark.timeout(1)\ndef test_hangs():\n    time.sleep(60)\n\n\n"
        "def test_after():\n    pass\n",
        encoding="utf-8",
    )
    config = ["-c", str(REPO / "pyproject.toml"), "--rootdir", str(tmp_path), "-p", "no:cacheprovider"]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *config, str(tmp_path / "test_hang.py")],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Timeout (>1.0s)" in done.stdout and "time.sleep(60)" in done.stdout, done.stdout
    assert "1 failed, 1 passed" in done.stdout
