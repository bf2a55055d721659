"""The check registry: each check is a function decorated with :func:`check`, registered at import.

A check takes a :class:`~hpckit.health.context.Context` and yields :class:`~hpckit.health.model.Measure`
values, one per metric (a GPU check yields one per GPU). Tiers: ``quick`` checks are cheap enough for
Slurm's HealthCheckProgram; ``nightly`` checks (GEMM, copy bandwidth, NCCL) load the GPUs and run only in
the sweep. The nightly run includes every quick check too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from hpckit.errors import InputError

if TYPE_CHECKING:
    from hpckit.health.context import Context
    from hpckit.health.model import Measure

Tier = Literal["quick", "nightly"]
TIERS: tuple[Tier, ...] = ("quick", "nightly")
CheckFunc = Callable[["Context"], Iterable["Measure"]]


@dataclass(frozen=True)
class Check:
    name: str  # "<area>.<what>", e.g. "host.munge"; the last field of a drain reason
    tier: Tier
    area: str  # host | gpu | ib
    description: str
    func: CheckFunc

    def runs_in(self, tier: Tier) -> bool:
        return self.tier == "quick" or tier == "nightly"


_REGISTRY: dict[str, Check] = {}


def check(name: str, *, tier: Tier = "quick", description: str = "") -> Callable[[CheckFunc], CheckFunc]:
    """Register ``func`` as the check ``name`` (a duplicate name is a programming error)."""

    def register(func: CheckFunc) -> CheckFunc:
        if name in _REGISTRY:
            raise ValueError(f"health check {name!r} registered twice")
        doc = description or ((func.__doc__ or "").strip().splitlines() or [""])[0]
        _REGISTRY[name] = Check(name, tier, name.split(".", 1)[0], doc, func)
        return func

    return register


def _load_builtin() -> None:
    # Importing the modules registers their checks; done on first use so that importing the registry is cheap.
    from hpckit.health.checks import load

    load()


def all_checks() -> list[Check]:
    _load_builtin()
    return list(_REGISTRY.values())


def get(name: str) -> Check:
    _load_builtin()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise InputError(f"no health check {name!r}; known: {', '.join(sorted(_REGISTRY))}") from None


def select(tier: Tier, disabled: Iterable[str] = (), only: Iterable[str] = ()) -> Iterator[Check]:
    """The checks of ``tier`` in registration order, less ``disabled`` (the per-check off switch).

    Names in ``disabled``/``only`` may be a whole area (``gpu``) or a check (``gpu.ecc``); an unknown name
    is an error, so that a typo never silently leaves a check on.
    """
    checks = all_checks()
    off = _expand(disabled, checks)
    wanted = _expand(only, checks) if only else {c.name for c in checks}
    for c in checks:
        if c.runs_in(tier) and c.name in wanted and c.name not in off:
            yield c


def _expand(names: Iterable[str], checks: list[Check]) -> set[str]:
    known = {c.name for c in checks}
    areas = {c.area for c in checks}
    out: set[str] = set()
    for name in names:
        if name in known:
            out.add(name)
        elif name in areas:
            out.update(c.name for c in checks if c.area == name)
        else:
            raise InputError(f"no health check or area {name!r}; known: {', '.join(sorted(known | areas))}")
    return out
