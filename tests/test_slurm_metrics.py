"""hpckit's Slurm exporter (hpckit.slurm.metrics, `hpckit metrics`): recorded sinfo, squeue and sdiag text
through a fake Transport, the exposition text, the HTTP server, the CLI. No Slurm, no root."""

from __future__ import annotations

import datetime as dt
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from email.message import Message
from pathlib import Path

import pytest
from click.testing import CliRunner

from hpckit.cli import cli
from hpckit.cli import metrics as cli_metrics
from hpckit.errors import HpckitError
from hpckit.proc import CommandNotFound, CommandTimedOut
from hpckit.slurm import metrics
from hpckit.slurm.client import SQUEUE_METRICS_FORMAT, SlurmClient
from hpckit.slurm.metrics import (
    CONTENT_TYPE,
    MetricsServer,
    Snapshot,
    collect,
    make_server,
    parse_sdiag,
    parse_squeue,
    render,
    scraper,
)
from hpckit.slurm.parsers import NodeState
from tests.fakes import FakeTransport, Reply, scripted

DATA = Path(__file__).resolve().parent / "data" / "slurm-metrics"
SINFO = (DATA / "sinfo-N-nodes-slurm22.05-handwritten.txt").read_text()
SQUEUE = (DATA / "squeue-metrics-slurm22.05-handwritten.txt").read_text()
SDIAG = (DATA / "sdiag-slurm22.05-handwritten.txt").read_text()
SDIAG_MOCK = (DATA / "sdiag-text-slurm17-era-modified-mock.txt").read_text()
# The recorded files' "now" (local time, as squeue prints it).
NOW = dt.datetime(2026, 11, 29, 6, 0, 0).timestamp()
# One sample line of the text format: name, optional {label="value",...}, a number.
SAMPLE = re.compile(r'^[a-z_]+(\{[a-z_]+="([^"\\\n]|\\[\\"n])*"(,[a-z_]+="([^"\\\n]|\\[\\"n])*")*\})? -?[0-9.e+-]+$')


def healthy(**overrides: list[Reply]) -> FakeTransport:
    """A cluster answering every command with the recorded text, but for `overrides`."""
    replies: dict[str, list[Reply]] = {
        "sinfo": [(0, SINFO, "")],
        "squeue": [(0, SQUEUE, "")],
        "sdiag": [(0, SDIAG, "")],
        "sacctmgr": [(0, "labci\n", "")],
    }
    replies.update(overrides)
    return scripted(replies)


def collected(transport: FakeTransport, accounting: bool = False) -> Snapshot:
    return collect(SlurmClient(transport), accounting=accounting, now=NOW)


def samples(text: str) -> dict[str, float]:
    """{'name{labels}': value} of every sample line."""
    out = {}
    for line in text.splitlines():
        if not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


def names(text: str) -> set[str]:
    return {re.split(r"[{ ]", line, maxsplit=1)[0] for line in text.splitlines() if not line.startswith("#")}


# ---------------------------------------------------------------- parsers


def test_squeue_jobs_states_reasons_and_submit_times() -> None:
    jobs = parse_squeue(SQUEUE)
    assert len(jobs) == 11
    assert {j.job_id for j in jobs if j.state == "pending"} == {
        "1202_3",
        "1202_4",
        "1210",
        "1211",
        "1212",
        "1213",
        "1215",
    }
    by_id = {j.job_id: j for j in jobs}
    # The node list slurmctld appends to the reason is left out (a series per node list otherwise).
    assert by_id["1213"].reason == "ReqNodeNotAvail"
    assert by_id["1214"].state == "completing" and by_id["1201"].reason == "None"
    assert by_id["1210"].submitted == dt.datetime(2026, 11, 29, 5, 12, 44).timestamp()


def test_squeue_reason_is_last_and_may_hold_the_separator() -> None:
    (job,) = parse_squeue('7|PENDING|N/A|held by "ops" | see ticket\n')
    assert job.reason == 'held by "ops" | see ticket' and job.submitted is None


def test_squeue_format_is_what_the_parser_reads() -> None:
    assert SQUEUE_METRICS_FORMAT.count("|") == 3 and SQUEUE_METRICS_FORMAT.endswith("%r")


@pytest.mark.parametrize("text", [SDIAG, SDIAG_MOCK], ids=["slurm22.05-tabs", "mock-spaces"])
def test_sdiag_fields_indented_with_tabs_or_spaces(text: str) -> None:
    values, missing = parse_sdiag(text)
    assert missing == []
    assert set(values) == set(metrics.SDIAG_FIELDS)


