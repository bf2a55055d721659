"""Slurm's state as Prometheus metrics, read with the Slurm commands (sinfo, squeue, sdiag, sacctmgr) on a
cluster host: collection, the text exposition format (0.0.4), and a small HTTP server for Prometheus to scrape.

The pieces are pure where they can be: `collect` runs the commands through a SlurmClient (a fake Transport in
tests) into a Snapshot, the parsers read recorded text, `render` writes the exposition text. Alert rules
elsewhere depend on the metric names: keep them.

Names follow Prometheus' conventions (`promtool check metrics` has nothing to say): sdiag's cycles, which it
counts in microseconds, are given in seconds.
"""

from __future__ import annotations

import datetime as dt
import logging
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TypeVar
from urllib.parse import urlsplit

from hpckit.errors import HpckitError
from hpckit.proc import CommandResult
from hpckit.slurm.client import SlurmClient, SlurmCommandError
from hpckit.slurm.parsers import NodeState, SlurmParseError, parse_sinfo_nodes

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
DEFAULT_PORT = 9341
DEFAULT_CACHE_SECONDS = 10.0
# Each command's limit: a controller that does not answer makes sinfo retry for a while; a scrape must end.
DEFAULT_TIMEOUT_S = 20.0

# Base states (sinfo's %T, flags stripped, lower case) that take a node out. A "+"-joined state
# ("mixed+drain") counts when any of its parts does.
DOWN_STATES = frozenset({"down", "fail", "failing"})
DRAIN_STATES = frozenset({"drain", "drained", "draining"})
# hpckit's health checks drain with reasons of this prefix (hpckit:CHECK:...).
HPCKIT_REASON_PREFIX = "hpckit:"
SUBMIT_TIME = "%Y-%m-%dT%H:%M:%S"  # squeue's %V

T = TypeVar("T")


@dataclass(frozen=True)
class Job:
    job_id: str
    state: str  # lower case: pending, running, completing, ...
    submitted: float | None  # epoch seconds; None when squeue printed no time
    reason: str  # the reason's code (see _reason_code)


@dataclass(frozen=True)
class Snapshot:
    """One collection. `nodes` is None when sinfo failed (the controller is unreachable: slurm_up 0), `jobs`
    when squeue did; `sdiag` holds the metrics read from sdiag (by metric name); `dbd_up` is None when
    accounting was not checked. `errors`: for each command run, 1 when it failed, 0 when it did not."""

    now: float
    duration: float
    nodes: tuple[NodeState, ...] | None
    jobs: tuple[Job, ...] | None
    sdiag: Mapping[str, float]
    dbd_up: bool | None
    errors: Mapping[str, int]

    @property
    def up(self) -> bool:
        return self.errors.get("sinfo") == 0


# ---------------------------------------------------------------- parsers


def parse_squeue(text: str) -> list[Job]:
    """``squeue -h -o '%i|%T|%V|%r'`` (SQUEUE_METRICS_FORMAT); %V read as this machine's local time."""
    jobs = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split("|", 3)
        if len(parts) != 4:
            raise SlurmParseError(f"squeue output line {lineno}: expected ID|STATE|SUBMIT|REASON, got {line!r}")
        job_id, state, submit, reason = (p.strip() for p in parts)
        jobs.append(Job(job_id, state.lower(), _submit_time(submit), _reason_code(reason)))
    return jobs


def _submit_time(text: str) -> float | None:
    try:
        # A naive time: .timestamp() takes it as local time, as squeue printed it.
        return dt.datetime.strptime(text, SUBMIT_TIME).timestamp()
    except ValueError:
        return None  # N/A, Unknown


def _reason_code(reason: str) -> str:
    """The reason without the details slurmctld appends ("ReqNodeNotAvail, UnavailableNodes:gpu[1-4]"): a
    label value per node list would make a new series each time the list changes."""
    return reason.split(",", 1)[0].strip() or "None"


# metric name -> (sdiag block, field). Block "" is the one of unindented fields, "main" the main scheduler's,
# "backfill" the backfill scheduler's: "Last cycle" is a field of both.
SDIAG_FIELDS = {
    "slurm_scheduler_last_cycle_seconds": ("main", "Last cycle"),
    "slurm_scheduler_mean_cycle_seconds": ("main", "Mean cycle"),
    "slurm_backfill_last_cycle_seconds": ("backfill", "Last cycle"),
    "slurm_server_threads": ("", "Server thread count"),
    "slurm_agent_queue_size": ("", "Agent queue size"),
    "slurm_dbd_agent_queue_size": ("", "DBD Agent queue size"),
}
# Missing without being an error: the backfill cycle (it matters only with SchedulerType=sched/backfill), and
# the main scheduler's mean before its first cycle (see _sdiag_missing).
SDIAG_OPTIONAL = frozenset({"slurm_backfill_last_cycle_seconds"})


