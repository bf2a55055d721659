"""Node health: checks (hpckit.health.checks, registered in hpckit.health.registry) judged into rows,
the drain policy (hpckit.health.policy, pure), the node's own run (hpckit.health.node, Slurm's
HealthCheckProgram) and the nightly sweep (hpckit.health.sweep), their store, history and report.

Nothing is imported here: the quick tier imports only what it uses."""
