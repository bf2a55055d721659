"""InfiniBand checks: every declared HCA port ACTIVE/LinkUp at the blueprint's rate; link-down counters."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from hpckit.health.context import Context
from hpckit.health.model import Measure, fail, ok, unknown, warn
from hpckit.health.registry import check

if TYPE_CHECKING:
    from hpckit.hw import IbPort

# sysfs counters that only ever grow while a link misbehaves; a rise since the last run warns.
FLAP_COUNTERS = ("link_downed", "link_error_recovery")


def _ports(ctx: Context) -> list[IbPort] | Measure:
    from hpckit.hw import HwParseError

    try:
        return ctx.probe.ib_ports()
    except HwParseError as exc:
        return unknown("ports", "ib-unreadable", str(exc))


@check("ib.ports")
def ports(ctx: Context) -> Iterator[Measure]:
    """Each declared HCA has its ports ACTIVE and LinkUp, at the declared rate."""
    expect = ctx.config.infiniband
    if expect is None:
        return
    found = _ports(ctx)
    if isinstance(found, Measure):
        yield found
        return
    for hca in expect.hcas:
        hca_ports = [p for p in found if p.ca == hca]
        if not hca_ports:
            present = sorted({p.ca for p in found}) or ["none"]
            yield fail(hca, "ib-hca-missing", f"HCA {hca} not found (present: {', '.join(present)})")
            continue
        for port in hca_ports:
            yield _judge_port(port, expect.rate_gbps, expect.roce)


def _judge_port(port: IbPort, rate_gbps: float, roce: bool) -> Measure:
    metric = f"{port.ca}/{port.port}"
    state = f"{port.state or '?'}/{port.physical_state or '?'}"
    if not port.active or (port.physical_state is not None and not port.link_up):
        return fail(metric, "ib-port-down", f"{metric}: {state}", 0.0, "Gb/s")
    if not roce and port.link_layer is not None and not port.is_infiniband:
        return warn(metric, "ib-link-layer", f"{metric}: link layer {port.link_layer}, InfiniBand expected")
    rate = port.rate_gbps
    if rate is not None and rate < rate_gbps:
        return fail(metric, "ib-rate", f"{metric}: {rate:g} Gb/s, blueprint says {rate_gbps:g}", rate, "Gb/s")
    return ok(metric, rate, "Gb/s", f"{metric}: {state} {rate if rate is not None else '?'} Gb/s")


@check("ib.link_errors")
def link_errors(ctx: Context) -> Iterator[Measure]:
    """Link-down and error-recovery counters rose since the last run (warn: a flapping link)."""
    if ctx.config.infiniband is None:
        return
    found = _ports(ctx)
    if isinstance(found, Measure):
        yield found
        return
    key = f"ib-counters-{ctx.tier}"
    before = ctx.local.load(key)
    now: dict[str, int] = {}
    for port in found:
        for name in FLAP_COUNTERS:
            if name not in port.counters:
                continue
            label = f"{port.ca}/{port.port}.{name}"
            value = port.counters[name]
            now[label] = value
            previous = before.get(label)
            if isinstance(previous, int) and value > previous:
                yield warn(
                    label, "ib-link-flap", f"{label} rose {previous} -> {value} since the last run", float(value)
                )
            else:
                yield ok(label, float(value), "events", f"{label} = {value}")
    ctx.local.save(key, now)
