"""What people and Prometheus read: a node's check table, the sweep report, the run summary, and the
node_exporter textfile."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpckit.health.model import ABSENT, Row, Status
from hpckit.health.policy import Action

if TYPE_CHECKING:
    import pandas as pd

    from hpckit.health.node import NodeReport
    from hpckit.health.store import Store
    from hpckit.health.sweep import SweepResult


def _table(headers: Sequence[str], rows: Iterable[Sequence[object]], limits: Sequence[int] | None = None) -> str:
    body = [[str(c) for c in r] for r in rows]
    if limits:
        body = [[c if len(c) <= lim else c[: lim - 1] + "…" for c, lim in zip(r, limits, strict=True)] for r in body]
    widths = [max([len(h), *(len(r[i]) for r in body)]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in body]
    return "\n".join(lines)


def _value(row: Row) -> str:
    if row.value is None:
        return "-"
    return f"{row.value:g} {row.unit}".strip()


def _absent(row: Row) -> bool:
    return row.status == Status.UNKNOWN and row.fault == ABSENT


def _absent_summary(rows: Sequence[Row]) -> str:
    """One line for what could not be looked at (no driver, no torch ...): the lab's GPU checks."""
    checks: dict[str, set[str]] = {}
    for row in rows:
        if _absent(row):
            checks.setdefault(row.check, set()).add(row.node)
    if not checks:
        return ""
    nodes = sorted({n for ns in checks.values() for n in ns})
    return f"not checked here (absent): {', '.join(checks)} on {len(nodes)} node(s): {_hosts(nodes)}"


def _hosts(nodes: Sequence[str]) -> str:
    try:
        import hostlist

        return str(hostlist.collect_hostlist(list(nodes)))
    except ImportError:
        return ",".join(nodes)


def render_rows(rows: Sequence[Row], *, verbose: bool = False) -> str:
    """Rows worst first; OK rows only when ``verbose``; 'absent' rows folded into one line."""
    shown = sorted((r for r in rows if (verbose or r.status != Status.OK) and not _absent(r)), key=lambda r: -r.status)
    absent = _absent_summary(rows)
    if not shown:
        return "\n".join(x for x in (f"no problem in {len(rows)} measurements", absent) if x)
    table = _table(
        ["STATUS", "NODE", "CHECK", "METRIC", "VALUE", "FAULT", "EVIDENCE"],
        ([r.status.name, r.node, r.check, r.metric, _value(r), r.fault or "", r.evidence] for r in shown),
        [7, 20, 16, 28, 18, 22, 110],
    )
    return f"{table}\n{absent}" if absent else table


def render_node(report: NodeReport, *, verbose: bool = False, threshold: float = 0.3) -> str:
    counts = {s: sum(1 for r in report.rows if r.status == s) for s in Status}
    summary = ", ".join(f"{n} {s.name}" for s, n in counts.items() if n)
    lines = [
        f"{report.node}: {report.tier} tier, {len(report.rows)} measurements ({summary}) in {report.seconds:.2f} s"
    ]
    lines.append(render_rows(report.rows, verbose=verbose))
    decision = report.decision
    if decision is not None:
        enforce = "" if decision.enforce else " (not enforced: dry run or report-only)"
        lines.append(f"policy: {decision.action.value}{enforce}: {decision.why}")
        if decision.reason and decision.action is not Action.NONE:
            lines.append(f"reason: {decision.reason}")
    if report.outcome is not None:
        lines += [t.message(threshold) for t in report.outcome.trips]
        lines += [
            f"ESCALATED: {e.check} UNKNOWN {e.unknowns} runs in a row: {e.evidence}" for e in report.outcome.escalations
        ]
    if report.applied is not None:
        lines.append(f"slurm: {report.applied.message}")
    lines += [f"note: {n}" for n in report.notes]
    return "\n".join(lines)


# --- the sweep ------------------------------------------------------------------------------------


