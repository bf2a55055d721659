"""Out-of-band checks: the sweep host runs a node's quick tier over SSH, not through Slurm.

Used where a sweep job cannot run or did not (munge or slurmd down, the node not answering slurmctld, or
drained by hpckit and waiting to be re-checked), and only where the blueprint allows it (``health.ssh_probe``).
Its verdict is fresh, so unlike a stored one it may resume a node; and when it cannot even connect, that
is the answer: the node is unreachable.

Then :func:`reach_row` turns what was seen (job, probe, Slurm's view) into the node's ``health.reach``
verdict, whose fault says why it could not be checked: ``munge``, ``slurmd``, ``ssh`` (no SSH either),
``slurmctld`` (fine over SSH but Slurm does not hear it) or ``job`` (its sweep job failed).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hpckit.errors import HpckitError
from hpckit.health.config import NodeConfig, SshProbe
from hpckit.health.model import Row, Status, ok, unknown
from hpckit.health.policy import REACH_CHECK


@dataclass
class ProbeResult:
    node: str
    rows: list[Row] = field(default_factory=list)
    error: str | None = None  # could not connect, or no verdict came back
    seconds: float = 0.0


Prober = Callable[[str], ProbeResult]


def probe_command(config: NodeConfig) -> list[str]:
    """The quick tier, printed as JSON, changing nothing on the node (no stored verdict, no drain, no log
    cursor moved: its own next quick run still sees what this one saw): the sweep judges it."""
    return [*config.command, "check", "--tier", "quick", "--json", "--dry-run"]


def ssh_prober(config: NodeConfig, settings: SshProbe) -> Prober:
    from hpckit.health.sweep import parse_job_output
    from hpckit.proc.ssh import SshTransport

    argv = probe_command(config)

    def probe(node: str) -> ProbeResult:
        start = time.monotonic()
        transport = SshTransport(
            node,
            settings.user,
            settings.port,
            Path(settings.key) if settings.key else None,
            Path(settings.known_hosts) if settings.known_hosts else None,
            settings.connect_timeout_s,
        )
        try:
            done = transport.run(argv, timeout=settings.timeout_s)
        except HpckitError as exc:
            return ProbeResult(node, [], str(exc), time.monotonic() - start)
        finally:
            transport.close()
        try:
            rows = parse_job_output(done.stdout, node)
        except ValueError:
            return ProbeResult(node, [], f"no verdict over SSH: {done.describe()}", time.monotonic() - start)
        return ProbeResult(node, rows, None, time.monotonic() - start)

    return probe


# Checks whose failure stops Slurm from running anything on the node, as the fault of health.reach.
_BLOCKERS = (("host.munge", "munge"), ("host.slurmd", "slurmd"))


def reach_row(
    node: str,
    when: float,
    *,
    responding: bool,
    job_error: str | None = None,
    job_ran: bool = False,
    probe: ProbeResult | None = None,
) -> Row | None:
    """The node's ``health.reach`` row; None when nothing was tried and Slurm hears the node (a busy
    node judged on its stored verdict)."""
    if job_ran and job_error is None:
        return ok("checked", 1.0, "", "its sweep job ran").row(node, REACH_CHECK, "nightly", when)
    what = f"its sweep job failed: {job_error}" if job_error else "" if responding else "not responding to slurmctld"
    if probe is not None and probe.error is not None:
        return _unknown(node, when, "ssh", _join(what, f"no out-of-band check either: {probe.error}"))
    if probe is not None:
        for check, why in _BLOCKERS:
            bad = [r for r in probe.rows if r.check == check and r.status == Status.FAIL]
            if bad:
                return _unknown(node, when, why, _join(what, f"over SSH: {bad[0].evidence}"))
        if not responding:
            return _unknown(node, when, "slurmctld", _join(what, "answers over SSH, but Slurm does not hear it"))
        if job_error:
            return _unknown(node, when, "job", what)
        return ok("checked", 1.0, "", "checked over SSH").row(node, REACH_CHECK, "nightly", when)
    if job_error:
        return _unknown(node, when, "job", what)
    if not responding:
        return _unknown(node, when, "slurmctld", f"{what}; no out-of-band check allowed (health.ssh_probe)")
    return None


def _join(*parts: str) -> str:
    return "; ".join(p for p in parts if p)


def _unknown(node: str, when: float, why: str, evidence: str) -> Row:
    return unknown("checked", why, evidence).row(node, REACH_CHECK, "nightly", when)


def run_probes(nodes: Sequence[str], prober: Prober, parallel: int) -> dict[str, ProbeResult]:
    from concurrent.futures import ThreadPoolExecutor

    if not nodes:
        return {}
    with ThreadPoolExecutor(max_workers=max(1, min(parallel, len(nodes)))) as pool:
        return dict(zip(nodes, pool.map(prober, nodes), strict=True))
