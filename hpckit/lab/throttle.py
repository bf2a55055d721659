"""Slow one lab node's network down, both ways, as a degraded NIC or cable would (tc's token bucket filter).

The node's own eth0 limits what it sends; the bridge's end of its veth, on the host, what it receives.
tbf, not netem: this kernel has no netem. The burst is small so that the limit holds from the first byte.
"""

from __future__ import annotations

from pathlib import Path

from hpckit import proc
from hpckit.lab import provider, state
from hpckit.lab.errors import LabError
from hpckit.lab.net import NODE_IFACE
from hpckit.lab.spec import DEFAULT_STATE_ROOT
from hpckit.lab.state import LabPaths

BURST = "16kb"
LATENCY = "50ms"


def throttle(cluster: str, node: str, rate: str, state_root: Path = DEFAULT_STATE_ROOT) -> None:
    """Limit the node's link to `rate` (tc units: 50mbit) in both directions; replaces an earlier limit."""
    tbf = ["root", "tbf", "rate", rate, "burst", BURST, "latency", LATENCY]
    _in_node(cluster, node, ["tc", "qdisc", "replace", "dev", NODE_IFACE, *tbf], state_root)
    _on_host(["tc", "qdisc", "replace", "dev", _host_end(cluster, node, state_root), *tbf])


def unthrottle(cluster: str, node: str, state_root: Path = DEFAULT_STATE_ROOT) -> None:
    """Back to the veth's default queue, both ways (nothing to do when it was not throttled)."""
    _in_node(cluster, node, ["sh", "-c", f"tc qdisc del dev {NODE_IFACE} root 2>/dev/null; true"], state_root)
    proc.run(["tc", "qdisc", "del", "dev", _host_end(cluster, node, state_root), "root"])


def _host_end(cluster: str, node: str, state_root: Path) -> str:
    spec = state.load_spec(LabPaths.of(state_root, cluster))
    return spec.veth_name(spec.node(node))


def _in_node(cluster: str, node: str, argv: list[str], state_root: Path) -> None:
    done = provider.lab_exec(cluster, node, argv, state_root=state_root, timeout=30)
    if done.rc != 0:
        raise LabError(f"{' '.join(argv)} in {node}: {done.stderr.strip()}")


def _on_host(argv: list[str]) -> None:
    done = proc.run(argv)
    if done.rc != 0:
        raise LabError(f"{' '.join(argv)}: {done.stderr.strip()}")
