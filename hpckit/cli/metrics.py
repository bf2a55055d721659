"""`hpckit metrics`: Slurm's state for Prometheus, read with the Slurm commands of this host. Thin: the
collection, the text and the server live in hpckit.slurm.metrics; imports are lazy so that other commands
do not pay for http.server."""

from __future__ import annotations

import signal
from types import FrameType
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from hpckit.proc import Transport

# hpckit.slurm.metrics' DEFAULT_PORT and DEFAULT_CACHE_SECONDS, repeated so that `hpckit --help` does not
# import it (tests/test_slurm_metrics.py keeps them equal).
DEFAULT_PORT = 9341
DEFAULT_CACHE_SECONDS = 10.0

accounting_option = click.option(
    "--accounting/--no-accounting",
    default=False,
    show_default=True,
    help="also ask slurmdbd (sacctmgr) whether it answers: slurm_dbd_up",
)


def _transport() -> Transport:
    """Where the Slurm commands run: here (tests replace it)."""
    from hpckit.proc import LocalTransport

    return LocalTransport()


@click.group("metrics")
def metrics() -> None:
    """Slurm metrics for Prometheus: nodes, jobs, the scheduler, from sinfo, squeue and sdiag."""


@metrics.command("serve")
@click.option("--listen", default="0.0.0.0", show_default=True, help="address to listen on")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=DEFAULT_PORT,
    show_default=True,
    help="port to listen on (0: any free one, printed at start)",
)
@accounting_option
@click.option(
    "--cache-seconds",
    type=click.FloatRange(min=0),
    default=DEFAULT_CACHE_SECONDS,
    show_default=True,
    help="answer scrapes this soon after a collection from it, without running the commands again",
)
def serve_cmd(listen: str, port: int, accounting: bool, cache_seconds: float) -> None:
    """Answer Prometheus at http://LISTEN:PORT/metrics until stopped (SIGTERM or Ctrl-C: exit 0)."""
    from hpckit.slurm.client import SlurmClient
    from hpckit.slurm.metrics import make_server, scraper

    server = make_server(listen, port, scraper(SlurmClient(_transport()), accounting=accounting), cache_seconds)
    # systemd stops the service with SIGTERM: end as cleanly as with Ctrl-C, exit status 0.
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    host, bound = server.server_address[:2]
    click.echo(f"hpckit metrics: serving http://{host!s}:{bound}/metrics", err=True)
    with server:
        server.serve_forever()


def _stop(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)


@metrics.command("show")
@accounting_option
def show_cmd(accounting: bool) -> None:
    """Collect once and print the metrics as Prometheus would get them."""
    from hpckit.slurm.client import SlurmClient
    from hpckit.slurm.metrics import collect, render

    transport = _transport()
    try:
        click.echo(render(collect(SlurmClient(transport), accounting=accounting)), nl=False)
    finally:
        transport.close()


COMMANDS = [metrics]
