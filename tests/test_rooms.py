"""Data flows one way between hpckit's rooms (its top-level packages and modules): no import cycles.

The allowed direction, bottom to top; a module may import its own room and any room on a lower floor, never one
on its own floor or above (imports inside functions and under TYPE_CHECKING count too):

    0 ground floor  errors, paths, and the package itself (its version)
    1               hardware (the hardware table), slurm_releases (the release table), slurm_accounts
                    (sacctmgr's settings and values),
                    clusters (the deployment record's one reader), cron (cron times),
                    proc (running programs: here, over SSH; the only importer of subprocess)
    2               blueprint (models), lab (machines), slurm (Slurm commands), results (text -> tables),
                    hw (hardware tool parsers)
    3               jobs (templates, submission: uses slurm), health (uses blueprint, slurm)
    4               deploy (blueprint -> Ansible -> record: uses health, lab, slurm)
    5               preflight (uses deploy), bench (uses jobs, results, slurm)
    6               cli (thin commands over everything)
    7               __main__

A new room gets its floor here; a move that needs an import upwards means the code sits in the wrong room.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

import hpckit

PACKAGE = Path(hpckit.__file__).parent
ROOT_NAME = "(hpckit)"  # `from hpckit import __version__`

FLOORS: dict[str, int] = {
    **dict.fromkeys([ROOT_NAME, "errors", "paths"], 0),
    **dict.fromkeys(["hardware", "slurm_releases", "slurm_accounts", "clusters", "cron", "proc"], 1),
    **dict.fromkeys(["blueprint", "lab", "slurm", "results", "hw"], 2),
    **dict.fromkeys(["jobs", "health"], 3),
    "deploy": 4,
    **dict.fromkeys(["preflight", "bench"], 5),
    "cli": 6,
    "__main__": 7,
}

Edges = dict[str, dict[str, list[str]]]  # room -> room it imports -> "file:line" where


def _rooms(package: Path = PACKAGE) -> set[str]:
    return {p.stem for p in package.iterdir() if (p.suffix == ".py" or (p / "__init__.py").exists())} - {"__init__"}


def _imported(node: ast.AST, rooms: set[str]) -> list[str]:
    """The rooms of hpckit one import statement names."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        if node.module == "hpckit":  # `from hpckit import x`: x is a room, or a name of the package itself
            return [a.name if a.name in rooms else ROOT_NAME for a in node.names]
        names = [node.module]
    else:
        return []
    return [n.split(".")[1] for n in names if n.startswith("hpckit.")]


def room_imports(package: Path = PACKAGE) -> Edges:
    rooms = _rooms(package)
    edges: Edges = defaultdict(lambda: defaultdict(list))
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package)
        room = ROOT_NAME if rel.name == "__init__.py" and len(rel.parts) == 1 else rel.parts[0].removesuffix(".py")
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            assert not (isinstance(node, ast.ImportFrom) and node.level), f"{rel}:{node.lineno}: relative import"
            for target in _imported(node, rooms):
                if target != room:
                    edges[room][target].append(f"{rel}:{getattr(node, 'lineno', 0)}")
    return edges