def sdiag_fields(text: str) -> dict[tuple[str, str], str]:
    """sdiag's text as {(block, field): value}. Real sdiag indents a block's fields with a tab, some copies
    with spaces: any leading blank means "in the block above". The first value of a field wins."""
    fields: dict[tuple[str, str], str] = {}
    block = ""
    for line in text.splitlines():
        if not line.strip():
            continue
        key, sep, value = line.strip().partition(":")
        if line[0] not in " \t":
            if line.startswith("Main schedule statistics"):
                block = "main"
                continue
            if line.startswith("Backfilling stats"):  # "(WARNING: ...)" may follow, in mid-cycle
                block = "backfill"
                continue
            if not (sep and value.strip()):
                block = line.strip()  # a block hpckit does not read (RPC statistics, exits ...)
                continue
            block = ""
        if sep:
            fields.setdefault((block, key.strip()), value.strip())
    return fields


def parse_sdiag(text: str) -> tuple[dict[str, float], list[str]]:
    """The SDIAG_FIELDS metrics sdiag's text has, and the names of those it should have had but lacks."""
    fields = sdiag_fields(text)
    values: dict[str, float] = {}
    for name, where in SDIAG_FIELDS.items():
        raw = fields.get(where, "").split()
        if raw and raw[0].isdigit():
            # sdiag counts cycles in microseconds
            values[name] = int(raw[0]) / 1e6 if name.endswith("_seconds") else int(raw[0])
    return values, _sdiag_missing(values, fields)


def _sdiag_missing(values: Mapping[str, float], fields: Mapping[tuple[str, str], str]) -> list[str]:
    missing = [name for name in SDIAG_FIELDS if name not in values and name not in SDIAG_OPTIONAL]
    # sdiag prints the mean only once there was a cycle (a freshly started slurmctld has none).
    if fields.get(("main", "Total cycles"), "").strip() == "0":
        missing = [name for name in missing if name != "slurm_scheduler_mean_cycle_seconds"]
    return missing


# ---------------------------------------------------------------- collection


def collect(
    client: SlurmClient,
    *,
    accounting: bool = False,
    now: float | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
    clock: Callable[[], float] = time.monotonic,
) -> Snapshot:
    """Run the commands and read them. A command that fails leaves its metrics out and counts in `errors`;
    when sinfo fails the controller is taken as unreachable and squeue and sdiag are not run (each would
    wait for its own timeout). `now` (epoch seconds, default: the clock's) dates the pending jobs' ages."""
    started = clock()
    now = time.time() if now is None else now
    errors: dict[str, int] = {}
    nodes = _attempt(errors, "sinfo", lambda: tuple(parse_sinfo_nodes(_stdout(client.sinfo_nodes(timeout)))))
    jobs = None
    sdiag: dict[str, float] = {}
    if nodes is not None:
        jobs = _attempt(errors, "squeue", lambda: tuple(parse_squeue(_stdout(client.squeue_all(timeout)))))
        sdiag = _read_sdiag(client, errors, timeout)
    dbd_up = _dbd_up(client, errors, timeout) if accounting else None
    return Snapshot(now, clock() - started, nodes, jobs, sdiag, dbd_up, errors)


def _attempt(errors: dict[str, int], command: str, read: Callable[[], T]) -> T | None:
    """What `read` returns, and `command` counted as ran fine; None and counted as failed when it raises
    hpckit's error (the command failed, could not run, timed out, or printed what cannot be read)."""
    try:
        value = read()
    except HpckitError as exc:
        log.warning("%s: %s", command, exc)
        errors[command] = 1
        return None
    errors[command] = 0
    return value


def _stdout(result: CommandResult) -> str:
    if not result.ok:
        raise SlurmCommandError(result)
    return result.stdout


def _read_sdiag(client: SlurmClient, errors: dict[str, int], timeout: float) -> dict[str, float]:
    """sdiag's metrics. A field missing leaves the others in, and counts sdiag as failed."""
    read = _attempt(errors, "sdiag", lambda: parse_sdiag(_stdout(client.sdiag(timeout))))
    if read is None:
        return {}
    values, missing = read
    if missing:
        log.warning("sdiag: printed no value for %s", ", ".join(missing))
        errors["sdiag"] = 1
    return values