def test_sdiag_values_from_the_right_block() -> None:
    """ "Last cycle" and "Mean cycle" are fields of the main and the backfill block alike."""
    values, _ = parse_sdiag(SDIAG)
    assert values == {
        "slurm_scheduler_last_cycle_seconds": 0.001184,
        "slurm_scheduler_mean_cycle_seconds": 0.000902,
        "slurm_backfill_last_cycle_seconds": 0.005521,
        "slurm_server_threads": 4,
        "slurm_agent_queue_size": 2,
        "slurm_dbd_agent_queue_size": 7,
    }
    mock, _ = parse_sdiag(SDIAG_MOCK)
    assert mock["slurm_scheduler_last_cycle_seconds"] == 0.097209
    assert mock["slurm_backfill_last_cycle_seconds"] == 1.94289
    assert mock["slurm_server_threads"] == 3


def test_sdiag_of_a_fresh_controller_has_no_mean_and_that_is_no_error() -> None:
    text = SDIAG.replace("\tTotal cycles: 1432\n\tMean cycle:   902\n", "\tTotal cycles: 0\n")
    values, missing = parse_sdiag(text)
    assert missing == [] and "slurm_scheduler_mean_cycle_seconds" not in values


def test_sdiag_backfill_warning_header_mid_cycle() -> None:
    text = SDIAG.replace(
        "Backfilling stats\n", "Backfilling stats (WARNING: data obtained in the middle of backfilling execution.)\n"
    )
    values, _ = parse_sdiag(text)
    assert values["slurm_backfill_last_cycle_seconds"] == 0.005521


# ---------------------------------------------------------------- collection and text


def test_nodes_once_each_with_their_states() -> None:
    text = render(collected(healthy()))
    got = samples(text)
    # Every gpu node is listed twice by sinfo -N (two partitions): one sample each.
    assert len([k for k in got if k.startswith("slurm_node_up{")]) == 11
    assert got['slurm_node_up{node="gpu-a01"}'] == 1
    assert got['slurm_node_up{node="gpu-a04"}'] == 0  # idle*: not responding
    assert got['slurm_node_up{node="gpu-a05"}'] == 0  # down*
    assert got['slurm_node_up{node="gpu-a08"}'] == 0  # drained*: not responding either
    assert got['slurm_node_up{node="gpu-a06"}'] == 1  # drained, but there
    assert got['slurm_node_up{node="cpu-02"}'] == 1  # idle~: powered off, by design
    assert {k: v for k, v in got.items() if k.startswith("slurm_nodes{")} == {
        'slurm_nodes{state="allocated"}': 1,
        'slurm_nodes{state="completing"}': 1,
        'slurm_nodes{state="down"}': 1,
        'slurm_nodes{state="drained"}': 2,
        'slurm_nodes{state="draining"}': 1,
        'slurm_nodes{state="idle"}': 4,
        'slurm_nodes{state="mixed"}': 1,
    }


def test_drained_nodes_and_those_hpckit_drained() -> None:
    lines = render(collected(healthy())).splitlines()
    assert [line for line in lines if line.startswith("slurm_node_drain{")] == [
        'slurm_node_drain{node="gpu-a06",reason="hpckit:munge-down:host.munge"} 1',
        'slurm_node_drain{node="gpu-a07",reason="hpckit:gpu-ecc:gpu.ecc"} 1',
        'slurm_node_drain{node="gpu-a08",reason="bad dimm \\"B3\\" | ticket 4711"} 1',
    ]
    assert [line for line in lines if line.startswith("slurm_node_drained_by_hpckit{")] == [
        'slurm_node_drained_by_hpckit{node="gpu-a06",reason="hpckit:munge-down:host.munge"} 1',
        'slurm_node_drained_by_hpckit{node="gpu-a07",reason="hpckit:gpu-ecc:gpu.ecc"} 1',
    ]


def test_label_values_escaped() -> None:
    node = NodeState("n1", "drained", "", 'a \\ b "c" | d\ne')
    snapshot = Snapshot(NOW, 0.1, (node,), None, {}, None, {"sinfo": 0})
    text = render(snapshot)
    assert 'slurm_node_drain{node="n1",reason="a \\\\ b \\"c\\" | d\\ne"} 1' in text.splitlines()
    assert all(SAMPLE.match(line) for line in text.splitlines() if not line.startswith("#"))


