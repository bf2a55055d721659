"""Every file of this project the docs cite exists (a path in backticks starting at one of the top folders)."""

from __future__ import annotations

import re
from pathlib import Path

TOP = ("hpckit/", "ansible/", "tests/", "benchmarks/", "scripts/", "blueprints/", "sbatch_templates/", ".ci/")
CITED = re.compile(r"`([^`\s]+)`")


def _cited(text: str) -> list[str]:
    """Project paths cited in backticks; globs, placeholders and line suffixes (`x.py:12`) aside."""
    paths = []
    for match in CITED.finditer(text):
        path = match.group(1).rstrip(".,;)").split("::")[0]
        path = re.sub(r":\d+$", "", path)
        if path.startswith(TOP) and not set(path) & set("*<>{}$%"):
            paths.append(path)
    return paths


def _docs(repo: Path) -> list[Path]:
    skip = {".git", ".venv", "node_modules"}
    return [p for p in repo.rglob("*.md") if not skip & set(p.relative_to(repo).parts)]


def test_every_cited_file_exists(repo: Path) -> None:
    docs = _docs(repo)
    assert repo / "README.md" in docs and repo / "ansible" / "ANSIBLE-CONTRACT.md" in docs
    missing = [
        f"{doc.relative_to(repo)}: {path}"
        for doc in docs
        for path in _cited(doc.read_text())
        if not (repo / path).exists()
    ]
    assert missing == []


def test_the_check_sees_a_missing_file() -> None:
    text = "see `benchmarks/ansible_noop.py` and `hpckit/cli/` and `hpckit/*.py` and `tests/x.py::test_a`"
    assert _cited(text) == ["benchmarks/ansible_noop.py", "hpckit/cli/", "tests/x.py"]
