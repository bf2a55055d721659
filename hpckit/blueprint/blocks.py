"""`slurm.topology: {type: block}`: the blocks of topology/block and the rules Slurm checks when it reads
them, per release (hpckit/slurm_releases.py), so that a topology slurmctld would refuse fails at
`hpckit validate` with the blueprint line instead.

Rules from the 24.11 parser (src/plugins/topology/block/block_record.c) and topology.conf(5): block names
unique, every block with nodes that exist, BlockSizes each a power-of-two multiple of the base size;
before 25.05 no block smaller than the base size. A compute node outside every block cannot be given to
any job, so hpckit refuses that too.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

from hpckit.blueprint.errors import Path_
from hpckit.blueprint.models import expand_hosts
from hpckit.slurm_releases import Version, conf_key, topology_key_problem, topology_small_blocks

__all__ = ["cut_blocks", "topology_problems"]

Problems = Iterator[tuple[Path_, str]]
_MAX_LEVEL = 15  # the parser's largest block level: a size at most 2**15 times the base


def cut_blocks(hosts: Sequence[str], size: int) -> list[tuple[str, list[str]]]:
    """Consecutive runs of ``size`` hosts, named block001, block002, ... (the last run may be shorter)."""
    return [(f"block{i // size + 1:03d}", list(hosts[i : i + size])) for i in range(0, len(hosts), size)]


def topology_problems(data: Any, release: Version) -> list[tuple[Path_, str]]:
    """Every problem of the raw blueprint's `slurm.topology` for Slurm ``release``."""
    slurm = data.get("slurm") if isinstance(data, dict) else None
    topo = slurm.get("topology") if isinstance(slurm, dict) else None
    if not isinstance(topo, dict) or topo.get("type") != "block":
        return []
    path: Path_ = ("slurm", "topology")
    span = conf_key("TopologyPlugin")
    plugin = span.plugins["topology/block"].problem("topology/block", release) if span else None
    if plugin is not None:
        return [((*path, "type"), f"{plugin} (set slurm.version to a release that has it)")]
    return list(_sizes(topo, release)) + list(_blocks(data, topo, release))


def _sizes(topo: dict[str, Any], release: Version) -> Problems:
    sizes = topo.get("sizes")
    if not isinstance(sizes, list) or not sizes:
        return
    path: Path_ = ("slurm", "topology", "sizes")
    problem = topology_key_problem("BlockSizes", release)
    if problem is not None:
        yield path, f"{problem} (23.11 sizes blocks by BlockLevels, which hpckit leaves at Slurm's default)"
        return
    if not all(isinstance(s, int) and s > 0 for s in sizes):
        return  # the model reports a size that is not a positive number
    base = sizes[0]
    for i, size in enumerate(sizes[1:], 1):
        ratio = size / base
        level = math.log2(ratio) if ratio >= 1 else -1.0
        if size <= sizes[i - 1] or size % base or level != int(level) or level > _MAX_LEVEL:
            yield (
                (*path, i),
                f"block size {size} must be larger than {sizes[i - 1]} and a power-of-two multiple of the base "
                f"size {base} (at most {base}x{2**_MAX_LEVEL})",
            )


def _blocks(data: dict[str, Any], topo: dict[str, Any], release: Version) -> Problems:
    path: Path_ = ("slurm", "topology")
    compute = _compute_hosts(data)
    given = topo.get("blocks")
    size = topo.get("block_size")
    if given and size is not None:
        yield path, "give either blocks or block_size, not both"
        return
    if not given and size is None:
        yield path, "topology/block needs its blocks: block_size (nodes per block) or blocks (named)"
        return
    if isinstance(size, int) and size > 0:
        blocks = [((*path, "block_size"), name, hosts) for name, hosts in cut_blocks(compute, size)]
    else:
        blocks = list(_named_blocks(given))
    yield from _check_blocks(blocks, compute, _base_size(topo, blocks), release)


def _named_blocks(given: Any) -> Iterator[tuple[Path_, str, list[str]]]:
    for i, block in enumerate(given if isinstance(given, list) else []):
        if isinstance(block, dict) and isinstance(block.get("nodes"), str):
            try:
                hosts = expand_hosts(block["nodes"])
            except ValueError:
                continue  # the model reports the hostlist
            yield ("slurm", "topology", "blocks", i), str(block.get("name")), hosts


def _base_size(topo: dict[str, Any], blocks: list[tuple[Path_, str, list[str]]]) -> int:
    """Slurm's base block size: the first BlockSizes, else the first block's node count."""
    sizes = topo.get("sizes")
    if isinstance(sizes, list) and sizes and isinstance(sizes[0], int):
        return sizes[0]
    return len(blocks[0][2]) if blocks else 0


def _check_blocks(
    blocks: list[tuple[Path_, str, list[str]]], compute: list[str], base: int, release: Version
) -> Problems:
    names: set[str] = set()
    owner: dict[str, str] = {}
    known = set(compute)
    small_ok = topology_small_blocks(release)
    for path, name, hosts in blocks:
        if name in names:
            yield (*path, "name"), f"block {name!r} is already declared"
        names.add(name)
        unknown = [h for h in hosts if h not in known]
        if unknown:
            yield (*path, "nodes"), f"{unknown[0]!r} is not a compute node of this blueprint"
        for host in hosts:
            if host in owner and owner[host] != name:
                yield (*path, "nodes"), f"node {host!r} is also in block {owner[host]!r}"
            owner.setdefault(host, name)
        if len(hosts) < base and not small_ok:
            yield (
                path,
                (
                    f"block {name!r} has {len(hosts)} nodes, fewer than the base block size {base}: Slurm "
                    f"{release.series} refuses it (25.05 and later allow it)"
                ),
            )
    outside = [h for h in compute if h not in owner]
    if outside and blocks:
        yield (
            ("slurm", "topology"),
            (
                f"{len(outside)} compute node(s) in no block ({', '.join(outside[:3])}"
                f"{', ...' if len(outside) > 3 else ''}): topology/block gives no job a node outside its blocks"
            ),
        )


def _compute_hosts(data: dict[str, Any]) -> list[str]:
    """Every compute node, in declaration order, each once."""
    out: dict[str, None] = {}
    parts = data.get("partitions")
    for part in parts if isinstance(parts, list) else []:
        nodes = part.get("nodes") if isinstance(part, dict) else None
        try:
            out.update(dict.fromkeys(expand_hosts(nodes) if isinstance(nodes, str) else []))
        except ValueError:
            continue  # the model reports the hostlist
    return list(out)
