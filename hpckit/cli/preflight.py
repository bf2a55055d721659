"""`hpckit preflight`: every host vs the blueprint, before a deploy."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.console import Console

from hpckit.blueprint import load_blueprint
from hpckit.cli.blueprint import site_option
from hpckit.deploy.targets import prepare_target
from hpckit.preflight.render import report_json, report_table, summary_line
from hpckit.preflight.run import PreflightOptions, preflight


@click.command("preflight")
@click.argument("blueprint", type=click.Path(dir_okay=False, path_type=Path))
@site_option
@click.option("--json", "as_json", is_flag=True, help="print every row as JSON")
@click.option("--all", "show_all", is_flag=True, help="also list the checks that match")
@click.option("--gpu-driver", default="", help="NVIDIA driver version every GPU must run (default: any)")
@click.option("--timeout", default=30.0, show_default=True, help="seconds per command")
@click.option("--workers", default=32, show_default=True, help="hosts probed at once")
def preflight_cmd(
    blueprint: Path,
    site_files: tuple[Path, ...],
    as_json: bool,
    show_all: bool,
    gpu_driver: str,
    timeout: float,
    workers: int,
) -> None:
    """Compare every host with the blueprint over SSH; exit 1 when a mismatch would block the deploy.

    A lab blueprint brings its lab up first (Slurm need not be deployed).
    """
    bp = load_blueprint(blueprint, site_files)
    target = prepare_target(bp)
    report = preflight(bp, target, PreflightOptions(gpu_driver=gpu_driver, workers=workers, timeout=timeout))
    if as_json:
        click.echo(report_json(report))
    else:
        console = Console()
        if report.grouped(include_ok=show_all):
            console.print(report_table(report, include_ok=show_all))
        console.print(summary_line(report), highlight=False)
    sys.exit(0 if report.ok else 1)


COMMANDS = [preflight_cmd]
