"""`python -m hpckit.health ...`: the health commands alone (the HealthCheckProgram wrapper uses this).

hpckit/cli/health.py is loaded from its file rather than imported as ``hpckit.cli.health``: importing
the ``hpckit.cli`` package would load every other command group (blueprints, deploy, Ansible glue) on
each quick-tier run, which Slurm starts on every node every few minutes. ``job``, which the nightly
sweep starts on every node at once, skips click as well.
"""

import sys

if sys.argv[1:2] == ["job"]:
    from hpckit.health.job import main

    sys.exit(main(sys.argv[2:]))

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location("hpckit_health_cli", Path(__file__).parent.parent / "cli" / "health.py")
assert _spec is not None and _spec.loader is not None
_cli = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_cli)
_cli.main()
