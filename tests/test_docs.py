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


def _section(text: str, title: str) -> str:
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else None]


def test_the_layout_table_names_every_room(repo: Path) -> None:
    """README's layout table has a row for every room of hpckit (each package folder), and for lab/vm."""
    layout = _section((repo / "README.md").read_text(encoding="utf-8"), "Layout")
    rows = set(re.findall(r"^\| `(hpckit/[^`]+)` \|", layout, flags=re.MULTILINE))
    folders = {f"hpckit/{p.parent.name}/" for p in (repo / "hpckit").glob("*/__init__.py")} | {"hpckit/lab/vm/"}
    assert folders <= rows, f"no layout row for {sorted(folders - rows)}"
    assert all((repo / row).is_dir() for row in rows), rows


def test_the_commands_table_names_every_benchmark(repo: Path) -> None:
    """The `hpckit bench` row names each benchmark as its command is spelled (allgather, not all_gather)."""
    from hpckit.bench.registry import BENCHMARKS

    commands = _section((repo / "README.md").read_text(encoding="utf-8"), "Commands")
    row = next(line for line in commands.splitlines() if line.startswith("| `hpckit bench allreduce -N"))
    for name in BENCHMARKS:
        assert f"`{name}`" in row or f"hpckit bench {name} " in row, name
    assert "hpckit bench list" in row