def render_sweep(result: SweepResult, history: pd.DataFrame | None = None, threshold: float = 0.3) -> str:
    from hpckit.health import history as hist

    out = [_sweep_header(result)]
    for trip in result.outcome.trips:
        out.append("!! " + trip.message(threshold))
    out.append(_failing_first(result))
    out += [
        f"ESCALATED {e.node} {e.check}: UNKNOWN {e.unknowns} runs in a row: {e.evidence}"
        for e in result.outcome.escalations
    ]
    current = hist.rows_frame(result.rows, result.run_id, result.started)
    medians = hist.fleet_medians(current)
    if not medians.empty:
        out.append(
            "fleet medians:\n"
            + _table(
                ["CHECK", "METRIC", "MEDIAN", "MIN", "MAX", "NODES"],
                (
                    [r.check, r.metric, f"{r.median:g} {r.unit}", f"{r.min:g}", f"{r.max:g}", str(r.nodes)]
                    for r in medians.itertuples()
                ),
            )
        )
    out.append(_drift_text(current, history, result.run_id))
    if result.skipped:
        out.append("skipped:\n" + "\n".join(f"  {n}: {why}" for n, why in sorted(result.skipped.items())))
    out += [f"note: {n}" for n in result.notes]
    return "\n\n".join(part for part in out if part)


def _sweep_header(result: SweepResult) -> str:
    sources = list(result.sources.values())
    jobs = sum(1 for s in sources if s.startswith("job ("))
    ssh = sum(1 for s in sources if "over SSH" in s)
    stored = sum(1 for s in sources if s.startswith("quick verdict"))
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(result.started))
    return (
        f"health sweep {result.run_id} at {stamp}: {len(sources)} nodes looked at ({jobs} by job, {ssh} over "
        f"SSH, {stored} by their stored quick verdict, {len(sources) - jobs - ssh - stored} could not be "
        f"checked), {len(result.skipped)} skipped, {result.seconds:.1f} s"
    )


def _failing_first(result: SweepResult) -> str:
    decisions = {d.node: d for d in result.outcome.decisions}
    applied = {a.node: a for a in result.applied}
    worst: dict[str, Status] = {}
    for row in result.rows:
        judged = Status.OK if _absent(row) else row.status
        worst[row.node] = max(worst.get(row.node, Status.OK), judged)
    lines = []
    for node in sorted(worst, key=lambda n: (-worst[n], n)):
        decision = decisions.get(node)
        action = decision.action.value if decision else "-"
        if decision is not None and decision.changes_slurm and not decision.enforce:
            action = f"would {action}"
        done = applied.get(node)
        lines.append(
            [
                worst[node].name,
                node,
                action,
                decision.reason or "" if decision else "",
                done.message if done else "",
                result.sources.get(node, ""),
            ]
        )
    table = _table(["WORST", "NODE", "ACTION", "REASON", "SLURM", "FROM"], lines)
    return f"{table}\n\n{render_rows(result.rows)}"


def _drift_text(current: pd.DataFrame, history: pd.DataFrame | None, run_id: str) -> str:
    from hpckit.health import history as hist

    if history is None or history.empty:
        return "drift: no history yet"
    past = history[history["run_id"] != run_id]
    drifting = hist.drift(current, past)
    if drifting.empty:
        return f"drift: no node drifting from its own history ({past['run_id'].nunique()} earlier runs)"
    return "drifting from their own history:\n" + _table(
        ["NODE", "CHECK", "METRIC", "NOW", "OWN MEDIAN", "CHANGE", "RUNS"],
        (
            [r.node, r.check, r.metric, f"{r.value:g} {r.unit}", f"{r.median:g}", f"{r.change:+.1%}", str(r.runs)]
            for r in drifting.itertuples()
        ),
    )


def run_summary(result: SweepResult) -> dict[str, Any]:
    return {
        "run_id": result.run_id,
        "started": result.started,
        "seconds": round(result.seconds, 3),
        "sources": result.sources,
        "skipped": result.skipped,
        "decisions": [
            {"node": d.node, "action": d.action.value, "reason": d.reason, "why": d.why, "enforce": d.enforce}
            for d in result.outcome.decisions
        ],
        "applied": [{"node": a.node, "done": a.done, "message": a.message} for a in result.applied],
        "circuit_breaker": [
            {"check": t.check, "failing": list(t.failing), "checked": t.checked, "faults": list(t.faults)}
            for t in result.outcome.trips
        ],
        "escalations": [
            {"node": e.node, "check": e.check, "unknowns": e.unknowns, "evidence": e.evidence}
            for e in result.outcome.escalations
        ],
        "notes": result.notes,
    }


