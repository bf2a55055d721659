"""What a node should look like and how hpckit acts on it: ``/etc/hpckit/health.json``.

The hpckit_health Ansible role renders this file on every host from the blueprint (GPU type and count,
InfiniBand, shared filesystems, the blueprint's ``health:`` settings). Without it, a node falls back to
what its slurm.conf line declares. Read with plain ``json`` (no pydantic): the quick tier runs every few
minutes as Slurm's HealthCheckProgram, where start-up time counts.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from hpckit.errors import InputError
from hpckit.health.policy import PolicySettings

DEFAULT_CONFIG = "/etc/hpckit/health.json"
DEFAULT_STORE = "/var/lib/hpckit/health"
DEFAULT_STATE_DIR = "/var/spool/hpckit/health"


class ConfigError(InputError):
    pass


@dataclass(frozen=True)
class Thresholds:
    """Host limits (not per hardware type; GPU and IB figures come from the hardware table)."""

    disk_warn_fraction: float = 0.10
    disk_fail_fraction: float = 0.02
    disk_fail_mib: float = 512.0  # a small disk can be 10 % free and still too full for a job (half a smaller one)
    write_warn_s: float = 1.0
    fs_timeout_s: float = 10.0
    munge_timeout_s: float = 5.0
    clock_warn_s: float = 0.1
    clock_fail_s: float = 60.0  # beyond this, munge credentials (TTL 300 s) are soon refused
    zombie_warn: int = 50
    dstate_warn: int = 10


@dataclass(frozen=True)
class GpuExpect:
    type: str  # hardware table key, GRES name or product name ("h100-sxm", "h100", "lab")
    count: int


@dataclass(frozen=True)
class IbExpect:
    hcas: tuple[str, ...]
    rate_gbps: float
    roce: bool = False


@dataclass(frozen=True)
class Mount:
    path: str
    write_dir: str  # where the write test writes (root_squash NFS needs a world-writable dir)


@dataclass(frozen=True)
class SshProbe:
    """How the sweep host reaches a node out of band (over SSH, not through Slurm) when no sweep job can
    run on it: to see why (munge, slurmd, the node gone) and to re-check a node hpckit took out."""

    user: str = "root"
    port: int = 22
    key: str | None = None  # a private key on the sweep host (default: ssh's own keys)
    known_hosts: str | None = None  # default: the sweep host's ~/.ssh/known_hosts
    connect_timeout_s: float = 5.0
    timeout_s: float = 90.0


@dataclass(frozen=True)
class NodeConfig:
    cluster: str = ""
    store: str = DEFAULT_STORE  # shared: history, verdicts, policy state
    state_dir: str = DEFAULT_STATE_DIR  # node-local: kernel log cursor, counters
    slurm_conf: str = "/etc/slurm/slurm.conf"
    gpus: GpuExpect | None = None
    infiniband: IbExpect | None = None
    mounts: tuple[Mount, ...] = ()
    disks: Mapping[str, str] = field(
        default_factory=lambda: {"spool": "/var/spool/slurmd", "tmp": "/tmp"}
    )  # label -> path whose filesystem must keep free space
    policy: PolicySettings = field(default_factory=PolicySettings)
    thresholds: Thresholds = field(default_factory=Thresholds)
    quick_interval_s: float = 300.0  # Slurm's HealthCheckInterval: how fresh a node's verdict must be
    nightly: str = "0 2 * * *"  # cron schedule of the sweep
    quick_confirm_fails: int = 2  # the quick tier drains on the 2nd FAIL in a row (see hpckit.health.policy)
    command: tuple[str, ...] = ("hpckit", "health")  # how a node runs `hpckit health` (sweep jobs, schedule)
    probe: SshProbe | None = None  # out-of-band checks over SSH, where the blueprint allows them
    source: str = "defaults"  # where this config came from, for messages

    @property
    def fresh_s(self) -> float:
        """A node's latest verdict counts for the fleet view while younger than three check intervals."""
        return 3.0 * self.quick_interval_s


def load_config(path: str | None = None, *, required: bool = False) -> NodeConfig:
    """The config at ``path`` (default /etc/hpckit/health.json); defaults when it does not exist."""
    target = Path(path or DEFAULT_CONFIG)
    try:
        text = target.read_text(encoding="utf-8")
    except FileNotFoundError:
        if required or path is not None:
            raise ConfigError(f"health config {target} does not exist") from None
        return NodeConfig()
    except OSError as exc:
        raise ConfigError(f"cannot read health config {target}: {exc.strerror or exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{target}, line {exc.lineno}: not JSON: {exc.msg}") from None
    return parse_config(data, str(target))


