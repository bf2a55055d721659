"""Run the registered checks of a tier on one node: rows out, never an exception.

A check that raises, or whose every row is UNKNOWN because a tool failed, is tried once more; what still
fails becomes an UNKNOWN row saying why. A deadline keeps the whole run inside Slurm's 60 s limit for
HealthCheckProgram: checks not started in time report UNKNOWN instead of being killed half-way.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from hpckit.health.context import Context, LocalState
from hpckit.health.model import ABSENT, Measure, Row, Status, unknown
from hpckit.health.registry import Check, Tier, select

if TYPE_CHECKING:
    from hpckit.health.config import NodeConfig
    from hpckit.health.probe import Probe


@dataclass(frozen=True)
class RunOptions:
    tier: Tier = "quick"
    disabled: Sequence[str] = ()
    only: Sequence[str] = ()
    deadline_s: float = 40.0
    retries: int = 1


def check_here(
    config: NodeConfig, options: RunOptions, probe: Probe, commit: bool
) -> tuple[Context, list[Row], list[str]]:
    """The checks of a tier on this node, less those the config switches off. The node-local cursors
    (kernel log, IB counters) move only when `commit` is true, so a dry run reads the same lines again."""
    local = LocalState(config.state_dir)
    ctx = Context(probe, config, options.tier, local)
    rows = run_checks(ctx, replace(options, disabled=(*config.policy.disabled_checks, *options.disabled)))
    notes: list[str] = []
    if commit:
        local.commit()
        notes += [local.error] if local.error else []
    return ctx, rows, notes


def run_checks(ctx: Context, options: RunOptions) -> list[Row]:
    start = time.monotonic()
    rows: list[Row] = []
    for chk in select(options.tier, options.disabled, options.only):
        when = ctx.probe.now()
        if time.monotonic() - start > options.deadline_s:
            late = unknown("run", "deadline", f"not run: the {options.deadline_s:g} s budget was spent")
            rows.append(late.row(ctx.node, chk.name, options.tier, when))
            continue
        measures = _run_one(ctx, chk, options.retries)
        rows.extend(m.row(ctx.node, chk.name, options.tier, when) for m in measures)
    return rows


def _run_one(ctx: Context, chk: Check, retries: int) -> list[Measure]:
    measures: list[Measure] = []
    for _attempt in range(retries + 1):
        measures = _attempt_once(ctx, chk)
        if not _tool_failed(measures):
            break
    return measures


def _attempt_once(ctx: Context, chk: Check) -> list[Measure]:
    try:
        return list(chk.func(ctx))
    except Exception as exc:  # a check's bug or an unexpected tool answer must not stop the other checks
        return [unknown("run", "check-error", f"{chk.name} raised {type(exc).__name__}: {exc}")]


def _tool_failed(measures: Iterable[Measure]) -> bool:
    listed = list(measures)
    return bool(listed) and all(m.status == Status.UNKNOWN and m.fault != ABSENT for m in listed)