def _dbd_up(client: SlurmClient, errors: dict[str, int], timeout: float) -> bool:
    """Whether slurmdbd answers sacctmgr (what it prints does not matter)."""
    return _attempt(errors, "sacctmgr", lambda: _stdout(client.clusters(timeout))) is not None


def scraper(client: SlurmClient, *, accounting: bool = False, timeout: float = DEFAULT_TIMEOUT_S) -> Callable[[], str]:
    """A collector for serve(): each call collects now and renders the text."""

    def scrape() -> str:
        return render(collect(client, accounting=accounting, timeout=timeout))

    return scrape


# ---------------------------------------------------------------- rendering

Sample = tuple[Mapping[str, str], float]


def escape_label(value: str) -> str:
    """A label value as the text format quotes it."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def family(name: str, help_text: str, samples: Iterable[Sample]) -> list[str]:
    """A gauge's lines: HELP, TYPE and one line per sample; nothing when there is no sample."""
    rows = []
    for labels, value in samples:
        inner = ",".join(f'{key}="{escape_label(text)}"' for key, text in labels.items())
        rows.append(f"{name}{{{inner}}} {_number(value)}" if inner else f"{name} {_number(value)}")
    if not rows:
        return []
    help_line = help_text.replace("\\", "\\\\").replace("\n", "\\n")
    return [f"# HELP {name} {help_line}", f"# TYPE {name} gauge", *rows]


def render(snapshot: Snapshot) -> str:
    """The exposition text (format 0.0.4) of a collection."""
    lines = family("slurm_up", "1 when slurmctld answered sinfo, else 0.", [({}, int(snapshot.up))])
    if snapshot.nodes is not None:
        lines += _node_lines(sorted(snapshot.nodes, key=lambda n: n.name))
    if snapshot.jobs is not None:
        lines += _job_lines(snapshot.jobs, snapshot.now)
    lines += _sdiag_lines(snapshot.sdiag)
    if snapshot.dbd_up is not None:
        lines += family("slurm_dbd_up", "1 when slurmdbd answered sacctmgr, else 0.", [({}, int(snapshot.dbd_up))])
    lines += family(
        "slurm_exporter_scrape_duration_seconds",
        "How long this collection took.",
        [({}, round(snapshot.duration, 6))],
    )
    lines += family(
        "slurm_exporter_errors",
        "1 when the command failed in this collection, 0 when it ran fine.",
        [({"command": c}, n) for c, n in sorted(snapshot.errors.items())],
    )
    return "\n".join(lines) + "\n"


def node_up(node: NodeState) -> bool:
    return node.responding and not set(node.state.split("+")) & DOWN_STATES


def node_draining(node: NodeState) -> bool:
    return bool(set(node.state.split("+")) & DRAIN_STATES)


def _node_lines(nodes: list[NodeState]) -> list[str]:
    drained = [n for n in nodes if node_draining(n)]
    by_hpckit = [n for n in drained if n.reason.startswith(HPCKIT_REASON_PREFIX)]
    states = Counter(n.state for n in nodes)
    return [
        *family(
            "slurm_node_up",
            "0 when the node is down, failing or not responding, else 1.",
            [({"node": n.name}, int(node_up(n))) for n in nodes],
        ),
        *family(
            "slurm_node_drain",
            "1 for a node drained or draining, with its reason.",
            [({"node": n.name, "reason": n.reason}, 1) for n in drained],
        ),
        *family(
            "slurm_node_drained_by_hpckit",
            "1 for a node drained or draining by hpckit's health checks (reason hpckit:...).",
            [({"node": n.name, "reason": n.reason}, 1) for n in by_hpckit],
        ),
        *family(
            "slurm_nodes",
            "Nodes per state (sinfo's state, flags left out).",
            [({"state": s}, count) for s, count in sorted(states.items())],
        ),
    ]


def _job_lines(jobs: Iterable[Job], now: float) -> list[str]:
    states: Counter[str] = Counter({"pending": 0, "running": 0})
    waiting: Counter[str] = Counter()
    oldest: dict[str, float] = {}
    for job in jobs:
        states[job.state] += 1
        if job.state != "pending":
            continue
        waiting[job.reason] += 1
        if job.submitted is not None:
            oldest[job.reason] = max(oldest.get(job.reason, 0.0), now - job.submitted)
    return [
        *family("slurm_jobs", "Jobs per state.", [({"state": s}, n) for s, n in sorted(states.items())]),
        *family(
            "slurm_jobs_pending",
            "Pending jobs per reason they wait for.",
            [({"reason": r}, n) for r, n in sorted(waiting.items())],
        ),
        *family(
            "slurm_job_pending_oldest_seconds",
            "Seconds since the oldest pending job of each reason was submitted.",
            [({"reason": r}, round(age)) for r, age in sorted(oldest.items())],
        ),
    ]


