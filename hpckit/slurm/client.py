"""Slurm commands through a Transport: the only place that knows their command lines."""

from __future__ import annotations

from dataclasses import dataclass

from hpckit.errors import HpckitError
from hpckit.proc import CommandResult, Transport
from hpckit.slurm.parsers import SINFO_NODES_FORMAT, NodeState, parse_sinfo_nodes, parse_version


class SlurmCommandError(HpckitError):
    def __init__(self, result: CommandResult) -> None:
        self.result = result
        super().__init__(result.describe())


@dataclass
class SlurmClient:
    transport: Transport

    def _run(self, *argv: str, timeout: float = 30.0) -> str:
        result = self.transport.run(argv, timeout=timeout)
        if not result.ok:
            raise SlurmCommandError(result)
        return result.stdout

    def nodes(self) -> list[NodeState]:
        return parse_sinfo_nodes(self._run("sinfo", "-h", "-N", "-o", SINFO_NODES_FORMAT))

    def version(self) -> str:
        return parse_version(self._run("sinfo", "--version"))
