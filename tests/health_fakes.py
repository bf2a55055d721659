"""Test doubles for the health flows: a Slurm that answers sinfo/scontrol from a dict (a FakeTransport)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from hpckit.proc import CommandResult
from tests.fakes import FakeTransport


@dataclass
class FakeNode:
    state: str = "idle"
    reason: str = ""
    flags: str = ""
    partition: str = "gpu*"


@dataclass
class FakeSlurm(FakeTransport):
    """Answers `sinfo -h -N -o '%N|%T|%P|%E' [-n a,b]` and `scontrol update nodename=X state=...`."""

    nodes: dict[str, FakeNode] = field(default_factory=dict)
    updates: list[tuple[str, ...]] = field(default_factory=list)
    broken: bool = False  # every command fails (munge down on this node)
    other: Callable[[tuple[str, ...]], CommandResult] | None = None  # answers what is not faked here
    where: str = field(default="fake", kw_only=True)

    @classmethod
    def of(cls, *names: str) -> FakeSlurm:
        return cls({n: FakeNode() for n in names})

    def answer(self, args: tuple[str, ...]) -> CommandResult:
        if self.broken:
            return CommandResult(args, 1, "", "Invalid authentication credential", self.where)
        if args[0] == "sinfo":
            wanted = args[args.index("-n") + 1].split(",") if "-n" in args else list(self.nodes)
            parts = "%P" in args[args.index("-o") + 1]  # '%N|%T|%P|%E' or '%N|%T|%E'
            lines = [
                f"{n}|{s.state}{s.flags}|{s.partition + '|' if parts else ''}{s.reason}"
                for n, s in self.nodes.items()
                if n in wanted
            ]
            return CommandResult(args, 0, "\n".join(lines) + "\n", "", self.where)
        if args[:2] == ("scontrol", "update"):
            self.updates.append(args)
            fields = dict(a.split("=", 1) for a in args[2:])
            node = self.nodes[fields["nodename"]]
            if fields["state"] == "drain":  # sinfo shows DOWN+DRAIN as drained too
                node.state = "drained" if node.state in ("idle", "drained", "down") else "draining"
                node.reason = fields["reason"]
            elif fields["state"] == "resume":  # a node that does not answer stays so ('*') until it does
                node.state, node.reason = "idle", ""
            return CommandResult(args, 0, "", "", self.where)
        if self.other is not None:
            return self.other(args)
        return CommandResult(args, 127, "", f"{args[0]}: not faked", self.where)