def test_jobs_per_state_and_pending_reason_with_oldest_age() -> None:
    got = samples(render(collected(healthy())))
    assert {k: v for k, v in got.items() if k.startswith("slurm_jobs{")} == {
        'slurm_jobs{state="completing"}': 1,
        'slurm_jobs{state="pending"}': 7,
        'slurm_jobs{state="running"}': 3,
    }
    assert {k: v for k, v in got.items() if k.startswith("slurm_jobs_pending{")} == {
        'slurm_jobs_pending{reason="Dependency"}': 1,
        'slurm_jobs_pending{reason="JobArrayTaskLimit"}': 2,
        'slurm_jobs_pending{reason="Priority"}': 2,
        'slurm_jobs_pending{reason="ReqNodeNotAvail"}': 1,
        'slurm_jobs_pending{reason="Resources"}': 1,
    }
    assert {k: v for k, v in got.items() if k.startswith("slurm_job_pending_oldest_seconds{")} == {
        'slurm_job_pending_oldest_seconds{reason="Dependency"}': 300,
        'slurm_job_pending_oldest_seconds{reason="JobArrayTaskLimit"}': 3000,
        'slurm_job_pending_oldest_seconds{reason="Priority"}': 2398,  # 05:20:02, not 05:40:12
        'slurm_job_pending_oldest_seconds{reason="ReqNodeNotAvail"}': 4200,
        'slurm_job_pending_oldest_seconds{reason="Resources"}': 2836,
    }


def test_empty_queue_still_says_pending_and_running() -> None:
    got = samples(render(collected(healthy(squeue=[(0, "", "")]))))
    assert got['slurm_jobs{state="pending"}'] == 0 and got['slurm_jobs{state="running"}'] == 0
    assert not any(k.startswith("slurm_jobs_pending") for k in got)


def test_the_commands_run() -> None:
    transport = healthy()
    collected(transport, accounting=True)
    assert transport.calls == [
        ("sinfo", "-h", "-N", "-o", "%N|%T|%E"),
        ("squeue", "-h", "-a", "-r", "-o", "%i|%T|%V|%r"),
        ("sdiag",),
        ("sacctmgr", "-n", "-P", "show", "cluster", "format=cluster"),
    ]


def test_everything_answering() -> None:
    text = render(collected(healthy(), accounting=True))
    got = samples(text)
    assert got["slurm_up"] == 1 and got["slurm_dbd_up"] == 1
    assert got["slurm_scheduler_last_cycle_seconds"] == 0.001184
    assert got["slurm_dbd_agent_queue_size"] == 7
    assert {k: v for k, v in got.items() if k.startswith("slurm_exporter_errors")} == {
        'slurm_exporter_errors{command="sacctmgr"}': 0,
        'slurm_exporter_errors{command="sdiag"}': 0,
        'slurm_exporter_errors{command="sinfo"}': 0,
        'slurm_exporter_errors{command="squeue"}': 0,
    }
    assert got["slurm_exporter_scrape_duration_seconds"] >= 0
    assert text.splitlines()[:3] == [
        "# HELP slurm_up 1 when slurmctld answered sinfo, else 0.",
        "# TYPE slurm_up gauge",
        "slurm_up 1",
    ]
    assert all(SAMPLE.match(line) for line in text.splitlines() if not line.startswith("#"))


def test_controller_unreachable() -> None:
    down = "sinfo: error: Unable to contact slurm controller (connect failure)\n"
    transport = healthy(sinfo=[(1, "", down)])
    text = render(collected(transport, accounting=True))
    got = samples(text)
    assert got["slurm_up"] == 0 and got['slurm_exporter_errors{command="sinfo"}'] == 1
    # No node, job or scheduler metric; squeue and sdiag not even run (each would wait on the controller).
    assert names(text) == {
        "slurm_up",
        "slurm_dbd_up",
        "slurm_exporter_scrape_duration_seconds",
        "slurm_exporter_errors",
    }
    assert [c[0] for c in transport.calls] == ["sinfo", "sacctmgr"]


def test_sinfo_missing_or_hanging_counts_as_down() -> None:
    def missing() -> Reply:
        raise CommandNotFound("sinfo: command not found on login")

    def hanging() -> Reply:
        raise CommandTimedOut("`sinfo` on login did not finish in 20.0 s")

    for answer in (missing, hanging):
        got = samples(render(collect(SlurmClient(scripted({"sinfo": [answer]})), now=NOW)))
        assert got == {
            "slurm_up": 0,
            'slurm_exporter_errors{command="sinfo"}': 1,
            "slurm_exporter_scrape_duration_seconds": got["slurm_exporter_scrape_duration_seconds"],
        }


