"""`hpckit lab` commands: user mistakes give one clear message and an exit code, never a traceback."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from hpckit.cli.lab import lab


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(lab, list(args))
    assert "Traceback" not in result.output
    return result.exit_code, result.output


def test_status_without_any_lab(tmp_path: Path) -> None:
    code, output = invoke("status", "--state-root", str(tmp_path))
    assert code == 1
    assert "no lab is up" in output


def test_status_of_unknown_lab(tmp_path: Path) -> None:
    code, output = invoke("status", "--cluster", "nope", "--state-root", str(tmp_path))
    assert code == 1
    assert "no lab 'nope'" in output


def test_up_needs_a_blueprint_or_a_spec() -> None:
    code, output = invoke("up")
    assert code == 1
    assert "give either a BLUEPRINT or --spec FILE" in output


def test_up_with_a_broken_spec_file(tmp_path: Path) -> None:
    spec = tmp_path / "spec.json"
    spec.write_text('{"cluster": "x", "nodes": [{"name": "a", "address": "10.1.0.5"}], "subnet": "10.77.9.0/24"}')
    code, output = invoke("up", "--spec", str(spec), "--state-root", str(tmp_path))
    assert code == 1
    assert "outside subnet" in output


def test_exec_needs_a_command() -> None:
    code, output = invoke("exec", "node1")
    assert code == 2
    assert "COMMAND" in output
