"""`python -m hpckit.health ...`: the health commands alone (the HealthCheckProgram wrapper uses this)."""

from hpckit.cli.health import main

main()
