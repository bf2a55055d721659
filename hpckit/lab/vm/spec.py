"""What a VM lab is: a LabSpec's machines (names, addresses, subnet, host link, state root) plus what a
virtual machine needs besides (memory, CPUs). Pure data, validated on construction."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpckit.lab.errors import LabError
from hpckit.lab.spec import LabNode, LabSpec

DEFAULT_MEMORY_MIB = 1024
MIN_MEMORY_MIB = 512
MAX_MEMORY_MIB = 16384
MAX_CPUS = 4
DEFAULT_SUBNET = "10.78.0.0/24"
DEFAULT_LINK = "hpkvm0"


@dataclass(frozen=True)
class VmSpec:
    """A VM lab. ``lab.bridge`` names this box's end of the link into the lab's network namespace."""

    lab: LabSpec
    memory_mib: dict[str, int] = field(default_factory=dict)  # per machine; others get default_memory_mib
    default_memory_mib: int = DEFAULT_MEMORY_MIB
    cpus: int = 1

    def __post_init__(self) -> None:
        if self.lab.shared_dirs:
            raise LabError("VM labs share no host directories (their filesystems come over NFS)")
        if any(n.gpus for n in self.lab.nodes):
            raise LabError("VM lab machines have no GPUs")
        for name, mib in [("(default)", self.default_memory_mib), *self.memory_mib.items()]:
            if name != "(default)":
                self.lab.node(name)  # a clear error for an unknown machine
            if isinstance(mib, bool) or not MIN_MEMORY_MIB <= mib <= MAX_MEMORY_MIB:
                raise LabError(f"machine {name}: memory must be {MIN_MEMORY_MIB}..{MAX_MEMORY_MIB} MiB, got {mib!r}")
        if isinstance(self.cpus, bool) or not 1 <= self.cpus <= MAX_CPUS:
            raise LabError(f"cpus must be 1..{MAX_CPUS}, got {self.cpus!r}")

    @property
    def cluster(self) -> str:
        return self.lab.cluster

    @property
    def nodes(self) -> tuple[LabNode, ...]:
        return self.lab.nodes

    @property
    def netns(self) -> str:
        """The network namespace holding the lab's bridge, taps and qemu processes."""
        return f"hpckvm-{self.lab.cluster}"

    def memory_of(self, name: str) -> int:
        return self.memory_mib.get(name, self.default_memory_mib)

    def with_state_root(self, state_root: Path) -> VmSpec:
        return VmSpec(
            LabSpec.from_mapping({**json.loads(self.lab.to_json()), "state_root": str(state_root)}),
            dict(self.memory_mib),
            self.default_memory_mib,
            self.cpus,
        )

    def to_json(self) -> str:
        data = {
            "lab": json.loads(self.lab.to_json()),
            "memory_mib": dict(self.memory_mib),
            "default_memory_mib": self.default_memory_mib,
            "cpus": self.cpus,
        }
        return json.dumps(data, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str, origin: str = "VM lab spec") -> VmSpec:
        try:
            data: Any = json.loads(text)
            return cls(
                LabSpec.from_mapping(data["lab"], origin),
                {str(k): int(v) for k, v in data.get("memory_mib", {}).items()},
                int(data.get("default_memory_mib", DEFAULT_MEMORY_MIB)),
                int(data.get("cpus", 1)),
            )
        except json.JSONDecodeError as exc:
            raise LabError(f"{origin}: not valid JSON ({exc})") from None
        except KeyError as exc:
            raise LabError(f"{origin}: missing field {exc.args[0]!r}") from None
        except (TypeError, ValueError, AttributeError) as exc:
            raise LabError(f"{origin}: malformed ({exc})") from None
