"""The `hpckit` command: exit codes 0 ok / 1 failure / 2 input error, no tracebacks for user mistakes."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from hpckit import __version__
from hpckit.blueprint import blueprint_schema
from hpckit.cli import cli


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hpckit", *args], capture_output=True, text=True, check=False)


def test_version() -> None:
    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0 and __version__ in result.output


def test_validate_examples(repo: Path) -> None:
    shipped = sorted((repo / "blueprints").glob("*.yaml"))
    done = run("validate", *(str(p) for p in shipped))
    assert done.returncode == 0, done.stderr
    assert f"{len(shipped)} blueprint(s) valid" in done.stdout and len(shipped) >= 4


def test_validate_broken_exits_2_with_every_problem(data_dir: Path) -> None:
    broken = data_dir / "blueprints" / "broken.yaml"
    done = run("validate", str(broken))
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 11 and all(line.startswith(f"{broken}:") for line in lines)
    assert "Traceback" not in done.stderr


def test_validate_json(data_dir: Path) -> None:
    result = CliRunner().invoke(cli, ["validate", "--json", str(data_dir / "blueprints" / "broken.yaml")])
    assert result.exit_code == 2
    report = json.loads(result.output)
    assert report["ok"] is False and {"file", "line", "col", "path", "message"} <= set(report["problems"][0])


def test_validate_with_site_vars(repo: Path, tmp_path: Path) -> None:
    site = tmp_path / "site.yaml"
    site.write_text("vars:\n  gpus_per_node: 2\n")
    result = CliRunner().invoke(cli, ["validate", "-V", str(site), str(repo / "blueprints" / "lab.yaml")])
    assert result.exit_code == 0, result.output
    site.write_text("vars:\n  gpus_per_node: zero\n")
    result = CliRunner().invoke(cli, ["validate", "-V", str(site), str(repo / "blueprints" / "lab.yaml")])
    assert result.exit_code == 2 and "gpus.count" in result.output


def test_missing_file_is_an_input_error(tmp_path: Path) -> None:
    done = run("validate", str(tmp_path / "nope.yaml"))
    assert done.returncode == 2 and "cannot read" in done.stderr and "Traceback" not in done.stderr


def test_schema_is_json_schema_and_committed_copy_is_current(repo: Path) -> None:
    done = run("schema")
    assert done.returncode == 0
    schema = json.loads(done.stdout)
    assert schema["title"] == "hpckit blueprint" and "partitions" in schema["properties"]
    assert json.loads((repo / "hpckit-blueprint.schema.json").read_text()) == blueprint_schema(), (
        "regenerate with: hpckit schema > hpckit-blueprint.schema.json"
    )


def test_every_command_is_found_through_its_home() -> None:
    """HOMES names each command's module, so running one command imports that module only."""
    from hpckit.cli import GROUPS, HOMES

    homes = {c.name: m for m in GROUPS for c in importlib.import_module(f"hpckit.cli.{m}").COMMANDS}
    assert homes == HOMES


def test_a_command_imports_its_own_module_only() -> None:
    code = "import sys; from hpckit.cli import cli; cli(['submit', '-h'], standalone_mode=False); print(*sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(done.stdout.split())
    assert "hpckit.cli.jobs" in loaded
    assert not loaded & {"hpckit.cli.bench", "hpckit.cli.results", "pandas", "matplotlib", "fabric", "ansible_runner"}


def test_verify_takes_site_vars_like_every_blueprint_command(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`hpckit verify -V site.yaml BLUEPRINT` verifies the blueprint with the site's vars, as deploy and plan do."""
    from hpckit.cli import bench as cli_bench

    seen: list[Any] = []

    def verified(bp: Any, timeout: float, partitions: tuple[str, ...] = (), **_: Any) -> dict[str, Any]:
        seen.append(bp)
        return {"status": "passed"}

    monkeypatch.setattr(cli_bench, "run_verify", verified)
    site = tmp_path / "site.yaml"
    site.write_text('vars:\n  net: "10.99.3"\n')
    result = CliRunner().invoke(cli, ["verify", "-V", str(site), str(repo / "blueprints" / "lab.yaml"), "--json"])
    assert result.exit_code == 0, result.output
    assert seen[0].controller.address == "10.99.3.10"