def test_sdiag_failing_leaves_the_rest() -> None:
    text = render(collected(healthy(sdiag=[(1, "", "sdiag: error: slurm_get_statistics: Access/permission denied")])))
    got = samples(text)
    assert got["slurm_up"] == 1 and got['slurm_exporter_errors{command="sdiag"}'] == 1
    assert got['slurm_jobs{state="pending"}'] == 7 and got['slurm_node_up{node="gpu-a01"}'] == 1
    assert not names(text) & set(metrics.SDIAG_FIELDS)


def test_sdiag_missing_a_field_keeps_the_others_and_counts_an_error() -> None:
    text = SDIAG.replace("DBD Agent queue size: 7\n", "")
    got = samples(render(collected(healthy(sdiag=[(0, text, "")]))))
    assert "slurm_dbd_agent_queue_size" not in got
    assert got["slurm_agent_queue_size"] == 2 and got['slurm_exporter_errors{command="sdiag"}'] == 1


def test_squeue_failing_leaves_the_nodes() -> None:
    text = render(collected(healthy(squeue=[(1, "", "squeue: error: Invalid user")])))
    got = samples(text)
    assert got['slurm_exporter_errors{command="squeue"}'] == 1 and got['slurm_node_up{node="gpu-a03"}'] == 1
    assert not names(text) & {"slurm_jobs", "slurm_jobs_pending", "slurm_job_pending_oldest_seconds"}


def test_accounting_checked_only_when_asked() -> None:
    assert "slurm_dbd_up" not in samples(render(collected(healthy())))
    refused = "sacctmgr: error: Problem talking to the database: Connection refused\n"
    got = samples(render(collected(healthy(sacctmgr=[(1, "", refused)]), accounting=True)))
    assert got["slurm_dbd_up"] == 0 and got['slurm_exporter_errors{command="sacctmgr"}'] == 1
    assert got["slurm_up"] == 1


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian's prometheus package) not installed")
@pytest.mark.parametrize("accounting", [True, False])
def test_promtool_accepts_the_text(accounting: bool) -> None:
    text = render(collected(healthy(), accounting=accounting))
    done = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr  # 3: lint complaints; 1: text it cannot read


# ---------------------------------------------------------------- HTTP