def cycles(edges: Edges) -> list[list[str]]:
    """Every strongly connected group of more than one room (Tarjan), each sorted: the import cycles."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(room: str) -> None:
        index[room] = low[room] = len(index)
        stack.append(room)
        for nxt in edges.get(room, {}):
            if nxt not in index:
                visit(nxt)
                low[room] = min(low[room], low[nxt])
            elif nxt in stack:
                low[room] = min(low[room], index[nxt])
        if low[room] == index[room]:
            group = []
            while True:
                top = stack.pop()
                group.append(top)
                if top == room:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for room in sorted(set(edges) | {t for targets in edges.values() for t in targets}):
        if room not in index:
            visit(room)
    return found


def test_no_import_cycle_between_rooms() -> None:
    found = cycles(room_imports())
    assert not found, f"import cycles between hpckit's rooms: {found}"


def test_every_room_has_a_floor() -> None:
    missing = sorted(_rooms() - set(FLOORS))
    assert not missing, f"rooms with no floor in {__name__}.FLOORS (give each one, see the docstring): {missing}"


def test_imports_go_down_the_floors() -> None:
    edges = room_imports()
    upward = [
        f"{room} (floor {FLOORS[room]}) imports {target} (floor {FLOORS[target]}) at {', '.join(where)}"
        for room, targets in sorted(edges.items())
        for target, where in sorted(targets.items())
        if room in FLOORS and target in FLOORS and FLOORS[target] >= FLOORS[room]
    ]
    assert not upward, "imports against the allowed direction:\n" + "\n".join(upward)


LAYOUT_WORDS = (
    '/ "clusters"',
    '/ "current"',
    '"access.json"',
    '"blueprint.json"',
    '"destroyed.json"',
    '"inventory.yml"',
)


def test_the_deployment_record_is_read_in_one_place() -> None:
    """Only hpckit.clusters knows the record's folder layout; deploy/record.py writes through it."""
    spelled = [
        f"{path.relative_to(PACKAGE)}:{n}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name != "clusters.py"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if any(word in line for word in LAYOUT_WORDS)
    ]
    assert not spelled, f"the record's layout spelled outside hpckit/clusters.py: {spelled}"


@pytest.mark.parametrize(
    ("edges", "expected"),
    [
        ({"a": {"b": []}, "b": {"a": []}}, [["a", "b"]]),
        ({"a": {"b": []}, "b": {"c": []}, "c": {"a": []}, "d": {"a": []}}, [["a", "b", "c"]]),
        ({"a": {"b": []}, "b": {"c": []}, "d": {"a": []}}, []),
    ],
)
def test_the_cycle_finder_finds_cycles(edges: Edges, expected: list[list[str]]) -> None:
    assert cycles(edges) == expected


def test_the_walk_sees_the_cycle_this_test_exists_for(tmp_path: Path) -> None:
    """The slurm <-> deploy cycle as it was (slurm/connect.py reading the record from deploy), also when the
    import hides inside a function."""
    for room, text in {
        "slurm/connect.py": "from hpckit.deploy.record import load_access\n",
        "deploy/apply.py": "def f() -> None:\n    from hpckit.slurm.client import SlurmClient\n",
        "__init__.py": "",
        "slurm/__init__.py": "",
        "deploy/__init__.py": "",
    }.items():
        (tmp_path / room).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / room).write_text(text)
    assert cycles(room_imports(tmp_path)) == [["deploy", "slurm"]]


def _long_functions(paths: list[Path], limit: int) -> list[str]:
    found = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > limit:
                    found.append(f"{path}:{node.lineno}: {node.name} is {length} lines")
    return found


def test_no_function_over_60_lines(repo: Path) -> None:
    """The house style, held for the package, the playbooks' plugins and the benchmarks."""
    paths = [*PACKAGE.rglob("*.py"), *(repo / "ansible").rglob("*.py"), *(repo / "benchmarks").rglob("*.py")]
    assert len(paths) > 100
    assert _long_functions(paths, 60) == []


def test_the_length_check_sees_a_long_function(tmp_path: Path) -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(60))
    (tmp_path / "long.py").write_text(f"def long() -> None:\n{body}")
    assert _long_functions([tmp_path / "long.py"], 60) == [f"{tmp_path / 'long.py'}:1: long is 61 lines"]


def test_subprocess_is_imported_in_the_process_room_only() -> None:
    """Every program hpckit runs goes through hpckit.proc (one result type, one timeout rule)."""
    importers = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            module = node.module if isinstance(node, ast.ImportFrom) else None
            if "subprocess" in names or module == "subprocess":
                importers.append(str(path.relative_to(PACKAGE)))
    assert importers == ["proc/__init__.py"]
