"""A built wheel carries ansible/ and sbatch_templates/ and finds them at run time, outside the repository."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

IGNORED = (".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache")
IGNORED += (".hypothesis",)
PROBE = """
from hpckit.paths import ansible_dir, blueprints_dir, schema_file, templates_dir
import hpckit, sys
assert 'site-packages' in hpckit.__file__, hpckit.__file__
print(ansible_dir()); print(templates_dir()); print(blueprints_dir()); print(schema_file())
"""


def _files(root: Path) -> set[str]:
    return {
        str(p.relative_to(root))
        for p in root.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and not p.name.endswith(".pyc")
    }


@pytest.mark.slow
def test_wheel_installs_and_resolves_assets(repo: Path, tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    # Build from a clean copy: a stale build/ folder in a working checkout would leak old files into the wheel.
    src = tmp_path / "src"
    shutil.copytree(repo, src, ignore=shutil.ignore_patterns(*IGNORED))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist), str(src)],
        check=True,
        cwd=tmp_path,
    )
    wheel = next(dist.glob("hpckit-*.whl"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    # The fresh venv borrows the test environment's dependencies (a .pth line) but never sees the checkout.
    purelib = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], capture_output=True, text=True
    ).stdout.strip()
    (Path(purelib) / "deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)], check=True)
    done = subprocess.run([str(py), "-c", PROBE], capture_output=True, text=True, cwd=tmp_path, check=True)
    ansible, templates, blueprints, schema = (Path(line) for line in done.stdout.split())
    assert all(str(venv) in str(p) for p in (ansible, templates, blueprints, schema))
    assert _files(ansible) == _files(repo / "ansible")
    assert _files(templates) == _files(repo / "sbatch_templates")
    assert _files(blueprints) == _files(repo / "blueprints")
    assert schema.read_bytes() == (repo / "hpckit-blueprint.schema.json").read_bytes()
    for example in blueprints.glob("*.yaml"):  # the `$schema` comment of each example finds the schema
        assert (example.parent / "../hpckit-blueprint.schema.json").resolve() == schema.resolve()
        done = subprocess.run([str(venv / "bin" / "hpckit"), "validate", str(example)], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
    cli = subprocess.run([str(venv / "bin" / "hpckit"), "--version"], capture_output=True, text=True, check=True)
    assert "hpckit" in cli.stdout
