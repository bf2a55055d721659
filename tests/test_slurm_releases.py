"""The per-release table: version parsing and SchedMD's upgrade rule."""

from __future__ import annotations

import pytest

from hpckit.slurm_releases import ReleaseError, Version, release, upgrade_path, upgrade_problem


def test_versions_order_by_series_then_micro() -> None:
    assert Version.parse("24.11.5") < Version.parse("24.11.99") < Version.parse("25.05.0")
    assert str(Version.parse("24.11")) == "24.11"


@pytest.mark.parametrize("bad", ["24", "24.11.x", "v24.11.5", "", "24.11.5.1"])
def test_bad_versions_are_named(bad: str) -> None:
    with pytest.raises(ReleaseError, match="is not a Slurm version"):
        Version.parse(bad)


def test_micro_upgrade_and_supported_majors_pass() -> None:
    assert upgrade_problem("24.11.5", "24.11.99") is None
    assert upgrade_problem("24.11.5", "26.05.1") is None
    assert upgrade_problem("24.11.5", "24.11.5") is None


def test_downgrade_is_refused() -> None:
    assert "downgrade" in (upgrade_problem("24.11.6", "24.11.5") or "")


def test_unsupported_jump_names_a_path() -> None:
    message = upgrade_problem("22.05.8", "24.11.5") or ""
    assert "24.11 accepts upgrades from 24.05, 23.11, 23.02 only" in message
    assert "22.05 -> 23.02 -> 24.11" in message
    assert upgrade_path("22.05", "26.05") == ["22.05", "23.02", "24.11", "26.05"]


def test_unknown_series_is_named() -> None:
    with pytest.raises(ReleaseError, match=r"27\.05 is not a release hpckit knows"):
        release("27.05.1")
