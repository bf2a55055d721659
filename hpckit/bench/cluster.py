"""What the bench needs to know about the cluster it runs on, from the deployment record's blueprint."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from hpckit.blueprint.models import Blueprint, Partition
from hpckit.blueprint.toolchain import partition_toolchain
from hpckit.clusters import ClusterDir, RecordError, recorded_clusters
from hpckit.errors import InputError
from hpckit.hardware import hardware_table
from hpckit.jobs.library import local_site_defaults
from hpckit.jobs.params import suggest

DEFAULT_SHARED = "/shared"


@dataclass(frozen=True)
class ClusterFacts:
    """The partition a bench runs in, as declared. Unknown facts (no record) are None or 0."""

    name: str | None = None
    partition: str | None = None  # None: Slurm's default partition
    partition_nodes: int | None = None
    cpus_per_node: int | None = None
    gpus_per_node: int = 0
    gpu: str | None = None  # hardware table key
    ib_hcas: int = 0
    ib_rate_gbps: float = 0.0
    shared_mount: str | None = None
    lab: bool = False  # the lab's GPUs are character devices: torch cannot use them
    hca_names: tuple[str, ...] = ()  # the declared HCAs (mlx5_0 ...): the rails the bisect tests one by one
    nodes: tuple[str, ...] = ()  # the partition's nodes, as declared
    # What the deploy installed for the benchmarks (hpckit.blueprint.toolchain, the record's toolchain.json)
    toolchain: str | None = None  # "nccl-tests" or "torch"; None: nothing, the bench's own defaults
    python: str | None = None  # the torch virtualenv's interpreter
    nccl_tests_dir: str | None = None
    container: str | None = None  # the image nccl-tests runs in

    @property
    def usable_gpus_per_node(self) -> int:
        return 0 if self.lab else self.gpus_per_node


def facts_from_blueprint(
    bp: Blueprint, partition: str | None = None, recorded: Mapping[str, Any] | None = None
) -> ClusterFacts:
    """The partition's facts; its toolchain as ``recorded`` (the record's toolchain.json entry) where given, else
    as this hpckit derives it from the blueprint."""
    part = _partition(bp, partition)
    chain = dict(recorded) if recorded is not None else partition_toolchain(bp, part).as_dict()
    hw = bp.hardware_in(part)
    gpu = hardware_table().gpu(hw.gpus.type) if hw.gpus else None
    ib = hw.infiniband
    return ClusterFacts(
        name=bp.name,
        partition=part.name,
        partition_nodes=len(part.hostnames()),
        cpus_per_node=hw.cpus,
        gpus_per_node=hw.gpus.count if hw.gpus else 0,
        gpu=gpu.key if gpu else None,
        ib_hcas=len(ib.hcas) if ib else 0,
        ib_rate_gbps=float(hardware_table().ib_rates[ib.rate]) if ib else 0.0,
        hca_names=tuple(ib.hcas) if ib else (),
        nodes=tuple(part.hostnames()),
        shared_mount=bp.filesystems[0].mount if bp.filesystems else None,
        lab=bp.provider.type == "lab",
        toolchain=_text(chain.get("backend")),
        python=_text(chain.get("python")),
        nccl_tests_dir=_text(chain.get("nccl_tests_dir")),
        container=_text(chain.get("container")),
    )


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _partition(bp: Blueprint, name: str | None) -> Partition:
    names = [p.name for p in bp.partitions]
    if name is not None:
        for part in bp.partitions:
            if part.name == name:
                return part
        raise InputError(f"cluster {bp.name} has no partition {name!r}{suggest(name, names)} (has: {', '.join(names)})")
    return next((p for p in bp.partitions if p.default), bp.partitions[0])


def load_blueprint(cluster: str, state: Path | None = None) -> Blueprint:
    """The blueprint the cluster was last deployed with (the record's blueprint.json)."""
    path, data = ClusterDir.of(cluster, state).blueprint()
    try:
        return Blueprint.model_validate(data)
    except ValidationError as exc:
        raise RecordError(f"deployment record {path} is unreadable: {exc}") from None


def load_facts(cluster: str | None, partition: str | None, state: Path | None = None) -> ClusterFacts:
    """The record's facts for a named cluster; for this machine's own Slurm, only the partition asked for."""
    if cluster is None:
        # This machine's own Slurm (a login node): the Python the deploy named for its jobs, where it did.
        return ClusterFacts(partition=partition, python=_text(local_site_defaults().get("python")))
    bp = load_blueprint(cluster, state)
    recorded = ClusterDir.of(cluster, state).toolchain(_partition(bp, partition).name)
    return facts_from_blueprint(bp, partition, recorded)


def default_cluster(state: Path | None = None) -> str | None:
    """The cluster to bench when none is named: $HPCKIT_CLUSTER, else the only one deployed from here.

    None (Slurm on this machine) when there is no record, or more than one to choose from.
    """
    if named := os.environ.get("HPCKIT_CLUSTER"):
        return named
    recorded = recorded_clusters(state)
    return recorded[0] if len(recorded) == 1 else None
