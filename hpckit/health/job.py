"""`hpckit health job`: what the nightly sweep runs on each node it checks.

The nightly tier on this node, its rows printed as one JSON line for the sweep to collect; nothing is
judged, drained or stored here (the sweep does that for the whole fleet at once). The sweep starts one
of these per node, so its start-up is paid once per node per run: this module imports the checks and
what they need, and none of the CLI, the store, the policy engine or the Slurm client.
`python -m hpckit.health job` reaches it without loading click.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from hpckit.errors import HpckitError
from hpckit.health.config import load_config
from hpckit.health.probe import LocalProbe
from hpckit.health.runner import RunOptions, check_here

if TYPE_CHECKING:
    from hpckit.health.config import NodeConfig
    from hpckit.health.probe import Probe


def node_job(config: NodeConfig, disabled: Sequence[str], probe: Probe) -> dict[str, object]:
    """The node's nightly rows as the sweep reads them (see hpckit.health.sweep.parse_job_output)."""
    start = time.monotonic()
    ctx, rows, notes = check_here(config, RunOptions("nightly", tuple(disabled)), probe, commit=True)
    return {
        "node": ctx.node,
        "tier": "nightly",
        "seconds": round(time.monotonic() - start, 3),
        "rows": [r.to_dict() for r in rows],
        "notes": notes,
    }


def _args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="hpckit health job", description="The nightly tier on this node as one JSON line (run by the sweep)."
    )
    parser.add_argument("--config", dest="config_path", help="health config (default /etc/hpckit/health.json)")
    parser.add_argument("--disable", action="append", default=[], metavar="CHECK", help="skip a check or area")
    return parser.parse_args(list(argv))


def main(argv: Sequence[str]) -> int:
    args = _args(argv)  # a bad option exits 2 with argparse's usage line
    try:
        doc = node_job(load_config(args.config_path), args.disable, LocalProbe())
    except HpckitError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(doc, separators=(",", ":")))
    return 0