@pytest.fixture
def served() -> Iterator[tuple[str, FakeTransport, MetricsServer]]:
    """The exporter over the recorded cluster on 127.0.0.1 (a free port), serving in a thread."""
    transport = healthy()
    server = make_server("127.0.0.1", 0, scraper(SlurmClient(transport)), cache_seconds=60)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    host, port = server.server_address[:2]
    try:
        yield f"http://{host!s}:{port}", transport, server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def get(url: str) -> tuple[int, Message, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as reply:
            return reply.status, reply.headers, reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, exc.read().decode()


def test_http_scrape_index_and_404(
    served: tuple[str, FakeTransport, MetricsServer], capsys: pytest.CaptureFixture[str]
) -> None:
    url, _, _ = served
    status, headers, body = get(f"{url}/metrics")
    assert status == 200 and headers["Content-Type"] == CONTENT_TYPE
    lines = body.splitlines()
    assert lines[:3] == [
        "# HELP slurm_up 1 when slurmctld answered sinfo, else 0.",
        "# TYPE slurm_up gauge",
        "slurm_up 1",
    ]
    assert 'slurm_node_up{node="gpu-a04"} 0' in lines and 'slurm_jobs{state="pending"} 7' in lines
    assert all(SAMPLE.match(line) for line in lines if not line.startswith("#"))
    status, headers, body = get(f"{url}/")
    assert status == 200 and "/metrics" in body
    assert capsys.readouterr().err == ""  # answered requests are not logged
    status, _, _ = get(f"{url}/nope")
    assert status == 404 and '"GET /nope HTTP/1.1" 404' in capsys.readouterr().err


def test_http_scrapes_within_the_cache_time_collect_once(served: tuple[str, FakeTransport, MetricsServer]) -> None:
    url, transport, _ = served
    first, second = get(f"{url}/metrics"), get(f"{url}/metrics")
    assert first[0] == second[0] == 200 and first[2] == second[2]
    assert [c[0] for c in transport.calls] == ["sinfo", "squeue", "sdiag"]


def test_concurrent_scrapes_collect_once() -> None:
    runs: list[float] = []

    def slow() -> str:
        runs.append(time.monotonic())
        time.sleep(0.3)
        return "slurm_up 1\n"

    server = make_server("127.0.0.1", 0, slow, cache_seconds=60)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    host, port = server.server_address[:2]
    try:
        bodies: list[str] = []
        clients = [
            threading.Thread(target=lambda: bodies.append(get(f"http://{host!s}:{port}/metrics")[2])) for _ in range(4)
        ]
        for c in clients:
            c.start()
        for c in clients:
            c.join(10)
    finally:
        server.shutdown()
        server.server_close()
    assert bodies == ["slurm_up 1\n"] * 4 and len(runs) == 1


def test_cache_expires() -> None:
    clock = [0.0]
    calls: list[int] = []

    def collector() -> str:
        calls.append(1)
        return f"slurm_up {len(calls)}\n"

    cache = metrics.MetricsCache(collector, 10, clock=lambda: clock[0])
    assert cache.text() == cache.text() == "slurm_up 1\n"
    clock[0] = 10.0
    assert cache.text() == "slurm_up 2\n"
    assert metrics.MetricsCache(collector, 0).text() == "slurm_up 3\n"


def test_controller_unreachable_still_answers_200() -> None:
    transport = healthy(sinfo=[(1, "", "sinfo: error: Unable to contact slurm controller (connect failure)\n")])
    server = make_server("127.0.0.1", 0, scraper(SlurmClient(transport)), cache_seconds=0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    host, port = server.server_address[:2]
    try:
        status, _, body = get(f"http://{host!s}:{port}/metrics")
    finally:
        server.shutdown()
        server.server_close()
    assert status == 200 and "slurm_up 0" in body.splitlines()


def test_port_taken_is_hpckits_error() -> None:
    with make_server("127.0.0.1", 0, lambda: "", 1) as first:
        port = first.server_address[1]
        with pytest.raises(HpckitError, match=r"cannot listen on 127\.0\.0\.1"):
            make_server("127.0.0.1", port, lambda: "", 1)


# ---------------------------------------------------------------- CLI


def test_cli_show(monkeypatch: pytest.MonkeyPatch) -> None:
    transport = healthy()
    monkeypatch.setattr(cli_metrics, "_transport", lambda: transport)
    result = CliRunner().invoke(cli, ["metrics", "show", "--accounting"])
    assert result.exit_code == 0, result.output
    got = samples(result.output)
    assert got["slurm_up"] == 1 and got["slurm_dbd_up"] == 1 and got['slurm_node_up{node="gpu-a05"}'] == 0
    assert transport.calls[-1][0] == "sacctmgr"


def test_cli_show_without_accounting_and_controller_down(monkeypatch: pytest.MonkeyPatch) -> None:
    transport = healthy(sinfo=[(1, "", "sinfo: error: Unable to contact slurm controller\n")])
    monkeypatch.setattr(cli_metrics, "_transport", lambda: transport)
    result = CliRunner().invoke(cli, ["metrics", "show"])
    assert result.exit_code == 0 and "slurm_up 0" in result.output.splitlines()
    assert "slurm_dbd_up" not in result.output


@pytest.mark.parametrize("port", ["70000", "-1", "http"])
def test_cli_bad_port_is_a_usage_error(port: str) -> None:
    result = CliRunner().invoke(cli, ["metrics", "serve", "--port", port])
    assert result.exit_code == 2 and "--port" in result.output


def test_cli_defaults_are_the_modules() -> None:
    assert cli_metrics.DEFAULT_PORT == metrics.DEFAULT_PORT == 9341
    assert cli_metrics.DEFAULT_CACHE_SECONDS == metrics.DEFAULT_CACHE_SECONDS


def test_cli_serve_ends_cleanly_on_sigterm() -> None:
    """`hpckit metrics serve` as systemd runs it: serving until SIGTERM, then exit 0. Only / is asked for, so
    that no Slurm command runs."""
    cmd = [sys.executable, "-m", "hpckit", "metrics", "serve", "--listen", "127.0.0.1", "--port", "0"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        match = re.search(r"serving (http://127\.0\.0\.1:\d+)/metrics", line)
        assert match, line
        status, _, body = get(f"{match.group(1)}/")
        assert status == 200 and "/metrics" in body
        proc.terminate()
        _, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "Traceback" not in err