SDIAG_HELP = {
    "slurm_scheduler_last_cycle_seconds": "The main scheduler's last cycle, in seconds (sdiag).",
    "slurm_scheduler_mean_cycle_seconds": "The main scheduler's mean cycle, in seconds (sdiag).",
    "slurm_backfill_last_cycle_seconds": "The backfill scheduler's last cycle, in seconds (sdiag).",
    "slurm_server_threads": "slurmctld's server threads (sdiag).",
    "slurm_agent_queue_size": "RPCs queued by slurmctld's agent for the nodes (sdiag).",
    "slurm_dbd_agent_queue_size": "Messages queued for slurmdbd (sdiag); grows while slurmdbd is away.",
}


def _sdiag_lines(values: Mapping[str, float]) -> list[str]:
    lines = []
    for name in SDIAG_FIELDS:
        if name in values:
            lines += family(name, SDIAG_HELP[name], [({}, values[name])])
    return lines


# ---------------------------------------------------------------- HTTP


class MetricsCache:
    """The collector's text, kept for `cache_seconds`: several Prometheus servers scraping do not multiply the
    RPCs slurmctld answers. Scrapes that come while one collects wait for its text instead of collecting too."""

    def __init__(
        self, collector: Callable[[], str], cache_seconds: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.collector = collector
        self.cache_seconds = cache_seconds
        self.clock = clock
        self._lock = threading.Lock()
        self._text: str | None = None
        self._at = 0.0

    def text(self) -> str:
        with self._lock:
            started = self.clock()
            if self._text is None or started - self._at >= self.cache_seconds:
                self._text = self.collector()
                self._at = started  # the data's age counts from when its collection began
            return self._text


class MetricsServer(ThreadingHTTPServer):
    daemon_threads = True  # a scrape still hanging never holds up the exit

    def __init__(self, address: tuple[str, int], cache: MetricsCache) -> None:
        self.cache = cache
        if ":" in address[0]:  # an IPv6 address ("::" listens on both families where the system allows)
            self.address_family = socket.AF_INET6
        super().__init__(address, MetricsHandler)


INDEX = "hpckit Slurm metrics exporter: the metrics are at /metrics\n"


class MetricsHandler(BaseHTTPRequestHandler):
    server_version = "hpckit-metrics"
    timeout = 30  # a client that stops talking frees its thread

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        if path == "/metrics":
            assert isinstance(self.server, MetricsServer)
            try:
                body = self.server.cache.text()
            except Exception as exc:  # a bug in collecting: answer 500, keep serving
                log.exception("collecting failed")
                self._reply(HTTPStatus.INTERNAL_SERVER_ERROR, f"collecting failed: {exc}\n", "text/plain")
                return
            self._reply(HTTPStatus.OK, body, CONTENT_TYPE)
        elif path == "/":
            self._reply(HTTPStatus.OK, INDEX, "text/plain; charset=utf-8")
        else:
            self._reply(HTTPStatus.NOT_FOUND, "not found: try /metrics\n", "text/plain; charset=utf-8")

    def _reply(self, status: HTTPStatus, body: str, content_type: str) -> None:
        data = body.encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        """Quiet for answered scrapes: a line per scrape would fill the journal; errors are still logged."""
        if str(code).isdigit() and int(code) < 400:
            return
        super().log_request(code, size)


def make_server(
    address: str, port: int, collector: Callable[[], str], cache_seconds: float = DEFAULT_CACHE_SECONDS
) -> MetricsServer:
    """A server bound to `address`:`port` (0: any free port; `server.server_address` says which), not yet
    serving: call its serve_forever(), shutdown() from another thread, server_close() at the end."""
    try:
        return MetricsServer((address, port), MetricsCache(collector, cache_seconds))
    except OSError as exc:
        raise HpckitError(f"cannot listen on {address}:{port}: {exc.strerror or exc}") from None


def serve(address: str, port: int, collector: Callable[[], str], cache_seconds: float = DEFAULT_CACHE_SECONDS) -> None:
    """Answer scrapes until the process is stopped (a signal handler raising SystemExit ends it)."""
    with make_server(address, port, collector, cache_seconds) as server:
        server.serve_forever()