def parse_config(data: Any, source: str) -> NodeConfig:
    r = _Reader(source)
    top = r.mapping(data, "")
    base = NodeConfig()
    return NodeConfig(
        cluster=r.text(top, "cluster", ""),
        store=r.text(top, "store", base.store),
        state_dir=r.text(top, "state_dir", base.state_dir),
        slurm_conf=r.text(top, "slurm_conf", base.slurm_conf),
        gpus=_gpus(r, top["gpus"]) if top.get("gpus") is not None else None,
        infiniband=_ib(r, top["infiniband"]) if top.get("infiniband") is not None else None,
        mounts=tuple(_mount(r, item, f"mounts[{i}]") for i, item in enumerate(r.items(top, "mounts"))),
        disks={str(k): r.text(r.mapping(top["disks"], "disks"), str(k)) for k in top["disks"]}
        if "disks" in top
        else base.disks,
        policy=_policy(r, r.mapping(top.get("policy", {}), "policy")),
        thresholds=_thresholds(r, r.mapping(top.get("thresholds", {}), "thresholds")),
        quick_interval_s=r.number(top, "quick_interval_s", base.quick_interval_s, minimum=1),
        nightly=r.text(top, "nightly", base.nightly),
        quick_confirm_fails=int(r.number(top, "quick_confirm_fails", base.quick_confirm_fails, minimum=1)),
        command=tuple(r.word(c, f"command[{i}]") for i, c in enumerate(r.items(top, "command"))) or base.command,
        probe=_probe(r, top["probe"]) if top.get("probe") is not None else None,
        source=source,
    )


def _gpus(r: _Reader, value: Any) -> GpuExpect:
    data = r.mapping(value, "gpus")
    return GpuExpect(r.text(data, "type"), int(r.number(data, "count", None, minimum=0)))


def _ib(r: _Reader, value: Any) -> IbExpect:
    data = r.mapping(value, "infiniband")
    hcas = tuple(r.word(h, f"infiniband.hcas[{i}]") for i, h in enumerate(r.items(data, "hcas")))
    return IbExpect(hcas, r.number(data, "rate_gbps", None, minimum=1), bool(data.get("roce", False)))


def _probe(r: _Reader, value: Any) -> SshProbe:
    data = r.mapping(value, "probe")
    base = SshProbe()
    known = {f.name for f in fields(SshProbe)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise r.error("probe", f"unknown key {unknown[0]!r}; known: {', '.join(sorted(known))}")
    return SshProbe(
        user=r.text(data, "user", base.user),
        port=int(r.number(data, "port", base.port, minimum=1)),
        key=r.text(data, "key") if data.get("key") is not None else None,
        known_hosts=r.text(data, "known_hosts") if data.get("known_hosts") is not None else None,
        connect_timeout_s=r.number(data, "connect_timeout_s", base.connect_timeout_s, minimum=0.1),
        timeout_s=r.number(data, "timeout_s", base.timeout_s, minimum=1),
    )


def _mount(r: _Reader, item: Any, where: str) -> Mount:
    if isinstance(item, str):
        return Mount(item, item)
    data = r.mapping(item, where)
    path = r.text(data, "path")
    return Mount(path, r.text(data, "write_dir", path))


def _policy(r: _Reader, data: Mapping[str, Any]) -> PolicySettings:
    base = PolicySettings()
    disabled = frozenset(
        r.word(c, f"policy.disabled_checks[{i}]") for i, c in enumerate(r.items(data, "disabled_checks"))
    )
    return replace(
        base,
        drain=bool(data.get("drain", base.drain)),
        resume_after=int(r.number(data, "resume_after", base.resume_after, minimum=1)),
        escalate_unknown_after=int(r.number(data, "escalate_unknown_after", base.escalate_unknown_after, minimum=1)),
        circuit_breaker=r.number(data, "circuit_breaker", base.circuit_breaker, minimum=0),
        breaker_min_nodes=int(r.number(data, "breaker_min_nodes", base.breaker_min_nodes, minimum=1)),
        disabled_checks=disabled,
        confirm_fails=int(r.number(data, "confirm_fails", base.confirm_fails, minimum=1)),
    )


def _thresholds(r: _Reader, data: Mapping[str, Any]) -> Thresholds:
    base = Thresholds()
    known = {f.name for f in fields(Thresholds)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise r.error("thresholds", f"unknown key {unknown[0]!r}; known: {', '.join(sorted(known))}")
    values = {k: r.number(data, k, getattr(base, k), minimum=0) for k in data}
    return replace(base, **{k: type(getattr(base, k))(v) for k, v in values.items()})


class _Reader:
    """Typed field access whose errors name the file and the field."""

    def __init__(self, source: str) -> None:
        self.source = source

    def error(self, where: str, message: str) -> ConfigError:
        return ConfigError(f"{self.source}: {where or 'top level'}: {message}")

    def mapping(self, value: Any, where: str) -> Mapping[str, Any]:
        if not isinstance(value, dict):
            raise self.error(where, f"expected an object, got {type(value).__name__}")
        return value

    def items(self, data: Mapping[str, Any], key: str) -> list[Any]:
        value = data.get(key)
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.error(key, f"expected a list, got {type(value).__name__}")
        return value

    def word(self, value: Any, where: str) -> str:
        if not isinstance(value, str) or not value:
            raise self.error(where, f"expected text, got {value!r}")
        return value

    def text(self, data: Mapping[str, Any], key: str, default: str | None = None) -> str:
        value = data.get(key, default)
        if value is None:
            raise self.error(key, "missing")
        if not isinstance(value, str):
            raise self.error(key, f"expected text, got {value!r}")
        return value

    def number(
        self, data: Mapping[str, Any], key: str, default: float | None, *, minimum: float | None = None
    ) -> float:
        value = data.get(key, default)
        if value is None:
            raise self.error(key, "missing")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.error(key, f"expected a number, got {value!r}")
        if minimum is not None and value < minimum:
            raise self.error(key, f"must be at least {minimum:g}, got {value!r}")
        return float(value)
