"""The health store on the shared filesystem (default ``<shared>/hpckit/health``), JSON parts only.

Layout::

    latest/<node>.json    the node's latest verdict (every quick run, and every sweep)
    nightly/<node>.json   the node's heavy-tier rows from the last sweep (the quick tier re-reads them)
    state/<node>.json     the drain policy's memory: consecutive passes / fails / unknowns per check
    nodes/<node>.json     what the sweep saw of the node: its Slurm state and since when, its last failed
                          job, whether hpckit holds it (see NodeLedger)
    history/<run>.parquet every sweep's rows (hpckit.health.history, with pandas)
    runs/<run>.json       every sweep's decisions, breaker trips and escalations
    metrics/hpckit_health.prom   Prometheus node_exporter textfile of the last sweep

Every file is replaced atomically (write + rename), so a reader never sees half a file, and the policy
memory of a node is updated under a lock, because the node's own quick tier and the sweep may both be at it.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from hpckit.errors import HpckitError
from hpckit.health.model import Row
from hpckit.health.policy import CheckMemory, NodeMemory


class StoreError(HpckitError):
    pass


@dataclass(frozen=True)
class Verdict:
    """A node's stored verdict: when, which tier, its rows."""

    node: str
    time: float
    tier: str
    rows: tuple[Row, ...]
    note: str = ""  # e.g. "drain failed: ..." when the node could not act on its own verdict


@dataclass(frozen=True)
class NodeLedger:
    """What the sweep keeps of a node between runs, besides the policy memory.

    A stored verdict may stand in for a sweep job only when it is newer than both ``state_since`` and
    ``last_failed_job``: a verdict written before the node went quiet, or before a job on it failed, says
    nothing about the node now. ``claimed``: hpckit saw the node failing (or could not check it) and has not
    let go of it since, so a DOWN that Slurm sets meanwhile is still hpckit's to undo once the node is fixed.
    """

    state: str = ""
    state_since: float = 0.0
    last_failed_job: float = 0.0
    claimed: bool = False

    def newer(self, when: float) -> bool:
        return when > max(self.state_since, self.last_failed_job)


def write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(json.dumps(data, sort_keys=True, separators=(",", ":")), encoding="utf-8")
    tmp.replace(path)


def read_json(path: Path) -> Any | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise StoreError(f"health store file {path} is unreadable: {exc}") from None


class Store:
    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def path(self, *parts: str) -> Path:
        return self.root.joinpath(*parts)

    # --- verdicts ---------------------------------------------------------------------------------------

    def write_verdict(self, kind: str, verdict: Verdict) -> None:
        data = {
            "node": verdict.node,
            "time": verdict.time,
            "tier": verdict.tier,
            "note": verdict.note,
            "rows": [r.to_dict() for r in verdict.rows],
        }
        write_json(self.path(kind, f"{verdict.node}.json"), data)

    def read_verdict(self, kind: str, node: str) -> Verdict | None:
        path = self.path(kind, f"{node}.json")
        return _verdict(read_json(path), path)

    def read_verdicts(self, kind: str, nodes: Iterable[str] | None = None) -> dict[str, Verdict]:
        """Verdicts of ``nodes`` (default: every node with one); unreadable files are skipped."""
        folder = self.path(kind)
        names = list(nodes) if nodes is not None else sorted(p.stem for p in folder.glob("*.json"))
        out = {}
        for name in names:
            try:
                verdict = self.read_verdict(kind, name)
            except StoreError:
                continue  # a torn or foreign file must not stop the fleet view
            if verdict is not None:
                out[name] = verdict
        return out

    # --- policy memory ------------------------------------------------------------------------------

    @contextmanager
    def locked(self, node: str) -> Iterator[None]:
        lock = self.path("state", f".{node}.lock")
        lock.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def read_memory(self, node: str) -> tuple[NodeMemory, float]:
        """The node's policy memory and when it was written (0 when it never was)."""
        path = self.path("state", f"{node}.json")
        data = read_json(path)
        return memory_from_json(data, path), float(data.get("updated", 0.0)) if isinstance(data, dict) else 0.0

    def write_memory(self, node: str, memory: NodeMemory, updated: float) -> None:
        write_json(self.path("state", f"{node}.json"), memory_to_json(memory, updated))

    # --- the sweep's ledger ----------------------------------------------------------------------------

    def read_ledger(self, node: str) -> NodeLedger | None:
        """None when the sweep never saw the node (or its file is unreadable: then it starts afresh)."""
        try:
            data = read_json(self.path("nodes", f"{node}.json"))
        except StoreError:
            return None
        if not isinstance(data, dict):
            return None
        try:
            return NodeLedger(
                str(data["state"]), float(data["state_since"]), float(data["last_failed_job"]), bool(data["claimed"])
            )
        except (KeyError, TypeError, ValueError):
            return None

    def write_ledger(self, node: str, ledger: NodeLedger) -> None:
        write_json(self.path("nodes", f"{node}.json"), asdict(ledger))


def _verdict(data: Any, path: Path) -> Verdict | None:
    if data is None:
        return None
    try:
        rows = tuple(Row.from_dict(r) for r in data["rows"])
        return Verdict(str(data["node"]), float(data["time"]), str(data["tier"]), rows, str(data.get("note", "")))
    except (KeyError, TypeError, ValueError) as exc:
        raise StoreError(f"health store file {path} is not a verdict: {exc}") from None


def memory_to_json(memory: NodeMemory, updated: float) -> dict[str, Any]:
    checks = {c: [m.passes, m.fails, m.unknowns] for c, m in sorted(memory.checks.items())}
    return {"clean_runs": memory.clean_runs, "checks": checks, "updated": updated}


def memory_from_json(data: Any, where: Path | str = "") -> NodeMemory:
    if data is None:
        return NodeMemory()
    try:
        checks: Mapping[str, Any] = data.get("checks", {})
        return NodeMemory(
            {c: CheckMemory(int(v[0]), int(v[1]), int(v[2])) for c, v in checks.items()},
            int(data.get("clean_runs", 0)),
        )
    except (AttributeError, TypeError, ValueError, IndexError) as exc:
        raise StoreError(f"health store file {where} is not policy memory: {exc}") from None