# --- Prometheus node_exporter textfile -----------------------------------------------------------


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def prometheus_text(result: SweepResult) -> str:
    lines = [
        "# HELP hpckit_health_status Verdict per node, check and metric: 0 OK, 1 WARN, 2 UNKNOWN, 3 FAIL.",
        "# TYPE hpckit_health_status gauge",
    ]
    for row in result.rows:
        labels = f'node="{_label(row.node)}",check="{_label(row.check)}",metric="{_label(row.metric)}"'
        lines.append(f"hpckit_health_status{{{labels}}} {int(row.status)}")
    lines += [
        "# HELP hpckit_health_value Measured value per node, check and metric.",
        "# TYPE hpckit_health_value gauge",
    ]
    for row in result.rows:
        if row.value is not None:
            labels = f'node="{_label(row.node)}",check="{_label(row.check)}",metric="{_label(row.metric)}"'
            labels += f',unit="{_label(row.unit)}"'
            lines.append(f"hpckit_health_value{{{labels}}} {row.value:g}")
    lines += [
        "# HELP hpckit_health_drained Nodes drained by hpckit in this sweep.",
        "# TYPE hpckit_health_drained gauge",
    ]
    for d in result.outcome.decisions:
        if d.action in (Action.DRAIN, Action.REDRAIN, Action.KEEP):
            lines.append(f'hpckit_health_drained{{node="{_label(d.node)}",reason="{_label(d.reason or "")}"}} 1')
    lines += [
        "# HELP hpckit_health_circuit_breaker_tripped Checks held by the circuit breaker in this sweep.",
        "# TYPE hpckit_health_circuit_breaker_tripped gauge",
    ]
    lines += [
        f'hpckit_health_circuit_breaker_tripped{{check="{_label(t.check)}"}} {len(t.failing)}'
        for t in result.outcome.trips
    ]
    lines += [
        "# HELP hpckit_health_escalated UNKNOWN repeated past the escalation limit.",
        "# TYPE hpckit_health_escalated gauge",
    ]
    lines += [
        f'hpckit_health_escalated{{node="{_label(e.node)}",check="{_label(e.check)}"}} {e.unknowns}'
        for e in result.outcome.escalations
    ]
    lines += [
        "# HELP hpckit_health_last_sweep_timestamp_seconds When the last sweep started.",
        "# TYPE hpckit_health_last_sweep_timestamp_seconds gauge",
        f"hpckit_health_last_sweep_timestamp_seconds {result.started:.0f}",
        "# HELP hpckit_health_sweep_duration_seconds How long the last sweep took.",
        "# TYPE hpckit_health_sweep_duration_seconds gauge",
        f"hpckit_health_sweep_duration_seconds {result.seconds:.3f}",
    ]
    return "\n".join(lines) + "\n"


def write_textfile(path: str | Path, text: str) -> None:
    """node_exporter reads every *.prom file of its dir at any moment: write aside, then rename."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(target)


def load_result(store: Store, run_id: str | None = None) -> SweepResult:
    """A stored sweep (default: the last) as a SweepResult, for `hpckit health report`."""
    from hpckit.health import history
    from hpckit.health.policy import Decision, Escalation, Outcome, Trip
    from hpckit.health.store import StoreError, read_json
    from hpckit.health.sweep import SweepResult
    from hpckit.slurm.nodes import Applied

    ids = history.run_ids(store)
    if not ids:
        raise StoreError(f"no sweep stored under {store.root}")
    run_id = run_id or ids[-1]
    if run_id not in ids:
        raise StoreError(f"no sweep {run_id!r} under {store.root} (last: {ids[-1]})")
    frame = history.load_history(store).query("run_id == @run_id")
    rows = [
        Row.from_dict(
            {str(k): (None if _missing(v) else v) for k, v in rec.items()} | {"time": rec["time"].timestamp()}
        )
        for rec in frame.to_dict("records")
    ]
    summary = read_json(store.path("runs", f"{run_id}.json")) or {}
    outcome = Outcome(
        tuple(
            Decision(d["node"], Action(d["action"]), d["why"], d["reason"], d["enforce"])
            for d in summary.get("decisions", [])
        ),
        tuple(
            Trip(t["check"], tuple(t["failing"]), t["checked"], tuple(t["faults"]))
            for t in summary.get("circuit_breaker", [])
        ),
        tuple(Escalation(e["node"], e["check"], e["unknowns"], e["evidence"]) for e in summary.get("escalations", [])),
        {},
    )
    result = SweepResult(
        run_id,
        float(summary.get("started", 0.0)),
        rows,
        outcome,
        summary.get("sources", {}),
        summary.get("skipped", {}),
    )
    result.applied = [Applied(a["node"], a["done"], a["message"]) for a in summary.get("applied", [])]
    result.notes = list(summary.get("notes", []))
    result.seconds = float(summary.get("seconds", 0.0))
    return result


def _missing(value: object) -> bool:
    return value is None or (isinstance(value, float) and value != value)
